//! Bad input: every refusal has its code, its reason and a field violation,
//! and writes nothing.

mod common;

use common::*;
use opreg_client::proto::{self as pb, claim_request::Fingerprint};
use serde_json::json;
use tonic::Code;
use tonic_types::StatusExt;

fn duration(seconds: i64, nanos: i32) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds, nanos })
}

fn valid_claim() -> pb::ClaimRequest {
    claim_request("ns", "key", "owner", json!({"amount": 1}))
}

/// Each case: a name, the request, and the field its violation must name.
fn invalid_claims() -> Vec<(&'static str, pb::ClaimRequest, &'static str)> {
    let nan = {
        let mut parameters = opreg_client::parameters(json!({}));
        parameters.fields.insert(
            "amount".into(),
            prost_types::Value {
                kind: Some(prost_types::value::Kind::NumberValue(f64::NAN)),
            },
        );
        parameters
    };
    let infinite = {
        let mut parameters = opreg_client::parameters(json!({"nested": {}}));
        parameters.fields.insert(
            "list".into(),
            prost_types::Value {
                kind: Some(prost_types::value::Kind::ListValue(
                    prost_types::ListValue {
                        values: vec![prost_types::Value {
                            kind: Some(prost_types::value::Kind::NumberValue(f64::NEG_INFINITY)),
                        }],
                    },
                )),
            },
        );
        parameters
    };
    let with = |change: &dyn Fn(&mut pb::ClaimRequest)| {
        let mut request = valid_claim();
        change(&mut request);
        request
    };
    let policy = |max_attempts, initial, max, deadline| pb::RetryPolicy {
        max_attempts,
        initial_backoff: duration(initial, 0),
        max_backoff: duration(max, 0),
        deadline: duration(deadline, 0),
    };
    vec![
        (
            "empty namespace",
            with(&|r| r.namespace.clear()),
            "namespace",
        ),
        (
            "empty key",
            with(&|r| r.operation_key.clear()),
            "operation_key",
        ),
        (
            "leading space",
            with(&|r| r.operation_key = " key".into()),
            "operation_key",
        ),
        (
            "trailing ideographic space",
            with(&|r| r.operation_key = "key\u{3000}".into()),
            "operation_key",
        ),
        (
            "control character",
            with(&|r| r.operation_key = "k\u{1}ey".into()),
            "operation_key",
        ),
        (
            "NUL in key",
            with(&|r| r.operation_key = "k\0ey".into()),
            "operation_key",
        ),
        (
            "key over 512 bytes",
            with(&|r| r.operation_key = "k".repeat(513)),
            "operation_key",
        ),
        (
            "namespace over 128 bytes",
            with(&|r| r.namespace = "n".repeat(129)),
            "namespace",
        ),
        ("missing owner", with(&|r| r.owner.clear()), "owner"),
        (
            "no fingerprint",
            with(&|r| r.fingerprint = None),
            "parameters",
        ),
        (
            "short digest",
            with(&|r| r.fingerprint = Some(Fingerprint::ParametersDigest(vec![1; 15]))),
            "parameters_digest",
        ),
        (
            "long digest",
            with(&|r| r.fingerprint = Some(Fingerprint::ParametersDigest(vec![1; 65]))),
            "parameters_digest",
        ),
        (
            "NaN parameter",
            with(&|r| r.fingerprint = Some(Fingerprint::Parameters(nan.clone()))),
            "parameters",
        ),
        (
            "infinite parameter",
            with(&|r| r.fingerprint = Some(Fingerprint::Parameters(infinite.clone()))),
            "parameters",
        ),
        (
            "lease below 1 s",
            with(&|r| r.lease_ttl = duration(0, 999_999_999)),
            "lease_ttl",
        ),
        (
            "lease above 1 h",
            with(&|r| r.lease_ttl = duration(3_600, 1)),
            "lease_ttl",
        ),
        (
            "negative lease",
            with(&|r| r.lease_ttl = duration(-5, 0)),
            "lease_ttl",
        ),
        (
            "zero attempts",
            with(&|r| r.retry_policy = Some(policy(0, 1, 2, 60))),
            "retry_policy.max_attempts",
        ),
        (
            "zero backoff",
            with(&|r| r.retry_policy = Some(policy(3, 0, 2, 60))),
            "retry_policy.initial_backoff",
        ),
        (
            "inverted backoff",
            with(&|r| r.retry_policy = Some(policy(3, 5, 2, 60))),
            "retry_policy.max_backoff",
        ),
        (
            "zero deadline",
            with(&|r| r.retry_policy = Some(policy(3, 1, 2, 0))),
            "retry_policy.deadline",
        ),
        (
            "deadline past what timestamps hold",
            with(&|r| r.retry_policy = Some(policy(3, 1, 2, 8_500_000_000_000))),
            "retry_policy.deadline",
        ),
        (
            "missing backoff",
            with(&|r| {
                r.retry_policy = Some(pb::RetryPolicy {
                    max_attempts: 3,
                    ..Default::default()
                })
            }),
            "retry_policy.initial_backoff",
        ),
        (
            "compensates itself",
            with(&|r| r.compensates = "key".into()),
            "compensates",
        ),
        (
            "compensates with space",
            with(&|r| r.compensates = "orig ".into()),
            "compensates",
        ),
    ]
}

fn assert_invalid<T: std::fmt::Debug>(case: &str, result: Result<T, tonic::Status>, field: &str) {
    let status = result.expect_err(case);
    assert_eq!(status.code(), Code::InvalidArgument, "{case}: {status:?}");
    let details = status.get_error_details();
    assert_eq!(
        details.error_info().map(|i| i.reason.as_str()),
        Some("INVALID_ARGUMENT"),
        "{case}"
    );
    let fields: Vec<_> = details
        .bad_request()
        .map(|b| b.field_violations.iter().map(|v| v.field.clone()).collect())
        .unwrap_or_default();
    assert!(
        fields.iter().any(|f| f == field),
        "{case}: {fields:?} should name {field}"
    );
}

#[tokio::test]
async fn invalid_claims_are_refused_and_write_nothing() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    for (case, request, field) in invalid_claims() {
        assert_invalid(case, client.claim(request).await, field);
    }
    assert_eq!(app.row_counts().await, (0, 0, 0));
    // The bounds themselves are accepted.
    for (seconds, nanos) in [(1, 0), (3_600, 0)] {
        let mut request = valid_claim();
        request.operation_key = format!("bound-{seconds}");
        request.lease_ttl = duration(seconds, nanos);
        client.claim(request).await.unwrap();
    }
    let mut request = valid_claim();
    request.operation_key = "é".repeat(256);
    client
        .claim(request)
        .await
        .expect("512 bytes is within the limit");
}

#[tokio::test]
async fn invalid_completes_renews_and_writes_are_refused_and_write_nothing() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let claimed = claim(&mut client, valid_claim()).await;
    let token = token(&claimed);
    let before = app.row_counts().await;
    let state: (String, i64) = sqlx::query_as("SELECT status, fencing_token FROM operations")
        .fetch_one(&app.db)
        .await
        .unwrap();

    let oversized = pb::complete_request::Outcome::Success(pb::Success {
        result: vec![0; 1 << 20],
        result_ref: "r".into(),
    });
    assert_invalid(
        "result over the limit",
        client
            .complete(complete_request("ns", "key", token, oversized))
            .await,
        "success.result",
    );
    let mut no_outcome = complete_request("ns", "key", token, success(b""));
    no_outcome.outcome = None;
    assert_invalid("no outcome", client.complete(no_outcome).await, "outcome");
    assert_invalid(
        "zero token",
        client
            .complete(complete_request("ns", "key", 0, success(b"")))
            .await,
        "fencing_token",
    );
    assert_invalid(
        "huge token",
        client
            .complete(complete_request("ns", "key", u64::MAX, success(b"")))
            .await,
        "fencing_token",
    );
    let nul = pb::complete_request::Outcome::Failure(pb::Failure {
        code: "A\0".into(),
        message: String::new(),
    });
    assert_invalid(
        "NUL in failure code",
        client
            .complete(complete_request("ns", "key", token, nul))
            .await,
        "failure.code",
    );
    let bad_pushback = pb::complete_request::Outcome::Retryable(pb::RetryableError {
        retry_after: duration(1, -1),
        ..Default::default()
    });
    assert_invalid(
        "bad retry_after",
        client
            .complete(complete_request("ns", "key", token, bad_pushback))
            .await,
        "retryable.retry_after",
    );

    let renew = |owner: &str, ttl| pb::RenewRequest {
        namespace: "ns".into(),
        operation_key: "key".into(),
        owner: owner.into(),
        fencing_token: token,
        lease_ttl: ttl,
    };
    assert_invalid(
        "renew without owner",
        client.renew(renew("", None)).await,
        "owner",
    );
    assert_invalid(
        "renew beyond bounds",
        client.renew(renew("owner", duration(7_200, 0))).await,
        "lease_ttl",
    );

    let write = |resource: &str, value: Vec<u8>| pb::FencedWriteRequest {
        namespace: "ns".into(),
        resource: resource.into(),
        operation_key: "key".into(),
        fencing_token: token,
        value,
    };
    assert_invalid(
        "empty resource",
        client.fenced_write(write("", vec![])).await,
        "resource",
    );
    assert_invalid(
        "value over the limit",
        client
            .fenced_write(write("r", vec![0; (1 << 20) + 1]))
            .await,
        "value",
    );
    assert_invalid(
        "lookup without key",
        client
            .lookup(pb::LookupRequest {
                namespace: "ns".into(),
                ..Default::default()
            })
            .await,
        "operation_key",
    );
    assert_invalid(
        "resource with control character",
        client
            .get_resource(pb::GetResourceRequest {
                namespace: "ns".into(),
                resource: "r\n".into(),
            })
            .await,
        "resource",
    );

    assert_eq!(app.row_counts().await, before);
    let after: (String, i64) = sqlx::query_as("SELECT status, fencing_token FROM operations")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(after, state);
    // A result exactly at the limit is accepted.
    let at_limit = pb::complete_request::Outcome::Success(pb::Success {
        result: vec![0; (1 << 20) - 1],
        result_ref: "r".into(),
    });
    client
        .complete(complete_request("ns", "key", token, at_limit))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_unreachable_database_is_unavailable_without_its_error_text() {
    let app = spawn_app_without_database(|config| {
        config.database.pool_acquire_timeout = std::time::Duration::from_millis(500);
    })
    .await;
    let mut client = app.client.clone();
    let status = assert_error(
        client.claim(valid_claim()).await,
        Code::Unavailable,
        "STORE_UNAVAILABLE",
    );
    let message = status.message().to_lowercase();
    for leak in ["socket", "postgres", "sql", "no such file", "connect"] {
        assert!(!message.contains(leak), "{message}");
    }
}
