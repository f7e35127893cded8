//! Bytes that are not a valid request, and requests past their bounds: each is
//! refused with the documented code and one ErrorInfo, and nothing is written.

mod common;

use std::time::Duration;

use bytes::{Buf, BufMut};
use common::*;
use opreg_client::proto as pb;
use prost::Message;
use serde_json::json;
use tonic::Code;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic_types::StatusExt;

/// Sends and receives raw message bytes, so a test can send what no client would.
#[derive(Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

async fn send_raw(app: &TestApp, method: &str, message: Vec<u8>) -> tonic::Status {
    let channel = tonic::transport::Endpoint::from_shared(app.endpoint.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_encoding_message_size(usize::MAX)
        .max_decoding_message_size(usize::MAX);
    grpc.ready().await.unwrap();
    let path = format!("/opreg.v1.OperationRegistry/{method}")
        .parse()
        .unwrap();
    let mut request = tonic::Request::new(message);
    request.set_timeout(Duration::from_secs(20));
    grpc.unary(request, path, Raw)
        .await
        .expect_err("the server must refuse it")
}

/// A length-delimited field of `number` holding `bytes`.
fn field(number: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_key(number, prost::encoding::WireType::LengthDelimited, &mut out);
    prost::encoding::encode_varint(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

fn valid_claim() -> Vec<u8> {
    claim_request("ns", "k", "w", json!({"amount": 1})).encode_to_vec()
}

fn assert_invalid(status: &tonic::Status, field: Option<&str>) {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let details = status.get_error_details();
    assert_eq!(details.error_info().unwrap().reason, "INVALID_ARGUMENT");
    let violations = details
        .bad_request()
        .map(|b| b.field_violations.clone())
        .unwrap_or_default();
    assert_eq!(
        violations.first().map(|v| v.field.as_str()),
        field,
        "{status:?}"
    );
}

#[tokio::test]
async fn undecodable_bytes_are_invalid_arguments_naming_the_field() {
    let app = spawn_app().await;
    let before = app.row_counts().await;

    let mut bad_utf8 = field(1, b"ns");
    bad_utf8.extend(field(2, &[0xff, 0xfe, 0xfd]));
    assert_invalid(
        &send_raw(&app, "Claim", bad_utf8).await,
        Some("operation_key"),
    );

    let mut truncated = valid_claim();
    truncated.truncate(truncated.len() - 3);
    // The last field, execution_id, lost its end.
    assert_invalid(
        &send_raw(&app, "Claim", truncated).await,
        Some("execution_id"),
    );

    // A Struct nested past the decoder's recursion limit.
    let mut nested = prost_types::Struct::default();
    for _ in 0..60 {
        let mut outer = prost_types::Struct::default();
        outer.fields.insert(
            "a".into(),
            prost_types::Value {
                kind: Some(prost_types::value::Kind::StructValue(nested)),
            },
        );
        nested = outer;
    }
    let mut deep = claim_request("ns", "deep", "w", json!({}));
    deep.fingerprint = Some(pb::claim_request::Fingerprint::Parameters(nested));
    let status = send_raw(&app, "Claim", deep.encode_to_vec()).await;
    assert_invalid(&status, Some("parameters"));

    // Field 1 (namespace) sent as a varint.
    let wrong_type = send_raw(&app, "Complete", vec![0x08, 0x01]).await;
    assert_invalid(&wrong_type, Some("namespace"));
    assert!(
        wrong_type.message().contains("invalid wire type"),
        "{wrong_type:?}"
    );
    assert_eq!(app.row_counts().await, before, "nothing was written");
    let scraped = scrape(app.metrics_addr).await;
    assert!(scraped.value("opreg_malformed_requests_total", &[("reason", "malformed")]) >= 3.0);
    let internal = scraped.value(
        "grpc_server_handled_total",
        &[
            ("grpc_service", "opreg.v1.OperationRegistry"),
            ("grpc_method", "Claim"),
            ("grpc_type", "unary"),
            ("grpc_code", "Internal"),
        ],
    );
    assert_eq!(internal, 0.0, "never counted as a server error");
}

#[tokio::test]
async fn oversized_messages_are_refused_by_their_method_limit_before_decoding() {
    let app = spawn_app().await;
    let before = app.row_counts().await;
    // Far past every limit, and past the Claim limit while a Complete would fit.
    for (method, size) in [("Claim", 30 << 20), ("Claim", 1 << 20), ("Lookup", 1 << 20)] {
        let status = send_raw(&app, method, field(1, &vec![b'x'; size])).await;
        assert_eq!(
            status.code(),
            Code::ResourceExhausted,
            "{method} {size}: {status:?}"
        );
        let info = status.get_error_details().error_info().unwrap().clone();
        assert_eq!(info.reason, "MESSAGE_TOO_LARGE");
        let limit: usize = info.metadata["limit"].parse().unwrap();
        assert!(limit < size, "{limit}");
    }
    assert_eq!(app.row_counts().await, before);
}

#[tokio::test]
async fn parameters_are_bounded_in_values_depth_and_canonical_size() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let before = app.row_counts().await;
    let many: serde_json::Map<_, _> = (0..10_001).map(|i| (format!("k{i}"), json!(i))).collect();
    let mut deep = json!(1);
    for _ in 0..21 {
        deep = json!({ "a": deep });
    }
    let long = json!({ "memo": "x".repeat(70_000) });
    for (parameters, expected) in [
        (serde_json::Value::Object(many), "values"),
        (deep, "levels"),
        (long, "bytes"),
    ] {
        let refused = client
            .claim(claim_request("ns", "big", "w", parameters))
            .await
            .expect_err("over the parameter limits");
        let status = assert_error(
            Err::<(), _>(refused),
            Code::InvalidArgument,
            "INVALID_ARGUMENT",
        );
        let violation = status.get_details_bad_request().unwrap().field_violations[0].clone();
        assert_eq!(violation.field, "parameters");
        assert!(violation.description.contains(expected), "{violation:?}");
    }
    assert_eq!(app.row_counts().await, before);
    let fits = json!({ "memo": "x".repeat(50_000), "list": (0..2_000).collect::<Vec<_>>() });
    let claimed = claim(&mut client, claim_request("ns", "fits", "w", fits)).await;
    assert!(
        claimed.lease.is_some(),
        "parameters within every limit are accepted"
    );
}
