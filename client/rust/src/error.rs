//! opreg's errors, decoded from the `google.rpc.ErrorInfo` every status carries.

use tonic::Code;
use tonic_types::StatusExt;

use crate::client::error_info;
use crate::proto::{ErrorMetadataKey as Key, ErrorReason as Reason};

/// What a call to opreg can fail with: one variant per error reason of the
/// contract (`proto/opreg/v1/errors.proto`), with its metadata.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The key is registered with different parameters; fix the request or use a new key.
    #[error("parameter conflict (differing fields: {differing_fields:?})")]
    ParameterConflict {
        /// The top-level parameter fields whose values differ.
        differing_fields: Vec<String>,
        /// The digest registered with the key (hex).
        stored_digest: String,
        /// The digest of this request's parameters (hex).
        request_digest: String,
    },
    /// Another execution took over; stop writing.
    #[error(
        "fencing token {presented} is no longer current (current token {current}); stop writing"
    )]
    StaleFencingToken {
        /// The token the request carried.
        presented: u64,
        /// The operation's (or resource's) current token.
        current: u64,
    },
    /// This token already reported a different outcome.
    #[error("this token already completed with a different outcome")]
    AlreadyCompleted,
    /// No lease of this owner and token is live.
    #[error("the lease is held by another owner")]
    LeaseNotHeld,
    /// `ORIGINAL_OUTCOME_UNKNOWN`, `NOTHING_TO_COMPENSATE` or `ALREADY_COMPENSATED`.
    #[error("compensation refused: {reason}")]
    Compensation {
        /// The error reason, as the contract names it.
        reason: String,
    },
    /// An operator action the operation's status does not allow.
    #[error("invalid transition: the operation is {current_status} (held: {held})")]
    InvalidTransition {
        /// The operation's status (`OPERATION_STATUS_…`).
        current_status: String,
        /// Whether an operator holds it.
        held: bool,
    },
    /// `OPERATION_NOT_FOUND` or `RESOURCE_NOT_FOUND`.
    #[error("not found: {reason}")]
    NotFound {
        /// The error reason, as the contract names it.
        reason: String,
    },
    /// The fields and why each was refused.
    #[error("invalid argument: {violations:?}")]
    InvalidArgument {
        /// Each refused field, with why.
        violations: Vec<(String, String)>,
    },
    /// The server or its database cannot answer now; retry with backoff.
    #[error("unavailable: {message}")]
    ///
    /// Also a deadline that passed (DEADLINE_EXCEEDED, or the CANCELLED
    /// "Timeout expired" a server's own timer answers) and OPERATION_BUSY (the
    /// operation's row is locked elsewhere). `retry_after` is the server's
    /// `RetryInfo`, when it gave one: wait at least that long.
    Unavailable {
        /// The status message.
        message: String,
        /// The server's `RetryInfo` delay.
        retry_after: Option<std::time::Duration>,
    },
    /// The server's policy knows no such credentials: give an API key or a
    /// client certificate it names. Not retryable.
    #[error("unauthenticated: {message}")]
    Unauthenticated {
        /// The status message.
        message: String,
    },
    /// The principal lacks `role` in `namespace`. Not retryable.
    #[error(
        "permission denied: principal {principal:?} lacks the {role} role in namespace {namespace:?}"
    )]
    PermissionDenied {
        /// The principal the credentials name.
        principal: String,
        /// The namespace the request acts in.
        namespace: String,
        /// The role the RPC needs.
        role: String,
    },
    /// The namespace is past its calls per second on this server; transient:
    /// retry after `retry_after` (the server's `RetryInfo`).
    #[error("rate limited: at most {calls_per_second} calls per second in this namespace")]
    RateLimited {
        /// The namespace's limit on this server.
        calls_per_second: u32,
        /// The server's `RetryInfo` delay: when a token is free again.
        retry_after: Option<std::time::Duration>,
    },
    /// The replica holds as many waiting calls as it allows; transient: retry
    /// after `retry_after` (the server's `RetryInfo`).
    #[error("too many waiting calls: the server allows {limit}")]
    TooManyWaiters {
        /// The replica's limit of waiting calls.
        limit: usize,
        /// The server's `RetryInfo` delay.
        retry_after: Option<std::time::Duration>,
    },
    /// A Claim with `REUSE_POLICY_REJECT_EXISTING` found the key registered;
    /// not retryable.
    #[error("the operation key is already registered ({current_status})")]
    OperationExists {
        /// The operation's status (`OPERATION_STATUS_…`).
        current_status: String,
    },
    /// The request message is larger than the method accepts; not retryable.
    #[error("the request is larger than the {limit} bytes the server accepts for it")]
    MessageTooLarge {
        /// The largest request the method accepts, in bytes.
        limit: usize,
    },
    /// Any other status: an error of no contract reason, or a transport error.
    #[error("{0}")]
    Other(tonic::Status),
}

impl Error {
    /// Transport trouble worth retrying with backoff.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Unavailable { .. } | Error::RateLimited { .. } | Error::TooManyWaiters { .. }
        )
    }

    /// The least wait the server asked for before a retry.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Error::Unavailable { retry_after, .. }
            | Error::RateLimited { retry_after, .. }
            | Error::TooManyWaiters { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// What tonic's server-side timer answers when a deadline passes inside it.
const SERVER_TIMEOUT_MESSAGE: &str = "Timeout expired";

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        let server_timeout =
            status.code() == Code::Cancelled && status.message() == SERVER_TIMEOUT_MESSAGE;
        if server_timeout || matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded) {
            return Error::Unavailable {
                message: status.message().to_owned(),
                retry_after: status
                    .get_details_retry_info()
                    .and_then(|info| info.retry_delay),
            };
        }
        let Some(info) = error_info(&status) else {
            return Error::Other(status);
        };
        let Some(reason) = Reason::from_wire_name(&info.reason) else {
            return Error::Other(status);
        };
        let meta = |key: Key| {
            info.metadata
                .get(&key.wire_name())
                .cloned()
                .unwrap_or_default()
        };
        let token = |key: Key| meta(key).parse().unwrap_or_default();
        let retry_after = || {
            status
                .get_details_retry_info()
                .and_then(|info| info.retry_delay)
        };
        match reason {
            Reason::ParameterConflict => Error::ParameterConflict {
                differing_fields: meta(Key::DifferingFields)
                    .split(',')
                    .filter(|field| !field.is_empty())
                    .map(str::to_owned)
                    .collect(),
                stored_digest: meta(Key::StoredDigest),
                request_digest: meta(Key::RequestDigest),
            },
            Reason::StaleFencingToken => Error::StaleFencingToken {
                presented: token(Key::PresentedToken),
                current: token(Key::CurrentToken),
            },
            Reason::AlreadyCompleted => Error::AlreadyCompleted,
            Reason::InvalidTransition => Error::InvalidTransition {
                current_status: meta(Key::CurrentStatus),
                held: meta(Key::Held) == "true",
            },
            Reason::LeaseNotHeld => Error::LeaseNotHeld,
            Reason::OriginalOutcomeUnknown
            | Reason::NothingToCompensate
            | Reason::AlreadyCompensated => Error::Compensation {
                reason: info.reason,
            },
            Reason::OperationNotFound | Reason::ResourceNotFound => Error::NotFound {
                reason: info.reason,
            },
            Reason::InvalidArgument => Error::InvalidArgument {
                violations: status
                    .get_details_bad_request()
                    .map(|bad| {
                        bad.field_violations
                            .into_iter()
                            .map(|v| (v.field, v.description))
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            Reason::RateLimited => Error::RateLimited {
                calls_per_second: meta(Key::CallsPerSecond).parse().unwrap_or_default(),
                retry_after: retry_after(),
            },
            Reason::Unauthenticated => Error::Unauthenticated {
                message: status.message().to_owned(),
            },
            Reason::PermissionDenied => Error::PermissionDenied {
                principal: meta(Key::Principal),
                namespace: meta(Key::Namespace),
                role: meta(Key::Role),
            },
            Reason::MessageTooLarge => Error::MessageTooLarge {
                limit: meta(Key::Limit).parse().unwrap_or_default(),
            },
            Reason::TooManyWaiters => Error::TooManyWaiters {
                limit: meta(Key::Limit).parse().unwrap_or_default(),
                retry_after: retry_after(),
            },
            Reason::OperationExists => Error::OperationExists {
                current_status: meta(Key::CurrentStatus),
            },
            // Sent with UNAVAILABLE or DEADLINE_EXCEEDED, answered above.
            Reason::StoreUnavailable
            | Reason::OperationBusy
            | Reason::Overloaded
            | Reason::DeadlineExceeded => Error::Unavailable {
                message: status.message().to_owned(),
                retry_after: retry_after(),
            },
            Reason::Internal | Reason::Unspecified => Error::Other(status),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ERROR_DOMAIN;
    use std::time::Duration;
    use tonic_types::{ErrorDetails, StatusExt};

    #[test]
    fn busy_and_server_timeouts_are_transient_with_the_servers_delay() {
        let mut details = ErrorDetails::new();
        details.set_error_info(
            Reason::OperationBusy.wire_name(),
            ERROR_DOMAIN,
            std::collections::HashMap::new(),
        );
        details.set_retry_info(Some(Duration::from_millis(200)));
        let busy = Error::from(tonic::Status::with_error_details(
            Code::Unavailable,
            "busy",
            details,
        ));
        assert!(busy.is_transient());
        assert_eq!(busy.retry_after(), Some(Duration::from_millis(200)));
        assert!(Error::from(tonic::Status::cancelled("Timeout expired")).is_transient());
        assert!(!Error::from(tonic::Status::cancelled("the caller went away")).is_transient());
    }
}
