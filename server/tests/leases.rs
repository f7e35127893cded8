//! Leases and fencing: the token is the authority, expiry only permits a
//! takeover, and a superseded token is refused everywhere.

mod common;

use std::time::Duration;

use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome};
use serde_json::json;
use tonic::Code;

const NS: &str = "settlement";

async fn get_resource(client: &mut Client) -> pb::GetResourceResponse {
    client
        .get_resource(pb::GetResourceRequest {
            namespace: NS.into(),
            resource: "account:1".into(),
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn after_a_takeover_the_old_token_is_refused_everywhere() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let key = "settlement:A:W:V";
    let first = claim(
        &mut client,
        claim_request(NS, key, "worker-A", json!({"window": "W"})),
    )
    .await;
    let old = token(&first);
    client
        .fenced_write(write_request(NS, key, old, b"10"))
        .await
        .unwrap();

    app.expire_lease(NS, key).await;
    let second = claim(
        &mut client,
        claim_request(NS, key, "worker-B", json!({"window": "W"})),
    )
    .await;
    assert_eq!(outcome(&second), ClaimOutcome::Acquired);
    let lease = second.lease.clone().unwrap();
    let new = lease.fencing_token;
    assert!(new > old);
    assert!(lease.takeover);
    assert_eq!(lease.attempt, 2);

    let stale = assert_error(
        client
            .fenced_write(write_request(NS, key, old, b"stale"))
            .await,
        Code::Aborted,
        "STALE_FENCING_TOKEN",
    );
    assert_eq!(metadata(&stale, "presentedToken"), old.to_string());
    assert_eq!(metadata(&stale, "currentToken"), new.to_string());
    assert_error(
        client.renew(renew_request(NS, key, "worker-A", old)).await,
        Code::Aborted,
        "STALE_FENCING_TOKEN",
    );
    assert_error(
        client
            .complete(complete_request(NS, key, old, success(b"old")))
            .await,
        Code::Aborted,
        "STALE_FENCING_TOKEN",
    );

    let written = client
        .fenced_write(write_request(NS, key, new, b"20"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((written.fence, written.version), (new, 2));
    client
        .renew(renew_request(NS, key, "worker-B", new))
        .await
        .unwrap();
    let done = client
        .complete(complete_request(NS, key, new, success(b"settled")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(done.operation.unwrap().result, b"settled");

    let resource = get_resource(&mut client).await;
    assert_eq!(
        (resource.value.as_slice(), resource.fence),
        (&b"20"[..], new)
    );
    assert_eq!(resource.operation_key, key);
    let history: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT fencing_token, kind, outcome FROM executions ORDER BY fencing_token",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(
        history,
        [
            (
                i64::try_from(old).unwrap(),
                "first".into(),
                "superseded".into()
            ),
            (
                i64::try_from(new).unwrap(),
                "takeover".into(),
                "succeeded".into()
            )
        ]
    );
    // The takeover moved the first execution to the history; the current one
    // stays on the operation's row.
    let replaced: Vec<(i64, String)> =
        sqlx::query_as("SELECT fencing_token, outcome FROM execution_history")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(
        replaced,
        [(i64::try_from(old).unwrap(), "superseded".into())]
    );
}

#[tokio::test]
async fn an_expired_lease_that_nobody_took_over_still_completes() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let first = claim(
        &mut client,
        claim_request(NS, "slow", "worker-A", json!({})),
    )
    .await;
    app.expire_lease(NS, "slow").await;
    let lookup = client
        .lookup(pb::LookupRequest {
            namespace: NS.into(),
            operation_key: "slow".into(),
            include_executions: false,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        lookup.operation.unwrap().lease.is_some(),
        "the lease stays visible after expiry"
    );
    client
        .renew(renew_request(NS, "slow", "worker-A", token(&first)))
        .await
        .unwrap();
    client
        .fenced_write(write_request(NS, "slow", token(&first), b"1"))
        .await
        .unwrap();
    client
        .complete(complete_request(NS, "slow", token(&first), success(b"ok")))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_live_holder_resumes_and_others_wait() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let first = claim(&mut client, claim_request(NS, "k", "worker-A", json!({}))).await;
    let resumed = claim(&mut client, claim_request(NS, "k", "worker-A", json!({}))).await;
    assert_eq!(outcome(&resumed), ClaimOutcome::Acquired);
    assert_eq!(resumed.lease, first.lease);
    let other = claim(&mut client, claim_request(NS, "k", "worker-B", json!({}))).await;
    assert_eq!(outcome(&other), ClaimOutcome::InProgress);
    assert!(other.lease.is_none());
    let wait = other.retry_after.unwrap();
    assert!(wait.seconds <= 30 && (wait.seconds > 0 || wait.nanos > 0));
    assert_eq!(app.count("SELECT count(*) FROM executions").await, 1);
}

#[tokio::test]
async fn renew_extends_by_the_database_clock_and_refuses_other_owners() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let first = claim(&mut client, claim_request(NS, "k", "worker-A", json!({}))).await;
    let before = first.lease.clone().unwrap().expires_at.unwrap();
    let mut request = renew_request(NS, "k", "worker-A", token(&first));
    request.lease_ttl = Some(prost_types::Duration {
        seconds: 120,
        nanos: 0,
    });
    let renewed = client
        .renew(request)
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    let after = renewed.expires_at.unwrap();
    assert!(
        after.seconds >= before.seconds + 85,
        "{before:?} -> {after:?}"
    );
    assert_eq!(renewed.fencing_token, token(&first));
    assert_error(
        client
            .renew(renew_request(NS, "k", "worker-B", token(&first)))
            .await,
        Code::FailedPrecondition,
        "LEASE_NOT_HELD",
    );
    client
        .complete(complete_request(NS, "k", token(&first), success(b"")))
        .await
        .unwrap();
    assert_error(
        client
            .renew(renew_request(NS, "k", "worker-A", token(&first)))
            .await,
        Code::Aborted,
        "STALE_FENCING_TOKEN",
    );
    assert_error(
        client
            .fenced_write(write_request(NS, "k", token(&first), b"late"))
            .await,
        Code::Aborted,
        "STALE_FENCING_TOKEN",
    );
}

#[tokio::test]
async fn a_resource_refuses_tokens_below_its_fence_across_operations() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let older = claim(&mut client, claim_request(NS, "older", "a", json!({}))).await;
    let newer = claim(&mut client, claim_request(NS, "newer", "b", json!({}))).await;
    client
        .fenced_write(write_request(NS, "newer", token(&newer), b"new"))
        .await
        .unwrap();
    let status = assert_error(
        client
            .fenced_write(write_request(NS, "older", token(&older), b"old"))
            .await,
        Code::Aborted,
        "STALE_FENCING_TOKEN",
    );
    assert_eq!(metadata(&status, "currentToken"), token(&newer).to_string());
    assert_eq!(get_resource(&mut client).await.value, b"new");
}

/// Many writes with the old token race one takeover: each lands before the
/// takeover or is refused after it, and the resource ends with the new value.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_racing_a_takeover_are_ordered_by_the_row_lock() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let key = "raced";
    let first = claim(&mut client, claim_request(NS, key, "worker-A", json!({}))).await;
    let old = token(&first);
    client
        .fenced_write(write_request(NS, key, old, b"old-0"))
        .await
        .unwrap();
    app.expire_lease(NS, key).await;

    let mut writers = tokio::task::JoinSet::new();
    for i in 0..200 {
        let mut client = app.new_client().await;
        writers.spawn(async move {
            let value = format!("old-{i}");
            client
                .fenced_write(write_request(NS, key, old, value.as_bytes()))
                .await
        });
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    let taken = claim(&mut client, claim_request(NS, key, "worker-B", json!({}))).await;
    let new = token(&taken);
    client
        .fenced_write(write_request(NS, key, new, b"new"))
        .await
        .unwrap();

    let mut accepted = 0;
    while let Some(joined) = writers.join_next().await {
        match joined.unwrap() {
            Ok(_) => accepted += 1,
            Err(status) => assert_eq!(
                opreg_client::error_reason(&status).as_deref(),
                Some("STALE_FENCING_TOKEN")
            ),
        }
    }
    let resource = get_resource(&mut client).await;
    assert_eq!(
        (resource.value.as_slice(), resource.fence),
        (&b"new"[..], new)
    );
    // Every accepted write, and only those, moved the version.
    assert_eq!(resource.version, 2 + accepted);
}

#[tokio::test]
async fn claims_of_an_existing_key_draw_no_fencing_token() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let params = json!({"window": "W"});
    let first = claim(
        &mut client,
        claim_request(NS, "held", "worker-A", params.clone()),
    )
    .await;
    for other in 0..10 {
        let owner = format!("worker-{other}");
        let waited = claim(
            &mut client,
            claim_request(NS, "held", &owner, params.clone()),
        )
        .await;
        assert_eq!(waited.outcome(), ClaimOutcome::InProgress);
    }
    // Ten claims of the held key drew nothing: the next token is the next value.
    let next = claim(&mut client, claim_request(NS, "fresh", "worker-A", params)).await;
    assert_eq!(token(&next), token(&first) + 1);
}
