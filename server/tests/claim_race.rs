//! Registration races: the unique constraint decides, never a check-then-insert.

mod common;

use std::time::Duration;

use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome};
use serde_json::json;
use sqlx::Connection;

const NAMESPACE: &str = "payments";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_claims_acquire_exactly_once() {
    // 1,000 callers queue for 32 connections on this 2-core machine; the race
    // is the subject here, not failing fast, so they may queue for longer.
    let app =
        spawn_app_with(|config| config.database.pool_acquire_timeout = Duration::from_secs(30))
            .await;
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(app.new_client().await);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..1_000 {
        let mut client = clients[i % clients.len()].clone();
        tasks.spawn(async move {
            let request = claim_request(
                NAMESPACE,
                "order-A",
                &format!("worker-{i}"),
                json!({"amount": 100}),
            );
            client.claim(request).await
        });
    }
    let mut counts = std::collections::HashMap::new();
    while let Some(joined) = tasks.join_next().await {
        let response = joined.unwrap().expect("no claim fails").into_inner();
        *counts.entry(outcome(&response)).or_insert(0) += 1;
    }
    assert_eq!(counts.get(&ClaimOutcome::Acquired), Some(&1), "{counts:?}");
    let others: i32 = counts
        .iter()
        .filter(|(outcome, _)| matches!(outcome, ClaimOutcome::InProgress | ClaimOutcome::Replayed))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(others, 999, "{counts:?}");
    assert_eq!(app.count("SELECT count(*) FROM operations").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM executions").await, 1);
}

async fn finish(mut tx: sqlx::PgConnection, statement: &'static str) {
    sqlx::raw_sql(statement).execute(&mut tx).await.unwrap();
    tx.close().await.unwrap();
}

type RacingClaim =
    tokio::task::JoinHandle<Result<tonic::Response<pb::ClaimResponse>, tonic::Status>>;

/// Registers `order-A` in an open transaction, then starts a Claim of it with
/// `amount` and waits until PostgreSQL shows that Claim waiting on the lock.
async fn claim_racing_an_uncommitted_registration(
    app: &TestApp,
    amount: u32,
) -> (sqlx::PgConnection, RacingClaim) {
    let tx = app
        .uncommitted_registration(NAMESPACE, "order-A", "worker-1")
        .await;
    let mut client = app.client.clone();
    let request = pb::ClaimRequest {
        lease_ttl: Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        }),
        ..claim_request(NAMESPACE, "order-A", "worker-2", json!({"amount": amount}))
    };
    let racing = tokio::spawn(async move { client.claim(request).await });
    app.observe_lock_wait().await;
    assert!(
        !racing.is_finished(),
        "the claim must wait for the registration"
    );
    (tx, racing)
}

#[tokio::test]
async fn a_claim_racing_an_uncommitted_registration_waits_then_sees_the_commit() {
    let app = spawn_app().await;
    let (tx, racing) = claim_racing_an_uncommitted_registration(&app, 100).await;
    finish(tx, "COMMIT").await;
    let response = racing.await.unwrap().unwrap().into_inner();
    assert_eq!(outcome(&response), ClaimOutcome::InProgress);
    assert_eq!(response.operation.unwrap().lease.unwrap().owner, "worker-1");
    assert!(response.retry_after.is_some());
    assert_eq!(app.count("SELECT count(*) FROM operations").await, 1);
}

#[tokio::test]
async fn a_claim_racing_an_uncommitted_registration_acquires_after_a_rollback() {
    let app = spawn_app().await;
    let (tx, racing) = claim_racing_an_uncommitted_registration(&app, 100).await;
    // Wait longer than a short lease would last: the lease must still count from
    // the moment the claim got the key, not from before its wait.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    finish(tx, "ROLLBACK").await;
    let response = racing.await.unwrap().unwrap().into_inner();
    assert_eq!(outcome(&response), ClaimOutcome::Acquired);
    assert_eq!(response.lease.unwrap().owner, "worker-2");
    assert_eq!(app.count("SELECT count(*) FROM operations").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM executions").await, 1);
    let remaining_ms = app
        .count(
            "SELECT (extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::bigint
             FROM operations",
        )
        .await;
    assert!(
        remaining_ms > 500,
        "the 1 s lease has {remaining_ms} ms left"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM operations o JOIN executions e USING (fencing_token) WHERE e.started_at = o.created_at").await,
        1
    );
}

#[tokio::test]
async fn a_racing_claim_with_other_parameters_waits_then_conflicts() {
    let app = spawn_app().await;
    let (tx, racing) = claim_racing_an_uncommitted_registration(&app, 101).await;
    finish(tx, "COMMIT").await;
    let status = assert_error(
        racing.await.unwrap(),
        tonic::Code::AlreadyExists,
        "PARAMETER_CONFLICT",
    );
    assert_eq!(metadata(&status, "differingFields"), "amount");
}
