//! Completions: retries with backoff inside a budget, unknown outcomes that
//! must be reconciled, and idempotent repeats.

mod common;

use std::time::Duration;

use common::*;
use opreg_client::proto::{
    self as pb, ClaimOutcome, ExecutionKind, ExecutionOutcome, OperationStatus,
};
use serde_json::json;
use tonic::Code;

const NS: &str = "payouts";

/// A retry policy: backoffs in milliseconds, the deadline in seconds.
fn policy(max_attempts: u32, initial_ms: i32, max_ms: i32, deadline_s: i64) -> pb::RetryPolicy {
    let ms = |ms: i32| prost_types::Duration {
        seconds: i64::from(ms / 1_000),
        nanos: (ms % 1_000) * 1_000_000,
    };
    pb::RetryPolicy {
        max_attempts,
        initial_backoff: Some(ms(initial_ms)),
        max_backoff: Some(ms(max_ms)),
        deadline: Some(prost_types::Duration {
            seconds: deadline_s,
            nanos: 0,
        }),
    }
}

/// Registers `p` under `policy` and fails its first attempt retryably.
async fn fail_first_attempt(
    client: &mut Client,
    policy: pb::RetryPolicy,
    retry_after: Option<Duration>,
) -> pb::Operation {
    let first = claim(client, with_policy("p", "w", policy)).await;
    complete(client, "p", token(&first), retryable(retry_after)).await
}

fn with_policy(key: &str, owner: &str, policy: pb::RetryPolicy) -> pb::ClaimRequest {
    pb::ClaimRequest {
        retry_policy: Some(policy),
        ..claim_request(NS, key, owner, json!({"payout": key}))
    }
}

async fn complete(
    client: &mut Client,
    key: &str,
    token: u64,
    outcome: pb::complete_request::Outcome,
) -> pb::Operation {
    client
        .complete(complete_request(NS, key, token, outcome))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap()
}

fn seconds(timestamp: &prost_types::Timestamp) -> f64 {
    timestamp.seconds as f64 + f64::from(timestamp.nanos) / 1e9
}

#[tokio::test]
async fn a_retryable_failure_waits_for_its_backoff_then_acquires() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let request = with_policy("p1", "w", policy(3, 10_000, 20_000, 3_600));
    let first = claim(&mut client, request.clone()).await;
    let failed = complete(&mut client, "p1", token(&first), retryable(None)).await;
    assert_eq!(failed.status(), OperationStatus::RetryScheduled);
    let updated = seconds(failed.updated_at.as_ref().unwrap());
    let due = seconds(failed.next_attempt_at.as_ref().unwrap());
    assert!(
        (0.0..=10.001).contains(&(due - updated)),
        "full jitter within the first cap: {}",
        due - updated
    );
    assert!(failed.lease.is_none());

    app.push_due_time("p1", Duration::from_secs(60)).await;
    let early = claim(&mut client, request.clone()).await;
    assert_eq!(outcome(&early), ClaimOutcome::RetryLater);
    assert!(early.retry_after.unwrap().seconds > 50);
    assert!(early.lease.is_none());

    app.make_retry_due(NS, "p1").await;
    let retry = claim(&mut client, request).await;
    assert_eq!(outcome(&retry), ClaimOutcome::Acquired);
    let lease = retry.lease.unwrap();
    assert_eq!((lease.attempt, lease.takeover), (2, false));
    assert!(lease.fencing_token > token(&first));
    let history = lookup_history(&mut client, NS, "p1").await.executions;
    assert_eq!(history.len(), 2);
    assert_eq!(history[0].outcome(), ExecutionOutcome::Retryable);
    assert_eq!(history[0].error_class, "downstream_timeout");
    assert_eq!(history[1].kind(), ExecutionKind::Retry);
}

#[tokio::test]
async fn pushback_is_honoured_beyond_max_backoff() {
    let app = spawn_app().await;
    let pushback = Some(Duration::from_millis(600_500));
    let op = fail_first_attempt(
        &mut app.client.clone(),
        policy(3, 1_000, 2_000, 3_600),
        pushback,
    )
    .await;
    let delay =
        seconds(op.next_attempt_at.as_ref().unwrap()) - seconds(op.updated_at.as_ref().unwrap());
    assert!((600.4..600.6).contains(&delay), "{delay}");
}

#[tokio::test]
async fn the_budget_runs_out_into_dead() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let request = with_policy("p", "w", policy(2, 1, 1, 3_600));
    let first = claim(&mut client, request.clone()).await;
    complete(&mut client, "p", token(&first), retryable(None)).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = claim(&mut client, request.clone()).await;
    assert_eq!(outcome(&second), ClaimOutcome::Acquired);
    let dead = complete(&mut client, "p", token(&second), retryable(None)).await;
    assert_eq!(dead.status(), OperationStatus::Dead);
    assert_eq!(dead.attempts, 2);
    assert!(dead.completed_at.is_some());
    let again = claim(&mut client, request).await;
    assert_eq!(outcome(&again), ClaimOutcome::Dead);
    assert!(again.lease.is_none());
}

#[tokio::test]
async fn a_takeover_past_the_budget_is_dead_not_acquired() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let request = with_policy("p", "w", policy(1, 1_000, 1_000, 3_600));
    claim(&mut client, request.clone()).await;
    app.expire_lease(NS, "p").await;
    let taken = claim(
        &mut client,
        with_policy("p", "other", request.retry_policy.unwrap()),
    )
    .await;
    assert_eq!(outcome(&taken), ClaimOutcome::Dead);
    let history = lookup_history(&mut client, NS, "p").await.executions;
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].outcome(), ExecutionOutcome::Superseded);
}

#[tokio::test]
async fn a_retry_past_the_deadline_is_dead() {
    let app = spawn_app().await;
    let pushback = Some(Duration::from_secs(31));
    let op = fail_first_attempt(
        &mut app.client.clone(),
        policy(5, 1_000, 1_000, 30),
        pushback,
    )
    .await;
    assert_eq!(op.status(), OperationStatus::Dead);
}

#[tokio::test]
async fn an_unknown_outcome_is_reconciled_before_anything_else() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let first = claim(
        &mut client,
        claim_request(NS, "u", "w1", json!({"amount": 5})),
    )
    .await;
    let op = complete(&mut client, "u", token(&first), unknown("bank-ref-9")).await;
    assert_eq!(op.status(), OperationStatus::Unknown);
    assert_eq!(op.remote_ref, "bank-ref-9");

    let reconcile = claim(
        &mut client,
        claim_request(NS, "u", "w2", json!({"amount": 5})),
    )
    .await;
    assert_eq!(outcome(&reconcile), ClaimOutcome::Reconcile);
    let operation = reconcile.operation.clone().unwrap();
    assert!(operation.reconciling);
    assert_eq!(operation.status(), OperationStatus::InProgress);
    assert_eq!(operation.attempts, 1, "a reconcile is not an attempt");
    // The same holder resumes its reconcile lease.
    let resumed = claim(
        &mut client,
        claim_request(NS, "u", "w2", json!({"amount": 5})),
    )
    .await;
    assert_eq!(
        (outcome(&resumed), resumed.lease.clone()),
        (ClaimOutcome::Reconcile, reconcile.lease.clone())
    );

    // A reconcile lease that expires leads to another reconcile, never an execution.
    app.expire_lease(NS, "u").await;
    let again = claim(
        &mut client,
        claim_request(NS, "u", "w3", json!({"amount": 5})),
    )
    .await;
    assert_eq!(outcome(&again), ClaimOutcome::Reconcile);
    assert!(token(&again) > token(&reconcile));

    // The remote system says it happened: record it.
    let settled = complete(&mut client, "u", token(&again), success(b"paid")).await;
    assert_eq!(settled.status(), OperationStatus::Succeeded);
    assert!(!settled.reconciling);
    let replay = claim(
        &mut client,
        claim_request(NS, "u", "w4", json!({"amount": 5})),
    )
    .await;
    assert_eq!(outcome(&replay), ClaimOutcome::Replayed);
    assert_eq!(replay.operation.unwrap().result, b"paid");

    let history = lookup_history(&mut client, NS, "u").await.executions;
    let kinds: Vec<_> = history
        .iter()
        .map(|e| (e.attempt, e.kind(), e.outcome()))
        .collect();
    assert_eq!(
        kinds,
        [
            (1, ExecutionKind::First, ExecutionOutcome::Unknown),
            (1, ExecutionKind::Reconcile, ExecutionOutcome::Superseded),
            (1, ExecutionKind::Reconcile, ExecutionOutcome::Succeeded),
        ]
    );
    assert_eq!(history[0].execution_id, "run-w1");
}

#[tokio::test]
async fn a_reconcile_reporting_unknown_again_stays_unknown() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let first = claim(&mut client, claim_request(NS, "u", "w1", json!({}))).await;
    complete(&mut client, "u", token(&first), unknown("r1")).await;
    let reconcile = claim(&mut client, claim_request(NS, "u", "w2", json!({}))).await;
    let op = complete(&mut client, "u", token(&reconcile), unknown("r1")).await;
    assert_eq!(op.status(), OperationStatus::Unknown);
    let next = claim(&mut client, claim_request(NS, "u", "w3", json!({}))).await;
    assert_eq!(outcome(&next), ClaimOutcome::Reconcile);
}

#[tokio::test]
async fn a_repeated_complete_answers_the_same_and_a_different_one_is_refused() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let first = claim(&mut client, claim_request(NS, "c", "w", json!({}))).await;
    let once = complete(&mut client, "c", token(&first), success(b"r")).await;
    let twice = complete(&mut client, "c", token(&first), success(b"r")).await;
    assert_eq!(once, twice);
    let status = assert_error(
        client
            .complete(complete_request(NS, "c", token(&first), success(b"other")))
            .await,
        Code::FailedPrecondition,
        "ALREADY_COMPLETED",
    );
    assert!(!status.message().is_empty());
    let retried = claim(&mut client, claim_request(NS, "r", "w", json!({}))).await;
    let scheduled = complete(&mut client, "r", token(&retried), retryable(None)).await;
    let repeated = complete(&mut client, "r", token(&retried), retryable(None)).await;
    assert_eq!(
        scheduled.next_attempt_at, repeated.next_attempt_at,
        "no new jitter"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM executions WHERE outcome_digest IS NOT NULL")
            .await,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_identical_completes_record_once() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let first = claim(&mut client, claim_request(NS, "c", "w", json!({}))).await;
    let token = token(&first);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let mut client = client.clone();
        tasks.spawn(async move {
            client
                .complete(complete_request(NS, "c", token, success(b"once")))
                .await
        });
    }
    while let Some(joined) = tasks.join_next().await {
        let operation = joined
            .unwrap()
            .expect("every repeat succeeds")
            .into_inner()
            .operation
            .unwrap();
        assert_eq!(operation.status(), OperationStatus::Succeeded);
    }
    assert_eq!(
        app.count("SELECT count(*) FROM executions WHERE outcome = 'succeeded'")
            .await,
        1
    );
}

#[tokio::test]
async fn a_failure_is_replayed_like_a_success() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let first = claim(&mut client, claim_request(NS, "f", "w", json!({}))).await;
    let failure = pb::complete_request::Outcome::Failure(pb::Failure {
        code: "INSUFFICIENT_BALANCE".into(),
        message: "balance 20 < 100".into(),
    });
    complete(&mut client, "f", token(&first), failure).await;
    let replay = claim(&mut client, claim_request(NS, "f", "other", json!({}))).await;
    assert_eq!(outcome(&replay), ClaimOutcome::Replayed);
    let op = replay.operation.unwrap();
    assert_eq!(op.status(), OperationStatus::Failed);
    assert_eq!(op.failure.unwrap().code, "INSUFFICIENT_BALANCE");
}

#[tokio::test]
async fn lookup_of_an_unknown_key_is_not_found() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let result = client
        .lookup(pb::LookupRequest {
            namespace: NS.into(),
            operation_key: "missing".into(),
            include_executions: true,
            ..Default::default()
        })
        .await;
    assert_error(result, Code::NotFound, "OPERATION_NOT_FOUND");
    let result = client
        .get_resource(pb::GetResourceRequest {
            namespace: NS.into(),
            resource: "missing".into(),
        })
        .await;
    assert_error(result, Code::NotFound, "RESOURCE_NOT_FOUND");
    let result = client
        .complete(complete_request(NS, "missing", 1, success(b"")))
        .await;
    assert_error(result, Code::NotFound, "OPERATION_NOT_FOUND");
}

/// Complete is one guarded statement with no transaction around it, so this
/// races it against itself and against takeovers of the lease it reports on,
/// then checks every operation's row against its executions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn completes_racing_each_other_and_a_takeover_record_one_outcome_per_lease() {
    const KEYS: usize = 40;
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let mut leases = Vec::new();
    for i in 0..KEYS {
        let key = format!("race-{i}");
        let first = claim(&mut client, claim_request(NS, &key, "w", json!({}))).await;
        app.expire_lease(NS, &key).await;
        leases.push((key, token(&first)));
    }
    let failure = || {
        pb::complete_request::Outcome::Failure(pb::Failure {
            code: "DECLINED".into(),
            message: String::new(),
        })
    };
    let mut acquired = 0;
    // One key at a time, so each takeover is a few milliseconds; the reports
    // start up to 1.75 ms after it, so both orders happen.
    for (i, (key, old)) in leases.into_iter().enumerate() {
        let head_start = Duration::from_micros(250 * (i % 8) as u64);
        let report = |outcome: pb::complete_request::Outcome| {
            let (mut client, key) = (client.clone(), key.clone());
            async move {
                tokio::time::sleep(head_start).await;
                client
                    .complete(complete_request(NS, &key, old, outcome))
                    .await
            }
        };
        let mut taker = client.clone();
        let takeover = claim(&mut taker, claim_request(NS, &key, "taker", json!({})));
        let (succeeded, failed, taken) =
            tokio::join!(report(success(b"ok")), report(failure()), takeover);
        let taken = outcome(&taken);
        let accepted = [&succeeded, &failed]
            .iter()
            .filter(|answer| answer.is_ok())
            .count();
        for refused in [&succeeded, &failed]
            .into_iter()
            .filter_map(|a| a.as_ref().err())
        {
            let reason = opreg_client::error_reason(refused).unwrap_or_default();
            assert!(
                matches!(reason.as_str(), "ALREADY_COMPLETED" | "STALE_FENCING_TOKEN"),
                "{key}: {refused:?}"
            );
        }
        let (status, token): (String, i64) = sqlx::query_as(
            "SELECT status, fencing_token FROM operations WHERE namespace = $1 AND operation_key = $2",
        )
        .bind(NS)
        .bind(&key)
        .fetch_one(&app.db)
        .await
        .unwrap();
        let recorded: Vec<(i64, String)> = sqlx::query_as(
            "SELECT fencing_token, outcome FROM executions
             WHERE namespace = $1 AND operation_key = $2 AND outcome_digest IS NOT NULL",
        )
        .bind(NS)
        .bind(&key)
        .fetch_all(&app.db)
        .await
        .unwrap();
        if taken == ClaimOutcome::Acquired {
            acquired += 1;
            assert_eq!(
                accepted, 0,
                "{key}: a report was accepted for a lease taken over"
            );
            assert!(recorded.is_empty(), "{key}: {recorded:?}");
            assert_eq!(status, "in_progress");
            assert!(token > i64::try_from(old).unwrap());
        } else {
            assert_eq!(taken, ClaimOutcome::Replayed, "{key}");
            assert_eq!(accepted, 1, "{key}: exactly one report wins");
            let winner = if succeeded.is_ok() {
                "succeeded"
            } else {
                "failed"
            };
            assert_eq!(status, winner, "{key}");
            assert_eq!(
                recorded,
                vec![(i64::try_from(old).unwrap(), winner.to_owned())]
            );
        }
    }
    println!("{acquired} of {KEYS} leases were taken over before a report landed");
}
