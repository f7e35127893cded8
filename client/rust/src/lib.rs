//! Typed Rust client for opreg: the generated stubs, a connection helper, and
//! access to the `google.rpc.ErrorInfo` every opreg error carries.

use tonic::transport::{Channel, Endpoint};
use tonic_types::{ErrorInfo, StatusExt};

pub use opreg_proto::v1 as proto;
pub use opreg_proto::v1::operation_registry_client::OperationRegistryClient;

/// The `ErrorInfo` domain of opreg's errors.
pub const ERROR_DOMAIN: &str = "opreg";

/// Connects to an opreg server, e.g. `http://127.0.0.1:50051`.
pub async fn connect(
    endpoint: impl Into<String>,
) -> Result<OperationRegistryClient<Channel>, tonic::transport::Error> {
    let channel = Endpoint::from_shared(endpoint.into())?
        .tcp_nodelay(true)
        .connect()
        .await?;
    Ok(OperationRegistryClient::new(channel))
}

/// The opreg `ErrorInfo` of a failed call, if it carries one.
pub fn error_info(status: &tonic::Status) -> Option<ErrorInfo> {
    status
        .get_details_error_info()
        .filter(|info| info.domain == ERROR_DOMAIN)
}

/// The `ErrorInfo.reason` of a failed call, e.g. `PARAMETER_CONFLICT`.
pub fn error_reason(status: &tonic::Status) -> Option<String> {
    error_info(status).map(|info| info.reason)
}

/// Builds `ClaimRequest.parameters` from JSON. Integers beyond 2^53 lose
/// precision, as they would in any JSON number.
pub fn parameters(json: serde_json::Value) -> prost_types::Struct {
    match value(json).kind {
        Some(prost_types::value::Kind::StructValue(object)) => object,
        _ => prost_types::Struct::default(),
    }
}

fn value(json: serde_json::Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match json {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        serde_json::Value::String(s) => Kind::StringValue(s),
        serde_json::Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.into_iter().map(value).collect(),
        }),
        serde_json::Value::Object(members) => Kind::StructValue(prost_types::Struct {
            fields: members.into_iter().map(|(k, v)| (k, value(v))).collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}
