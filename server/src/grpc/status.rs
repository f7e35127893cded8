//! The one table from registry errors to gRPC statuses: a code, a message
//! fit for callers, and exactly one `google.rpc.ErrorInfo` (domain "opreg").

use std::collections::HashMap;

use opreg_proto::v1::{ErrorMetadataKey as Key, ErrorReason as Reason};
use tonic::Status;
use tonic_types::{ErrorDetails, StatusExt};

use crate::domain::error::RegistryError;

pub use opreg_proto::errors::ERROR_DOMAIN;

pub fn to_status(error: &RegistryError) -> Status {
    let mut metadata = HashMap::new();
    let mut put = |key: Key, value: String| {
        metadata.insert(key.wire_name(), value);
    };
    let reason = match error {
        RegistryError::InvalidArgument(_) | RegistryError::Malformed { .. } => {
            Reason::InvalidArgument
        }
        RegistryError::MessageTooLarge { limit } => {
            put(Key::Limit, limit.to_string());
            Reason::MessageTooLarge
        }
        RegistryError::ParameterConflict {
            stored_digest,
            request_digest,
            differing_fields,
            compensates_differs,
        } => {
            put(Key::StoredDigest, hex::encode(stored_digest));
            put(Key::RequestDigest, hex::encode(request_digest));
            let (fields, truncated) = bounded_list(differing_fields);
            put(Key::DifferingFields, fields);
            if truncated {
                put(Key::DifferingFieldsTruncated, "true".into());
            }
            if *compensates_differs {
                put(Key::ConflictingField, "compensates".into());
            }
            Reason::ParameterConflict
        }
        RegistryError::StaleFencingToken { presented, current } => {
            put(Key::PresentedToken, presented.to_string());
            put(Key::CurrentToken, current.to_string());
            Reason::StaleFencingToken
        }
        RegistryError::AlreadyCompleted { token } => {
            put(Key::FencingToken, token.to_string());
            Reason::AlreadyCompleted
        }
        RegistryError::LeaseNotHeld => Reason::LeaseNotHeld,
        RegistryError::OriginalOutcomeUnknown => Reason::OriginalOutcomeUnknown,
        RegistryError::NothingToCompensate => Reason::NothingToCompensate,
        RegistryError::AlreadyCompensated { by } => {
            put(Key::CompensatedBy, by.clone());
            Reason::AlreadyCompensated
        }
        RegistryError::InvalidTransition { current, held } => {
            put(
                Key::CurrentStatus,
                super::responses::status(*current).as_str_name().into(),
            );
            put(Key::Held, held.to_string());
            Reason::InvalidTransition
        }
        RegistryError::Unauthenticated => Reason::Unauthenticated,
        RegistryError::PermissionDenied {
            principal,
            namespace,
            role,
        } => {
            put(Key::Principal, principal.clone());
            put(Key::Namespace, namespace.clone());
            put(Key::Role, (*role).into());
            Reason::PermissionDenied
        }
        RegistryError::OperationNotFound => Reason::OperationNotFound,
        RegistryError::ResourceNotFound => Reason::ResourceNotFound,
        RegistryError::StoreUnavailable => Reason::StoreUnavailable,
        RegistryError::OperationBusy => Reason::OperationBusy,
        RegistryError::Overloaded => Reason::Overloaded,
        RegistryError::RateLimited {
            calls_per_second, ..
        } => {
            put(Key::CallsPerSecond, calls_per_second.to_string());
            Reason::RateLimited
        }
        RegistryError::DeadlineExceeded => Reason::DeadlineExceeded,
        RegistryError::OperationExists { status } => {
            put(
                Key::CurrentStatus,
                super::responses::status(*status).as_str_name().into(),
            );
            Reason::OperationExists
        }
        RegistryError::TooManyWaiters { limit, .. } => {
            put(Key::Limit, limit.to_string());
            Reason::TooManyWaiters
        }
        RegistryError::Internal => Reason::Internal,
    };
    let mut details = ErrorDetails::new();
    details.set_error_info(reason.wire_name(), ERROR_DOMAIN, metadata);
    if let Some(delay) = retry_delay(error) {
        details.set_retry_info(Some(delay));
    }
    match error {
        RegistryError::InvalidArgument(violations) => {
            for violation in violations {
                details.add_bad_request_violation(violation.field, &violation.description);
            }
        }
        RegistryError::Malformed {
            field: Some(field),
            description,
        } => {
            details.add_bad_request_violation(field.as_str(), description.as_str());
        }
        _ => {}
    }
    Status::with_error_details(reason.code(), error.to_string(), details)
}

/// How long a caller should wait before retrying an UNAVAILABLE answer.
fn retry_delay(error: &RegistryError) -> Option<std::time::Duration> {
    match error {
        RegistryError::StoreUnavailable => Some(std::time::Duration::from_secs(1)),
        RegistryError::OperationBusy | RegistryError::Overloaded => {
            Some(std::time::Duration::from_millis(200))
        }
        RegistryError::RateLimited { retry_after, .. }
        | RegistryError::TooManyWaiters { retry_after, .. } => Some(*retry_after),
        _ => None,
    }
}

/// Status details travel in a header: at most this many bytes of field names.
const MAX_LIST_BYTES: usize = 1024;

/// `names` joined by commas, cut at whole names to stay small; true when cut.
fn bounded_list(names: &[String]) -> (String, bool) {
    let mut joined = String::new();
    for name in names {
        if joined.len() + name.len() + 1 > MAX_LIST_BYTES {
            return (joined, true);
        }
        if !joined.is_empty() {
            joined.push(',');
        }
        joined.push_str(name);
    }
    (joined, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    /// Every reason of the contract is what some registry error is sent as,
    /// with the code the contract gives it: a reason added to errors.proto
    /// that the server never sends fails here.
    #[test]
    fn every_reason_of_the_contract_is_sent() {
        use crate::domain::operation::Status as Current;
        let errors = [
            RegistryError::invalid("field", "why"),
            RegistryError::MessageTooLarge { limit: 1 },
            RegistryError::ParameterConflict {
                stored_digest: vec![1],
                request_digest: vec![2],
                differing_fields: vec!["amount".into()],
                compensates_differs: false,
            },
            RegistryError::StaleFencingToken {
                presented: 1,
                current: 2,
            },
            RegistryError::AlreadyCompleted { token: 1 },
            RegistryError::LeaseNotHeld,
            RegistryError::OriginalOutcomeUnknown,
            RegistryError::NothingToCompensate,
            RegistryError::AlreadyCompensated { by: "k".into() },
            RegistryError::InvalidTransition {
                current: Current::Succeeded,
                held: false,
            },
            RegistryError::Unauthenticated,
            RegistryError::PermissionDenied {
                principal: "p".into(),
                namespace: "n".into(),
                role: "write",
            },
            RegistryError::OperationNotFound,
            RegistryError::ResourceNotFound,
            RegistryError::StoreUnavailable,
            RegistryError::OperationBusy,
            RegistryError::Overloaded,
            RegistryError::RateLimited {
                calls_per_second: 1,
                retry_after: std::time::Duration::from_secs(1),
            },
            RegistryError::DeadlineExceeded,
            RegistryError::OperationExists {
                status: crate::domain::operation::Status::Failed,
            },
            RegistryError::TooManyWaiters {
                limit: 1,
                retry_after: std::time::Duration::from_secs(1),
            },
            RegistryError::Internal,
        ];
        let mut sent = std::collections::BTreeSet::new();
        for error in &errors {
            let status = to_status(error);
            let info = status.get_details_error_info().unwrap();
            let reason = Reason::from_wire_name(&info.reason).unwrap();
            assert_eq!(status.code(), reason.code(), "{reason:?}");
            assert_eq!(info.domain, ERROR_DOMAIN);
            sent.insert(reason as i32);
        }
        let contract: std::collections::BTreeSet<i32> = (1..)
            .map_while(|n| Reason::try_from(n).ok())
            .map(|reason| reason as i32)
            .collect();
        assert_eq!(sent, contract);
    }

    #[test]
    fn statuses_carry_one_error_info_and_field_violations() {
        let status = to_status(&RegistryError::invalid("lease_ttl", "too long"));
        assert_eq!(status.code(), Code::InvalidArgument);
        let details = status.get_error_details();
        assert_eq!(details.error_info().unwrap().reason, "INVALID_ARGUMENT");
        assert_eq!(
            details.bad_request().unwrap().field_violations[0].field,
            "lease_ttl"
        );
    }

    #[test]
    fn differing_fields_stay_small() {
        let many: Vec<String> = (0..1_000).map(|i| format!("field_{i}")).collect();
        let (list, truncated) = bounded_list(&many);
        assert!(truncated && list.len() <= MAX_LIST_BYTES && list.starts_with("field_0,field_1"));
        assert_eq!(
            bounded_list(&["a".into(), "b".into()]),
            ("a,b".into(), false)
        );
    }

    #[test]
    fn store_failures_say_nothing_about_the_database() {
        let status = to_status(&RegistryError::StoreUnavailable);
        assert_eq!(status.code(), Code::Unavailable);
        assert!(status.get_error_details().retry_info().is_some());
        assert!(!status.message().to_lowercase().contains("sql"));
    }
}
