//! The one table from registry errors to gRPC statuses: a code, a message
//! fit for callers, and exactly one `google.rpc.ErrorInfo` (domain "opreg").

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::domain::error::RegistryError;

pub const ERROR_DOMAIN: &str = "opreg";

pub fn to_status(error: &RegistryError) -> Status {
    let mut metadata = HashMap::new();
    let (code, reason) = match error {
        RegistryError::InvalidArgument(_) | RegistryError::Malformed { .. } => {
            (Code::InvalidArgument, "INVALID_ARGUMENT")
        }
        RegistryError::MessageTooLarge { limit } => {
            metadata.insert("limit".into(), limit.to_string());
            (Code::ResourceExhausted, "MESSAGE_TOO_LARGE")
        }
        RegistryError::ParameterConflict {
            stored_digest,
            request_digest,
            differing_fields,
            compensates_differs,
        } => {
            metadata.insert("storedDigest".into(), hex::encode(stored_digest));
            metadata.insert("requestDigest".into(), hex::encode(request_digest));
            let (fields, truncated) = bounded_list(differing_fields);
            metadata.insert("differingFields".into(), fields);
            if truncated {
                metadata.insert("differingFieldsTruncated".into(), "true".into());
            }
            if *compensates_differs {
                metadata.insert("conflictingField".into(), "compensates".into());
            }
            (Code::AlreadyExists, "PARAMETER_CONFLICT")
        }
        RegistryError::StaleFencingToken { presented, current } => {
            metadata.insert("presentedToken".into(), presented.to_string());
            metadata.insert("currentToken".into(), current.to_string());
            (Code::Aborted, "STALE_FENCING_TOKEN")
        }
        RegistryError::AlreadyCompleted { token } => {
            metadata.insert("fencingToken".into(), token.to_string());
            (Code::FailedPrecondition, "ALREADY_COMPLETED")
        }
        RegistryError::LeaseNotHeld => (Code::FailedPrecondition, "LEASE_NOT_HELD"),
        RegistryError::OriginalOutcomeUnknown => {
            (Code::FailedPrecondition, "ORIGINAL_OUTCOME_UNKNOWN")
        }
        RegistryError::NothingToCompensate => (Code::FailedPrecondition, "NOTHING_TO_COMPENSATE"),
        RegistryError::AlreadyCompensated { by } => {
            metadata.insert("compensatedBy".into(), by.clone());
            (Code::FailedPrecondition, "ALREADY_COMPENSATED")
        }
        RegistryError::InvalidTransition { current, held } => {
            metadata.insert(
                "currentStatus".into(),
                super::responses::status(*current).as_str_name().into(),
            );
            metadata.insert("held".into(), held.to_string());
            (Code::FailedPrecondition, "INVALID_TRANSITION")
        }
        RegistryError::Unauthenticated => (Code::Unauthenticated, "UNAUTHENTICATED"),
        RegistryError::PermissionDenied {
            principal,
            namespace,
            role,
        } => {
            metadata.insert("principal".into(), principal.clone());
            metadata.insert("namespace".into(), namespace.clone());
            metadata.insert("role".into(), (*role).into());
            (Code::PermissionDenied, "PERMISSION_DENIED")
        }
        RegistryError::OperationNotFound => (Code::NotFound, "OPERATION_NOT_FOUND"),
        RegistryError::ResourceNotFound => (Code::NotFound, "RESOURCE_NOT_FOUND"),
        RegistryError::StoreUnavailable => (Code::Unavailable, "STORE_UNAVAILABLE"),
        RegistryError::OperationBusy => (Code::Unavailable, "OPERATION_BUSY"),
        RegistryError::Overloaded => (Code::Unavailable, "OVERLOADED"),
        RegistryError::RateLimited {
            calls_per_second, ..
        } => {
            metadata.insert("callsPerSecond".into(), calls_per_second.to_string());
            (Code::ResourceExhausted, "RATE_LIMITED")
        }
        RegistryError::DeadlineExceeded => (Code::DeadlineExceeded, "DEADLINE_EXCEEDED"),
        RegistryError::Internal => (Code::Internal, "INTERNAL"),
    };
    let mut details = ErrorDetails::new();
    details.set_error_info(reason, ERROR_DOMAIN, metadata);
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
    Status::with_error_details(code, error.to_string(), details)
}

/// How long a caller should wait before retrying an UNAVAILABLE answer.
fn retry_delay(error: &RegistryError) -> Option<std::time::Duration> {
    match error {
        RegistryError::StoreUnavailable => Some(std::time::Duration::from_secs(1)),
        RegistryError::OperationBusy | RegistryError::Overloaded => {
            Some(std::time::Duration::from_millis(200))
        }
        RegistryError::RateLimited { retry_after, .. } => Some(*retry_after),
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
