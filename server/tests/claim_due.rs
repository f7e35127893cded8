//! ClaimDue: the durable retry queue. Due retries, expired leases and unknown
//! outcomes go to exactly one worker per token, skipped rows come back, budgets
//! apply as in Claim, and the per-namespace retry cap holds under racing pullers.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome, ExecutionKind, ExecutionOutcome};
use serde_json::json;
use tonic::Code;

const NS: &str = "payouts";

/// `n` operations per kind of due work: retries due now, expired leases, and
/// unknown outcomes. Returns their keys by the outcome ClaimDue must give.
async fn due_work(app: &TestApp, n: usize) -> HashMap<String, (ClaimOutcome, ExecutionKind)> {
    let mut client = app.client.clone();
    let mut expected = HashMap::new();
    for i in 0..n {
        let retry = format!("retry:{i}");
        settle(&mut client, NS, &retry, retryable(Some(Duration::ZERO))).await;
        expected.insert(retry, (ClaimOutcome::Acquired, ExecutionKind::Retry));

        let unknown_key = format!("unknown:{i}");
        settle(&mut client, NS, &unknown_key, unknown("psp-1")).await;
        expected.insert(
            unknown_key,
            (ClaimOutcome::Reconcile, ExecutionKind::Reconcile),
        );

        let stalled = format!("stalled:{i}");
        claim(
            &mut client,
            claim_request(NS, &stalled, "crashed", json!({"key": stalled})),
        )
        .await;
        expected.insert(stalled, (ClaimOutcome::Acquired, ExecutionKind::Takeover));
    }
    sqlx::query(
        "UPDATE operations SET lease_expires_at = clock_timestamp() - interval '1 millisecond'
         WHERE status = 'in_progress'",
    )
    .execute(&app.db)
    .await
    .unwrap();
    expected
}

#[tokio::test]
async fn concurrent_pullers_hand_each_due_operation_out_exactly_once() {
    let app = spawn_app().await;
    let expected = due_work(&app, 100).await;

    let mut pullers = Vec::new();
    for worker in 0..4 {
        let mut client = app.new_client().await;
        pullers.push(tokio::spawn(async move {
            let owner = format!("worker-{worker}");
            let mut handed = Vec::new();
            loop {
                let page = claim_due(&mut client, NS, &owner, 25).await;
                if page.is_empty() {
                    return handed;
                }
                handed.extend(page.into_iter().map(|due| (owner.clone(), due)));
            }
        }));
    }
    let mut handed = Vec::new();
    for puller in pullers {
        handed.extend(puller.await.unwrap());
    }

    let mut seen = HashSet::new();
    let mut tokens = HashSet::new();
    for (owner, due) in &handed {
        let operation = due.operation.as_ref().unwrap();
        let lease = due.lease.as_ref().unwrap();
        assert!(
            seen.insert(operation.operation_key.clone()),
            "{} handed out twice",
            operation.operation_key
        );
        assert!(tokens.insert(lease.fencing_token), "token reused");
        assert_eq!(&lease.owner, owner);
        let (outcome, _) = expected[&operation.operation_key];
        assert_eq!(due.outcome(), outcome, "{}", operation.operation_key);
        assert_eq!(
            operation.parameters,
            Some(opreg_client::parameters(
                json!({"key": operation.operation_key})
            )),
            "a worker learns what to run"
        );
    }
    assert_eq!(
        seen.len(),
        expected.len(),
        "every due operation was handed out"
    );

    // The database agrees: one current lease per operation, held by the
    // puller it was handed to, started by an execution of the right kind.
    let leases: Vec<(String, String, i64, String)> = sqlx::query_as(
        "SELECT o.operation_key, o.lease_owner, o.fencing_token, e.kind
         FROM operations o JOIN executions e ON e.fencing_token = o.fencing_token
         WHERE o.status = 'in_progress' AND o.lease_expires_at > clock_timestamp()",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(leases.len(), expected.len());
    let owners: HashMap<_, _> = handed
        .iter()
        .map(|(owner, due)| (due.operation.as_ref().unwrap().operation_key.clone(), owner))
        .collect();
    for (key, owner, _, kind) in &leases {
        assert_eq!(owners[key], owner);
        let (_, expected_kind) = expected[key];
        assert_eq!(
            kind,
            &expected_kind.as_str_name()["EXECUTION_KIND_".len()..].to_lowercase()
        );
    }
    let superseded = app
        .count("SELECT count(*) FROM executions WHERE outcome = 'superseded'")
        .await;
    assert_eq!(
        superseded, 100,
        "each taken-over lease's execution is superseded"
    );
}

#[tokio::test]
async fn a_row_locked_by_another_worker_is_skipped_and_found_again() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    settle(&mut client, NS, "locked", retryable(Some(Duration::ZERO))).await;
    settle(&mut client, NS, "free", retryable(Some(Duration::ZERO))).await;

    let lock = app.lock_row("locked").await;

    let first = tokio::time::timeout(
        Duration::from_secs(5),
        claim_due(&mut client, NS, "worker", 10),
    )
    .await
    .expect("a locked row is skipped, not waited for");
    let keys: Vec<_> = first
        .iter()
        .map(|due| due.operation.as_ref().unwrap().operation_key.as_str())
        .collect();
    assert_eq!(keys, ["free"]);
    assert!(claim_due(&mut client, NS, "worker", 10).await.is_empty());

    lock.release().await;
    let again = claim_due(&mut client, NS, "worker", 10).await;
    assert_eq!(again.len(), 1, "the skipped row is due again");
    assert_eq!(again[0].operation.as_ref().unwrap().operation_key, "locked");
    assert_eq!(again[0].outcome(), ClaimOutcome::Acquired);
}

#[tokio::test]
async fn unknown_outcomes_only_ever_reconcile_and_budgets_apply_as_in_claim() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let mut request = claim_request(NS, "once", "setup", json!({"n": 1}));
    request.retry_policy = Some(policy(1));
    let first = claim(&mut client, request.clone()).await;
    client
        .complete(complete_request(
            NS,
            "once",
            token(&first),
            unknown("psp-9"),
        ))
        .await
        .unwrap();
    // A second operation whose only attempt stalled: its takeover would exceed the budget.
    let mut stalled = claim_request(NS, "stalled-once", "crashed", json!({"n": 2}));
    stalled.retry_policy = Some(policy(1));
    claim(&mut client, stalled).await;
    app.expire_lease(NS, "stalled-once").await;

    let handed = claim_due(&mut client, NS, "reconciler", 10).await;
    assert_eq!(handed.len(), 1, "the exhausted one is not handed out");
    assert_eq!(handed[0].outcome(), ClaimOutcome::Reconcile);
    let lease = handed[0].lease.clone().unwrap();
    assert_eq!(lease.attempt, 1, "a reconciliation spends no attempt");
    // ClaimDue exhausts it, or the maintenance's first pass (at start-up) did
    // and holds the row until it commits: either way it goes DEAD.
    let mut status = pb::OperationStatus::Unspecified;
    for _ in 0..50 {
        let dead = lookup_history(&mut client, NS, "stalled-once").await;
        status = dead.operation.unwrap().status();
        if status == pb::OperationStatus::Dead {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(status, pb::OperationStatus::Dead);

    // The reconciler dies too: the expired reconcile lease reconciles again,
    // never re-executes, even with the budget spent.
    app.expire_lease(NS, "once").await;
    let again = claim_due(&mut client, NS, "reconciler-2", 10).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].outcome(), ClaimOutcome::Reconcile);
    assert!(again[0].lease.as_ref().unwrap().fencing_token > lease.fencing_token);
    let history = lookup_history(&mut client, NS, "once").await;
    let kinds: Vec<_> = history
        .executions
        .iter()
        .map(|e| (e.kind(), e.outcome()))
        .collect();
    assert_eq!(
        kinds,
        [
            (ExecutionKind::First, ExecutionOutcome::Unknown),
            (ExecutionKind::Reconcile, ExecutionOutcome::Superseded),
            (ExecutionKind::Reconcile, ExecutionOutcome::Running),
        ]
    );
}

#[tokio::test]
async fn the_retry_cap_holds_under_concurrent_pullers() {
    let app = spawn_app_with(|config| {
        config.lifecycle.namespace_max_concurrent_retries = "payouts=5".parse().unwrap();
    })
    .await;
    let mut client = app.client.clone();
    for i in 0..40 {
        settle(
            &mut client,
            NS,
            &format!("capped:{i}"),
            retryable(Some(Duration::ZERO)),
        )
        .await;
        settle(
            &mut client,
            "uncapped",
            &format!("free:{i}"),
            retryable(Some(Duration::ZERO)),
        )
        .await;
    }

    let mut pullers = Vec::new();
    for worker in 0..8 {
        let mut client = app.new_client().await;
        pullers.push(tokio::spawn(async move {
            claim_due(&mut client, NS, &format!("worker-{worker}"), 10).await
        }));
    }
    let mut handed = Vec::new();
    for puller in pullers {
        handed.extend(puller.await.unwrap());
    }
    assert_eq!(handed.len(), 5, "eight racing pullers share the cap of 5");
    let live = app
        .count(
            "SELECT count(*) FROM operations WHERE namespace = 'payouts'
             AND status = 'in_progress' AND lease_expires_at > clock_timestamp()",
        )
        .await;
    assert_eq!(live, 5);

    // Finishing two frees two slots; other namespaces are not capped.
    for due in &handed[..2] {
        let lease = due.lease.as_ref().unwrap();
        let key = &due.operation.as_ref().unwrap().operation_key;
        client
            .complete(complete_request(
                NS,
                key,
                lease.fencing_token,
                success(b"ok"),
            ))
            .await
            .unwrap();
    }
    assert_eq!(claim_due(&mut client, NS, "worker-9", 10).await.len(), 2);
    assert_eq!(
        claim_due(&mut client, "uncapped", "worker-9", 100)
            .await
            .len(),
        40
    );
}

#[tokio::test]
async fn claim_due_refuses_bad_requests_with_the_field_named() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let request = |limit: u32, owner: &str| pb::ClaimDueRequest {
        namespace: NS.into(),
        owner: owner.into(),
        limit,
        ..Default::default()
    };
    for (bad, field) in [(request(1001, "w"), "limit"), (request(1, ""), "owner")] {
        let status = assert_error(
            client.claim_due(bad).await,
            Code::InvalidArgument,
            "INVALID_ARGUMENT",
        );
        let violations = tonic_types::StatusExt::get_details_bad_request(&status).unwrap();
        assert_eq!(violations.field_violations[0].field, field);
    }
    assert!(
        claim_due(&mut client, NS, "w", 0).await.is_empty(),
        "0 asks for the default"
    );
}
