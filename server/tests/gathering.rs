//! Concurrent Claims share registration statements: each answer is the one
//! the Claims would get run one after another, the database holds one row and
//! one fencing token per key, and replicas gathering the same keys never
//! deadlock. One test function, so that this binary's batch-size histogram
//! counts only its own Claims.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use opreg_client::proto::ClaimOutcome;
use serde_json::json;

const NAMESPACE: &str = "payments";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_share_statements_and_answer_as_in_sequence() {
    claims_of_one_key_queued_together_answer_as_in_sequence().await;
    many_concurrent_claims_register_each_key_once().await;
    replicas_gathering_the_same_keys_never_deadlock().await;
}

/// Batch-size histogram totals: (statements, claims in them).
async fn batches(app: &TestApp) -> (f64, f64) {
    let scrape = scrape(app.metrics_addr).await;
    (
        scrape.value("opreg_claim_batch_size_count", &[]),
        scrape.value("opreg_claim_batch_size_sum", &[]),
    )
}

/// The one writer is held on a lock while six Claims of one new key queue
/// behind it; they then share one statement, and the first registers the key
/// while the rest observe the row it left: one ACQUIRED, four IN_PROGRESS, one
/// PARAMETER_CONFLICT, one fencing token.
async fn claims_of_one_key_queued_together_answer_as_in_sequence() {
    let app = spawn_app_with(|config| config.database.claim_writers = 1).await;
    let mut blocker = app
        .uncommitted_registration(NAMESPACE, "blocker", "elsewhere")
        .await;
    let mut blocked = app.client.clone();
    let blocked = tokio::spawn(async move {
        blocked
            .claim(claim_request(
                NAMESPACE,
                "blocker",
                "worker-0",
                json!({"amount": 100}),
            ))
            .await
    });
    app.observe_lock_wait().await;
    let (statements_before, claims_before) = batches(&app).await;

    let mut queued = tokio::task::JoinSet::new();
    for i in 0..6 {
        let mut client = app.client.clone();
        // The last one, with other parameters, is queued after the others.
        let amount = if i == 5 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            999
        } else {
            100
        };
        queued.spawn(async move {
            client
                .claim(claim_request(
                    NAMESPACE,
                    "order-A",
                    &format!("worker-{i}"),
                    json!({"amount": amount}),
                ))
                .await
        });
    }
    // All six are sent and queued behind the blocked writer.
    tokio::time::sleep(Duration::from_millis(300)).await;
    sqlx::raw_sql("COMMIT").execute(&mut blocker).await.unwrap();

    let blocked = blocked
        .await
        .unwrap()
        .expect("the blocked claim is answered");
    assert_eq!(outcome(blocked.get_ref()), ClaimOutcome::InProgress);
    let mut outcomes = HashMap::new();
    let mut conflicts = 0;
    while let Some(joined) = queued.join_next().await {
        match joined.unwrap() {
            Ok(response) => *outcomes.entry(outcome(response.get_ref())).or_insert(0) += 1,
            Err(status) => {
                assert_eq!(
                    opreg_client::error_reason(&status).as_deref(),
                    Some("PARAMETER_CONFLICT"),
                    "{status:?}"
                );
                conflicts += 1;
            }
        }
    }
    assert_eq!(
        outcomes.get(&ClaimOutcome::Acquired),
        Some(&1),
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.get(&ClaimOutcome::InProgress),
        Some(&4),
        "{outcomes:?}"
    );
    assert_eq!(conflicts, 1);

    let (statements, claims) = batches(&app).await;
    assert_eq!(
        (statements - statements_before, claims - claims_before),
        (1.0, 6.0),
        "the six queued claims share one statement"
    );
    // The blocker's token, the one its racing claim drew before it met the
    // uncommitted row, and order-A's: the five later claims of it drew none.
    assert_eq!(app.tokens_drawn().await, 3);
    assert_eq!(app.count("SELECT count(*) FROM executions").await, 1);
}

/// 400 Claims at once, four for each of 100 new keys, through one writer.
async fn many_concurrent_claims_register_each_key_once() {
    let app = spawn_app_with(|config| {
        config.database.claim_writers = 1;
        config.database.pool_acquire_timeout = Duration::from_secs(30);
    })
    .await;
    let (statements_before, claims_before) = batches(&app).await;
    claim_concurrently(std::slice::from_ref(&app.client), 100, 4).await;
    assert_eq!(app.count("SELECT count(*) FROM operations").await, 100);
    assert_eq!(app.count("SELECT count(*) FROM executions").await, 100);
    assert_eq!(
        app.count("SELECT count(DISTINCT fencing_token) FROM operations")
            .await,
        100
    );
    // One writer never races itself: no claim of an existing key drew a token.
    assert_eq!(app.tokens_drawn().await, 100);
    let (statements, claims) = batches(&app).await;
    assert_eq!(claims - claims_before, 400.0);
    assert!(
        statements - statements_before < 400.0,
        "concurrent claims shared statements: {} statements",
        statements - statements_before
    );
}

/// Two replicas over one database, each with several writers, claim the same
/// 50 new keys at once. Their statements insert in key order, so they wait on
/// each other's new rows in one order: PostgreSQL reports no deadlock.
async fn replicas_gathering_the_same_keys_never_deadlock() {
    let (first, second) = two_patient_replicas().await;

    let clients = [first.client.clone(), second.client.clone()];
    claim_concurrently(&clients, 50, 16).await;
    assert_eq!(first.count("SELECT count(*) FROM operations").await, 50);
    assert_eq!(first.deadlocks().await, 0);
}

/// Claims each of `keys` new keys `per_key` times at once, spread over
/// `clients`: no claim may fail, and each key is ACQUIRED exactly once and
/// IN_PROGRESS for every other claim.
async fn claim_concurrently(clients: &[Client], keys: usize, per_key: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..keys * per_key {
        let mut client = clients[i % clients.len()].clone();
        // Keys interleave, so each statement holds many keys in arrival
        // order; the second client sends them in the opposite order.
        let index = (i / clients.len() * 7) % keys;
        let index = if i % clients.len() == 1 {
            keys - 1 - index
        } else {
            index
        };
        let key = format!("order-{index:03}");
        tasks.spawn(async move {
            let request = claim_request(
                NAMESPACE,
                &key,
                &format!("worker-{i}"),
                json!({"amount": 100}),
            );
            (key, client.claim(request).await)
        });
    }
    let mut by_key: HashMap<String, Vec<ClaimOutcome>> = HashMap::new();
    while let Some(joined) = tasks.join_next().await {
        let (key, answer) = joined.unwrap();
        let response = answer.expect("no claim fails").into_inner();
        by_key.entry(key).or_default().push(outcome(&response));
    }
    assert_eq!(by_key.len(), keys);
    for (key, outcomes) in &by_key {
        let acquired = outcomes
            .iter()
            .filter(|o| **o == ClaimOutcome::Acquired)
            .count();
        assert_eq!(acquired, 1, "{key}: {outcomes:?}");
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, ClaimOutcome::Acquired | ClaimOutcome::InProgress)),
            "{key}: {outcomes:?}"
        );
    }
}
