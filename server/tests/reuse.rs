//! What a finished key allows (ReusePolicy): replay, start again after a
//! failure, or refuse any existing key; each checked in the database, and
//! the races between them run for real.

mod common;

use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome};
use serde_json::json;
use tonic::Code;

const NS: &str = "payments";

fn reusing(key: &str, owner: &str, reuse: pb::ReusePolicy) -> pb::ClaimRequest {
    pb::ClaimRequest {
        reuse: reuse.into(),
        ..claim_request(NS, key, owner, json!({"amount": 100}))
    }
}

fn failure(code: &str) -> pb::complete_request::Outcome {
    pb::complete_request::Outcome::Failure(pb::Failure {
        code: code.into(),
        message: "declined".into(),
    })
}

/// Registers `key` and records a business failure for it.
async fn failed(client: &mut Client, key: &str) -> u64 {
    let first = claim(
        client,
        claim_request(NS, key, "first", json!({"amount": 100})),
    )
    .await;
    client
        .complete(complete_request(
            NS,
            key,
            token(&first),
            failure("insufficient_funds"),
        ))
        .await
        .unwrap();
    token(&first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reuse_after_failure_racing_replays_starts_exactly_one_new_attempt() {
    let (first, second) = two_patient_replicas().await;
    let key = "order:42";
    let mut client = first.client.clone();
    let failed_token = failed(&mut client, key).await;
    // Both replicas keep the failure in memory before the race.
    for app in [&first, &second] {
        let mut replayer = app.client.clone();
        let replayed = claim(
            &mut replayer,
            claim_request(NS, key, "r", json!({"amount": 100})),
        )
        .await;
        assert_eq!(outcome(&replayed), ClaimOutcome::Replayed);
    }

    let mut racers = tokio::task::JoinSet::new();
    for i in 0..24 {
        let mut client = if i % 2 == 0 {
            first.client.clone()
        } else {
            second.client.clone()
        };
        let policy = if i % 3 == 0 {
            pb::ReusePolicy::AfterFailure
        } else {
            pb::ReusePolicy::Replay
        };
        racers.spawn(async move {
            let answer = client
                .claim(reusing(key, &format!("racer-{i}"), policy))
                .await
                .unwrap()
                .into_inner();
            (policy, answer)
        });
    }
    let mut acquired = Vec::new();
    while let Some(joined) = racers.join_next().await {
        let (policy, answer) = joined.unwrap();
        match (policy, outcome(&answer)) {
            (pb::ReusePolicy::AfterFailure, ClaimOutcome::Acquired) => {
                acquired.push(token(&answer));
            }
            (_, ClaimOutcome::InProgress) => {}
            (pb::ReusePolicy::Replay, ClaimOutcome::Replayed) => {
                // A replay is the failure as it was, never a half-reused row.
                let operation = answer.operation.unwrap();
                assert_eq!(operation.status(), pb::OperationStatus::Failed);
                assert_eq!(operation.failure.unwrap().code, "insufficient_funds");
            }
            (policy, other) => panic!("{policy:?} answered {other:?}"),
        }
    }
    assert_eq!(acquired.len(), 1, "exactly one new attempt: {acquired:?}");
    assert!(acquired[0] > failed_token);

    let row: (String, i32, i32, i64, Option<String>) = sqlx::query_as(
        "SELECT status, attempts, budget_attempts_base, fencing_token, failure_code
         FROM operations WHERE namespace = $1 AND operation_key = $2",
    )
    .bind(NS)
    .bind(key)
    .fetch_one(&first.db)
    .await
    .unwrap();
    assert_eq!(
        row,
        (
            "in_progress".into(),
            2,
            1,
            i64::try_from(acquired[0]).unwrap(),
            None
        )
    );
    let executions: Vec<(String, String, i32)> = sqlx::query_as(
        "SELECT kind, outcome, attempt FROM executions WHERE operation_key = $1
         ORDER BY fencing_token",
    )
    .bind(key)
    .fetch_all(&first.db)
    .await
    .unwrap();
    assert_eq!(
        executions,
        [
            ("first".into(), "failed".into(), 1),
            ("reuse".into(), "running".into(), 2),
        ]
    );
    let audit: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT action, operator, status_before, status_after FROM audit_entries
         WHERE operation_key = $1",
    )
    .bind(key)
    .fetch_all(&first.db)
    .await
    .unwrap();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].0, "reuse");
    assert_eq!(
        (audit[0].2.as_str(), audit[0].3.as_str()),
        ("failed", "in_progress")
    );
    // Metrics are the test process's, shared by both replicas; no other test
    // here reuses in this namespace.
    let reuses = scrape(first.metrics_addr)
        .await
        .value("opreg_reuses_total", &[("namespace", NS)]);
    assert_eq!(reuses, 1.0);

    // Lookup shows both attempts and the trail; the new one completes as usual.
    let history = lookup_history(&mut client, NS, key).await;
    assert_eq!(history.executions.len(), 2);
    assert_eq!(history.executions[1].kind(), pb::ExecutionKind::Reuse);
    client
        .complete(complete_request(NS, key, acquired[0], success(b"paid")))
        .await
        .unwrap();
    let replayed = claim(
        &mut client,
        reusing(key, "late", pb::ReusePolicy::AfterFailure),
    )
    .await;
    assert_eq!(
        outcome(&replayed),
        ClaimOutcome::Replayed,
        "never after a success"
    );
    assert_eq!(replayed.operation.unwrap().result, b"paid");
}

#[tokio::test]
async fn reuse_restarts_a_dead_operation_under_a_fresh_budget_and_claim_due_follows_it() {
    let app = spawn_app().await;
    let (ns, key) = ("payouts", "payout:dead");
    let mut client = app.client.clone();
    let once = pb::ClaimRequest {
        retry_policy: Some(policy(1)),
        ..claim_request(ns, key, "first", json!({"amount": 100}))
    };
    let first = claim(&mut client, once).await;
    let dead = client
        .complete(complete_request(ns, key, token(&first), retryable(None)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(dead.operation.unwrap().status(), pb::OperationStatus::Dead);

    let again = pb::ClaimRequest {
        retry_policy: Some(policy(3)),
        reuse: pb::ReusePolicy::AfterFailure.into(),
        ..claim_request(ns, key, "second", json!({"amount": 100}))
    };
    let again = claim(&mut client, again).await;
    assert_eq!(outcome(&again), ClaimOutcome::Acquired);
    // A retryable failure of the new attempt is queued under the new budget,
    // and ClaimDue hands it out with the attempts counted on.
    client
        .complete(complete_request(ns, key, token(&again), retryable(None)))
        .await
        .unwrap();
    app.make_retry_due(ns, key).await;
    let due = claim_due(&mut client, ns, "worker", 10).await;
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].lease.as_ref().unwrap().attempt, 3);
}

#[tokio::test]
async fn the_policies_never_override_a_parameter_conflict() {
    let app = spawn_app().await;
    let key = "order:7";
    let mut client = app.client.clone();
    failed(&mut client, key).await;
    for policy in [
        pb::ReusePolicy::AfterFailure,
        pb::ReusePolicy::RejectExisting,
    ] {
        let other = pb::ClaimRequest {
            reuse: policy.into(),
            ..claim_request(NS, key, "x", json!({"amount": 999}))
        };
        assert_error(
            client.claim(other).await,
            Code::AlreadyExists,
            "PARAMETER_CONFLICT",
        );
    }
    assert_eq!(app.count("SELECT count(*) FROM executions").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reject_existing_against_a_concurrent_first_claim_lets_exactly_one_through() {
    let (first, second) = two_patient_replicas().await;
    let key = "signup:ada";
    let mut racers = tokio::task::JoinSet::new();
    for i in 0..30 {
        let mut client = if i % 2 == 0 {
            first.client.clone()
        } else {
            second.client.clone()
        };
        racers.spawn(async move {
            client
                .claim(reusing(
                    key,
                    &format!("racer-{i}"),
                    pb::ReusePolicy::RejectExisting,
                ))
                .await
        });
    }
    let (mut acquired, mut refused) = (Vec::new(), 0);
    while let Some(joined) = racers.join_next().await {
        match joined.unwrap() {
            Ok(answer) => {
                assert_eq!(outcome(answer.get_ref()), ClaimOutcome::Acquired);
                acquired.push(answer.into_inner());
            }
            Err(status) => {
                let status = assert_error(
                    Err::<(), _>(status),
                    Code::AlreadyExists,
                    "OPERATION_EXISTS",
                );
                assert_eq!(
                    metadata(&status, "currentStatus"),
                    "OPERATION_STATUS_IN_PROGRESS"
                );
                refused += 1;
            }
        }
    }
    assert_eq!((acquired.len(), refused), (1, 29));
    assert_eq!(first.count("SELECT count(*) FROM operations").await, 1);
    assert_eq!(first.count("SELECT count(*) FROM executions").await, 1);

    // The winner's own retry (its answer lost) resumes its lease.
    let winner = acquired[0].lease.as_ref().unwrap().owner.clone();
    let mut client = first.client.clone();
    let resumed = claim(
        &mut client,
        reusing(key, &winner, pb::ReusePolicy::RejectExisting),
    )
    .await;
    assert_eq!(outcome(&resumed), ClaimOutcome::Acquired);
    assert_eq!(token(&resumed), token(&acquired[0]));
    // A finished key is refused too.
    client
        .complete(complete_request(NS, key, token(&resumed), success(b"ok")))
        .await
        .unwrap();
    let refused = client
        .claim(reusing(key, &winner, pb::ReusePolicy::RejectExisting))
        .await;
    let status = assert_error(refused, Code::AlreadyExists, "OPERATION_EXISTS");
    assert_eq!(
        metadata(&status, "currentStatus"),
        "OPERATION_STATUS_SUCCEEDED"
    );
}

#[tokio::test]
async fn an_unknown_reuse_policy_is_refused() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let request = pb::ClaimRequest {
        reuse: 42,
        ..claim_request(NS, "order:1", "x", json!({}))
    };
    let status = assert_error(
        client.claim(request).await,
        Code::InvalidArgument,
        "INVALID_ARGUMENT",
    );
    assert!(status.message().contains("reuse"), "{status:?}");
    assert_eq!(app.count("SELECT count(*) FROM operations").await, 0);
}
