//! Compensation: a new operation linked to a succeeded original, at most once.

mod common;

use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome};
use serde_json::json;
use tonic::Code;

const NS: &str = "accounts";

fn compensation(key: &str, original: &str, owner: &str) -> pb::ClaimRequest {
    pb::ClaimRequest {
        compensates: original.into(),
        ..claim_request(NS, key, owner, json!({"refund": original}))
    }
}

async fn succeeded(client: &mut Client, key: &str) {
    let claimed = claim(client, claim_request(NS, key, "w", json!({"debit": 100}))).await;
    client
        .complete(complete_request(
            NS,
            key,
            token(&claimed),
            success(b"debited"),
        ))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_succeeded_operation_is_compensated_once_and_linked() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    succeeded(&mut client, "order-A").await;
    let refund = claim(&mut client, compensation("refund:order-A", "order-A", "w")).await;
    assert_eq!(outcome(&refund), ClaimOutcome::Acquired);
    assert_eq!(refund.operation.clone().unwrap().compensates, "order-A");
    client
        .complete(complete_request(
            NS,
            "refund:order-A",
            token(&refund),
            success(b"refunded"),
        ))
        .await
        .unwrap();

    // Claiming the same compensation again is an ordinary claim: a replay.
    let again = claim(&mut client, compensation("refund:order-A", "order-A", "w2")).await;
    assert_eq!(outcome(&again), ClaimOutcome::Replayed);
    // A second, different compensation of the same original is refused.
    let status = assert_error(
        client
            .claim(compensation("refund-2:order-A", "order-A", "w"))
            .await,
        Code::FailedPrecondition,
        "ALREADY_COMPENSATED",
    );
    assert_eq!(metadata(&status, "compensatedBy"), "refund:order-A");

    let original = client
        .lookup(pb::LookupRequest {
            namespace: NS.into(),
            operation_key: "order-A".into(),
            include_executions: false,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(original.compensated_by, "refund:order-A");
    assert_eq!(
        app.count("SELECT count(*) FROM operations WHERE compensates IS NOT NULL")
            .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_compensations_of_one_original_register_exactly_one() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    succeeded(&mut client, "order-A").await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..100 {
        let mut client = app.new_client().await;
        tasks.spawn(async move {
            client
                .claim(compensation(&format!("refund-{i}"), "order-A", "w"))
                .await
        });
    }
    let (mut acquired, mut refused) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        match joined.unwrap() {
            Ok(response) => {
                assert_eq!(outcome(response.get_ref()), ClaimOutcome::Acquired);
                acquired += 1;
            }
            Err(status) => {
                assert_eq!(
                    opreg_client::error_reason(&status).as_deref(),
                    Some("ALREADY_COMPENSATED")
                );
                refused += 1;
            }
        }
    }
    assert_eq!((acquired, refused), (1, 99));
    assert_eq!(
        app.count("SELECT count(*) FROM operations WHERE compensates = 'order-A'")
            .await,
        1
    );
    assert_eq!(
        app.count("SELECT count(*) FROM operations o JOIN operations c ON c.operation_key = o.compensated_by WHERE o.operation_key = 'order-A'").await,
        1
    );
}

#[tokio::test]
async fn only_a_known_success_can_be_compensated() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    assert_error(
        client
            .claim(compensation("refund:missing", "missing", "w"))
            .await,
        Code::FailedPrecondition,
        "NOTHING_TO_COMPENSATE",
    );

    let failed = claim(&mut client, claim_request(NS, "failed", "w", json!({}))).await;
    let failure = pb::complete_request::Outcome::Failure(pb::Failure {
        code: "DECLINED".into(),
        message: String::new(),
    });
    client
        .complete(complete_request(NS, "failed", token(&failed), failure))
        .await
        .unwrap();
    assert_error(
        client
            .claim(compensation("refund:failed", "failed", "w"))
            .await,
        Code::FailedPrecondition,
        "NOTHING_TO_COMPENSATE",
    );

    // Still running: it has not succeeded.
    claim(&mut client, claim_request(NS, "running", "w", json!({}))).await;
    assert_error(
        client
            .claim(compensation("refund:running", "running", "w"))
            .await,
        Code::FailedPrecondition,
        "NOTHING_TO_COMPENSATE",
    );

    let unsure = claim(&mut client, claim_request(NS, "unsure", "w", json!({}))).await;
    client
        .complete(complete_request(
            NS,
            "unsure",
            token(&unsure),
            unknown("psp-1"),
        ))
        .await
        .unwrap();
    assert_error(
        client
            .claim(compensation("refund:unsure", "unsure", "w"))
            .await,
        Code::FailedPrecondition,
        "ORIGINAL_OUTCOME_UNKNOWN",
    );
    // Still unknown while a reconcile lease is held.
    claim(
        &mut client,
        claim_request(NS, "unsure", "reconciler", json!({})),
    )
    .await;
    assert_error(
        client
            .claim(compensation("refund:unsure", "unsure", "w"))
            .await,
        Code::FailedPrecondition,
        "ORIGINAL_OUTCOME_UNKNOWN",
    );
    assert_eq!(
        app.count("SELECT count(*) FROM operations WHERE compensates IS NOT NULL")
            .await,
        0
    );
}
