//! The error vocabulary of `proto/opreg/v1/errors.proto` as it travels in
//! `google.rpc.ErrorInfo`: reasons and metadata keys are strings on the wire,
//! derived here from the enums so that no side spells them by hand.

use crate::v1::{ErrorMetadataKey, ErrorReason};

/// The `ErrorInfo.domain` of every opreg error.
pub const ERROR_DOMAIN: &str = "opreg";

impl ErrorReason {
    /// The reason as `ErrorInfo.reason` carries it, e.g. `PARAMETER_CONFLICT`.
    pub fn wire_name(self) -> &'static str {
        let name = self.as_str_name();
        name.strip_prefix("ERROR_REASON_").unwrap_or(name)
    }

    /// The reason an `ErrorInfo.reason` names; `None` for one this build does not know.
    pub fn from_wire_name(reason: &str) -> Option<Self> {
        Self::from_str_name(&format!("ERROR_REASON_{reason}")).filter(|r| *r != Self::Unspecified)
    }

    /// The gRPC code the reason travels with.
    pub fn code(self) -> tonic::Code {
        use tonic::Code;
        match self {
            Self::Unspecified | Self::Internal => Code::Internal,
            Self::InvalidArgument => Code::InvalidArgument,
            Self::MessageTooLarge | Self::RateLimited | Self::TooManyWaiters => {
                Code::ResourceExhausted
            }
            Self::ParameterConflict | Self::OperationExists => Code::AlreadyExists,
            Self::StaleFencingToken => Code::Aborted,
            Self::AlreadyCompleted
            | Self::LeaseNotHeld
            | Self::OriginalOutcomeUnknown
            | Self::NothingToCompensate
            | Self::AlreadyCompensated
            | Self::InvalidTransition => Code::FailedPrecondition,
            Self::Unauthenticated => Code::Unauthenticated,
            Self::PermissionDenied => Code::PermissionDenied,
            Self::OperationNotFound | Self::ResourceNotFound => Code::NotFound,
            Self::StoreUnavailable | Self::OperationBusy | Self::Overloaded => Code::Unavailable,
            Self::DeadlineExceeded => Code::DeadlineExceeded,
        }
    }
}

impl ErrorMetadataKey {
    /// The key as `ErrorInfo.metadata` carries it, e.g. `storedDigest`.
    pub fn wire_name(self) -> String {
        let name = self.as_str_name();
        let words = name.strip_prefix("ERROR_METADATA_KEY_").unwrap_or(name);
        let mut key = String::with_capacity(words.len());
        for (i, word) in words.split('_').enumerate() {
            let word = word.to_ascii_lowercase();
            let mut chars = word.chars();
            match (i, chars.next()) {
                (0, Some(first)) => key.push(first),
                (_, Some(first)) => key.push(first.to_ascii_uppercase()),
                (_, None) => {}
            }
            key.extend(chars);
        }
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_and_keys_travel_as_the_contract_says() {
        assert_eq!(
            ErrorReason::ParameterConflict.wire_name(),
            "PARAMETER_CONFLICT"
        );
        assert_eq!(
            ErrorReason::from_wire_name("STALE_FENCING_TOKEN"),
            Some(ErrorReason::StaleFencingToken)
        );
        assert_eq!(ErrorReason::from_wire_name("UNSPECIFIED"), None);
        assert_eq!(ErrorReason::from_wire_name("NO_SUCH_REASON"), None);
        assert_eq!(ErrorMetadataKey::StoredDigest.wire_name(), "storedDigest");
        assert_eq!(
            ErrorMetadataKey::DifferingFieldsTruncated.wire_name(),
            "differingFieldsTruncated"
        );
        assert_eq!(ErrorMetadataKey::Limit.wire_name(), "limit");
    }
}
