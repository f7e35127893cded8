//! The request conversions on any bytes: the first byte picks a request type,
//! the rest is decoded as it (as tonic would), and converting it into a
//! command never panics; it is a command or a refusal naming fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opreg_proto::v1 as pb;
use opreg_server::config::Config;
use opreg_server::domain::error::RegistryError;
use opreg_server::grpc::requests;
use prost::Message;
use std::sync::OnceLock;

fn limits() -> &'static requests::RequestLimits {
    static LIMITS: OnceLock<requests::RequestLimits> = OnceLock::new();
    LIMITS.get_or_init(|| Config::defaults().request_limits().unwrap())
}

fn refused_with_fields(result: Result<(), RegistryError>) {
    if let Err(RegistryError::InvalidArgument(violations)) = result {
        assert!(
            !violations.is_empty()
                && violations
                    .iter()
                    .all(|violation| !violation.field.is_empty())
        );
    }
}

macro_rules! convert {
    ($bytes:expr, $message:ty, $convert:expr) => {
        if let Ok(request) = <$message>::decode($bytes) {
            refused_with_fields($convert(request).map(drop));
        }
    };
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, bytes)) = data.split_first() else {
        return;
    };
    let limits = limits();
    match selector % 12 {
        0 => convert!(bytes, pb::ClaimRequest, |r| requests::claim(r, limits)),
        1 => convert!(bytes, pb::CompleteRequest, |r| requests::complete(
            r, limits
        )),
        2 => convert!(bytes, pb::RenewRequest, |r| requests::renew(r, limits)),
        3 => convert!(bytes, pb::FencedWriteRequest, |r| requests::fenced_write(
            r, limits
        )),
        4 => convert!(bytes, pb::LookupRequest, requests::lookup),
        5 => convert!(bytes, pb::GetResourceRequest, requests::get_resource),
        6 => convert!(bytes, pb::ClaimDueRequest, |r| requests::claim_due(
            r, limits
        )),
        7 => convert!(bytes, pb::ListOperationsRequest, requests::list_operations),
        8 => convert!(bytes, pb::ResolveOperationRequest, |r| requests::resolve(
            r, limits
        )),
        9 => convert!(bytes, pb::RequeueOperationRequest, |r| requests::requeue(
            r, limits
        )),
        10 => convert!(bytes, pb::HoldOperationRequest, requests::hold),
        _ => convert!(bytes, pb::ReleaseOperationRequest, requests::release),
    }
});
