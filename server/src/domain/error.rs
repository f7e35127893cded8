//! The closed set of errors the registry reports. The transport maps each to
//! one gRPC code and one `google.rpc.ErrorInfo` reason; nothing else reaches callers.

/// An input field that failed validation, named by its proto field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldViolation {
    pub field: &'static str,
    pub description: String,
}

impl FieldViolation {
    pub fn new(field: &'static str, description: impl Into<String>) -> Self {
        Self {
            field,
            description: description.into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("invalid argument: {}", .0.iter().map(|v| format!("{}: {}", v.field, v.description)).collect::<Vec<_>>().join("; "))]
    InvalidArgument(Vec<FieldViolation>),
    /// Bytes that are not a valid request message (bad UTF-8, truncated,
    /// malformed, nested past the decoder's limit); `field` when it is known.
    #[error("the request is not a valid message: {description}")]
    Malformed {
        field: Option<String>,
        description: String,
    },
    #[error("the request message is larger than the {limit} bytes this method accepts")]
    MessageTooLarge { limit: usize },
    #[error("the operation key is registered with different parameters")]
    ParameterConflict {
        stored_digest: Vec<u8>,
        request_digest: Vec<u8>,
        differing_fields: Vec<String>,
        /// Set when the parameters match but `compensates` differs.
        compensates_differs: bool,
    },
    #[error("fencing token {presented} is superseded; the current token is {current}")]
    StaleFencingToken { presented: u64, current: u64 },
    #[error("fencing token {token} already completed with a different outcome")]
    AlreadyCompleted { token: u64 },
    #[error("the lease is held by another owner")]
    LeaseNotHeld,
    #[error("the original operation's outcome is not known yet; reconcile it before compensating")]
    OriginalOutcomeUnknown,
    #[error("the original operation did not succeed; there is nothing to compensate")]
    NothingToCompensate,
    #[error("the original operation is already compensated by {by}")]
    AlreadyCompensated { by: String },
    #[error("the operation's status ({}{}) does not allow this action", .current.as_str(), if *.held { ", held" } else { "" })]
    InvalidTransition {
        current: super::operation::Status,
        held: bool,
    },
    #[error(
        "this call needs credentials the server's policy knows: an API key (authorization: Bearer <key>) or a TLS client certificate"
    )]
    Unauthenticated,
    #[error("principal {principal:?} lacks the {role} role in namespace {namespace:?}")]
    PermissionDenied {
        principal: String,
        namespace: String,
        role: &'static str,
    },
    #[error("no such operation")]
    OperationNotFound,
    #[error("no such resource")]
    ResourceNotFound,
    #[error("the store is unavailable; retry with backoff")]
    StoreUnavailable,
    #[error("the operation is locked by another transaction; retry shortly")]
    OperationBusy,
    #[error("the caller's deadline passed before the call finished")]
    DeadlineExceeded,
    #[error("this server is at its limit of concurrent calls; retry shortly")]
    Overloaded,
    #[error(
        "the namespace's limit of {calls_per_second} calls per second on this server is reached; retry after the delay given"
    )]
    RateLimited {
        calls_per_second: u32,
        retry_after: std::time::Duration,
    },
    #[error("the operation key is already registered ({})", .status.as_str())]
    OperationExists { status: super::operation::Status },
    #[error(
        "this server holds its limit of {limit} waiting calls; claim again without a wait, or later"
    )]
    TooManyWaiters {
        limit: usize,
        retry_after: std::time::Duration,
    },
    #[error("internal error")]
    Internal,
}

impl RegistryError {
    pub fn invalid(field: &'static str, description: impl Into<String>) -> Self {
        Self::InvalidArgument(vec![FieldViolation::new(field, description)])
    }
}

pub type Result<T, E = RegistryError> = std::result::Result<T, E>;
