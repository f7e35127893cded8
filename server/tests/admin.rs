//! OperationAdmin: hold, release, resolve and requeue, each one guarded
//! transaction with exactly one audit row, and the refusals the state machine
//! gives for everything else.

mod common;

use std::time::Duration;

use common::*;
use opreg_client::proto::{
    self as pb, AdminAction, ClaimOutcome, ExecutionOutcome, OperationStatus,
};
use serde_json::json;
use tonic::Code;

const NS: &str = "payments";

fn hold(key: &str) -> pb::HoldOperationRequest {
    pb::HoldOperationRequest {
        namespace: NS.into(),
        operation_key: key.into(),
        operator: "alice".into(),
        reason: "customer disputes the debit".into(),
    }
}

fn release(key: &str) -> pb::ReleaseOperationRequest {
    pb::ReleaseOperationRequest {
        namespace: NS.into(),
        operation_key: key.into(),
        operator: "alice".into(),
        reason: "ledger checked".into(),
    }
}

fn resolve(
    key: &str,
    outcome: pb::resolve_operation_request::Outcome,
) -> pb::ResolveOperationRequest {
    pb::ResolveOperationRequest {
        namespace: NS.into(),
        operation_key: key.into(),
        operator: "bob".into(),
        reason: "PSP statement shows the payout".into(),
        outcome: Some(outcome),
    }
}

fn resolved_success(result: &[u8]) -> pb::resolve_operation_request::Outcome {
    pb::resolve_operation_request::Outcome::Success(pb::Success {
        result: result.to_vec(),
        result_ref: "psp-7".into(),
    })
}

fn requeue(key: &str, retry_policy: Option<pb::RetryPolicy>) -> pb::RequeueOperationRequest {
    pb::RequeueOperationRequest {
        namespace: NS.into(),
        operation_key: key.into(),
        operator: "carol".into(),
        reason: "downstream fixed".into(),
        revision: "account unblocked".into(),
        retry_policy,
    }
}

async fn audit(client: &mut Client, key: &str) -> Vec<pb::AuditEntry> {
    client
        .lookup(pb::LookupRequest {
            namespace: NS.into(),
            operation_key: key.into(),
            include_audit: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .audit
}

/// Asserts INVALID_TRANSITION with the current status (and held flag) in metadata.
fn assert_invalid_transition<T: std::fmt::Debug>(
    result: Result<T, tonic::Status>,
    status: OperationStatus,
    held: bool,
) {
    let refused = assert_error(result, Code::FailedPrecondition, "INVALID_TRANSITION");
    assert_eq!(metadata(&refused, "currentStatus"), status.as_str_name());
    assert_eq!(metadata(&refused, "held"), held.to_string());
}

#[tokio::test]
async fn a_hold_fences_off_the_live_holder_and_its_release_leaves_the_outcome_unknown() {
    let app = spawn_app().await;
    let (mut client, mut admin) = (app.client.clone(), app.admin.clone());
    let key = "debit:order-A";
    let first = claim(
        &mut client,
        claim_request(NS, key, "worker-1", json!({"amount": 100})),
    )
    .await;
    let old = token(&first);

    let held = admin.hold_operation(hold(key)).await.unwrap().into_inner();
    let entry = held.audit.unwrap();
    assert_eq!(entry.action(), AdminAction::Hold);
    assert_eq!(
        (entry.operator.as_str(), entry.reason.as_str()),
        ("alice", "customer disputes the debit")
    );
    assert_eq!(entry.status_before(), OperationStatus::InProgress);
    assert!(!entry.held_before && entry.held_after);
    assert_eq!(entry.token_before, old);
    assert!(
        entry.token_after > old,
        "the live lease's token is superseded"
    );
    let operation = held.operation.unwrap();
    assert!(operation.held && operation.lease.is_none());

    // The old holder is refused everywhere, and every caller hears HELD.
    for (rpc, result) in [
        (
            "Complete",
            client
                .complete(complete_request(NS, key, old, success(b"done")))
                .await
                .map(|_| ()),
        ),
        (
            "Renew",
            client
                .renew(renew_request(NS, key, "worker-1", old))
                .await
                .map(|_| ()),
        ),
        (
            "FencedWrite",
            client
                .fenced_write(write_request(NS, key, old, b"900"))
                .await
                .map(|_| ()),
        ),
    ] {
        let refused = assert_error(result, Code::Aborted, "STALE_FENCING_TOKEN");
        assert_eq!(
            metadata(&refused, "presentedToken"),
            old.to_string(),
            "{rpc}"
        );
    }
    for owner in ["worker-1", "worker-2"] {
        let answer = claim(
            &mut client,
            claim_request(NS, key, owner, json!({"amount": 100})),
        )
        .await;
        assert_eq!(outcome(&answer), ClaimOutcome::Held, "{owner}");
        assert!(answer.lease.is_none());
        assert_eq!(answer.retry_after.unwrap().seconds, 60);
    }
    app.expire_lease(NS, key).await;
    assert!(
        claim_due(&mut client, NS, "sweeper", 10).await.is_empty(),
        "held work is not due"
    );
    assert_invalid_transition(
        admin.hold_operation(hold(key)).await,
        OperationStatus::InProgress,
        true,
    );

    let released = admin
        .release_operation(release(key))
        .await
        .unwrap()
        .into_inner();
    let operation = released.operation.unwrap();
    assert_eq!(
        operation.status(),
        OperationStatus::Unknown,
        "the revoked execution may have acted"
    );
    assert!(!operation.held);
    assert_eq!(operation.last_error_class, "lease_revoked");
    let history = lookup_history(&mut client, NS, key).await;
    assert_eq!(history.executions[0].outcome(), ExecutionOutcome::Revoked);
    let next = claim(
        &mut client,
        claim_request(NS, key, "worker-2", json!({"amount": 100})),
    )
    .await;
    assert_eq!(outcome(&next), ClaimOutcome::Reconcile);

    let trail = audit(&mut client, key).await;
    let actions: Vec<_> = trail.iter().map(|entry| entry.action()).collect();
    assert_eq!(actions, [AdminAction::Hold, AdminAction::Release]);
    assert_eq!(trail[1].status_before(), OperationStatus::InProgress);
    assert_eq!(trail[1].status_after(), OperationStatus::Unknown);
    assert_eq!(app.count("SELECT count(*) FROM audit_entries").await, 2);
}

#[tokio::test]
async fn a_held_retry_is_skipped_while_due_and_returns_to_its_status() {
    let app = spawn_app().await;
    let (mut client, mut admin) = (app.client.clone(), app.admin.clone());
    settle(&mut client, NS, "retry", retryable(Some(Duration::ZERO))).await;
    let held = admin
        .hold_operation(hold("retry"))
        .await
        .unwrap()
        .into_inner();
    let entry = held.audit.unwrap();
    assert_eq!(
        entry.token_before, entry.token_after,
        "no lease, nothing to revoke"
    );
    assert!(claim_due(&mut client, NS, "worker", 10).await.is_empty());

    let released = admin
        .release_operation(release("retry"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        released.operation.unwrap().status(),
        OperationStatus::RetryScheduled
    );
    assert_eq!(
        claim_due(&mut client, NS, "worker", 10).await.len(),
        1,
        "due again"
    );
}

#[tokio::test]
async fn resolve_records_the_real_outcome_and_revokes_a_reconcile_lease() {
    let app = spawn_app().await;
    let (mut client, mut admin) = (app.client.clone(), app.admin.clone());
    let key = "payout:order-B";
    settle(&mut client, NS, key, unknown("psp-7")).await;
    let reconciling = claim(
        &mut client,
        claim_request(NS, key, "reconciler", json!({"key": key})),
    )
    .await;
    assert_eq!(outcome(&reconciling), ClaimOutcome::Reconcile);

    let resolved = admin
        .resolve_operation(resolve(key, resolved_success(b"paid")))
        .await
        .unwrap()
        .into_inner();
    let operation = resolved.operation.unwrap();
    assert_eq!(operation.status(), OperationStatus::Succeeded);
    assert!(operation.completed_at.is_some());
    let entry = resolved.audit.unwrap();
    assert_eq!(entry.action(), AdminAction::Resolve);
    assert_eq!(entry.status_after(), OperationStatus::Succeeded);

    let late = client
        .complete(complete_request(
            NS,
            key,
            token(&reconciling),
            unknown("psp-7"),
        ))
        .await;
    assert_error(late, Code::Aborted, "STALE_FENCING_TOKEN");
    let replay = claim(
        &mut client,
        claim_request(NS, key, "caller", json!({"key": key})),
    )
    .await;
    assert_eq!(outcome(&replay), ClaimOutcome::Replayed);
    assert_eq!(replay.operation.unwrap().result, b"paid");
    assert_invalid_transition(
        admin
            .resolve_operation(resolve(key, resolved_success(b"again")))
            .await,
        OperationStatus::Succeeded,
        false,
    );

    // A DEAD operation is resolved as a failure just as well.
    let mut once = claim_request(NS, "dead", "w", json!({"n": 1}));
    once.retry_policy = Some(policy(1));
    let claimed = claim(&mut client, once).await;
    client
        .complete(complete_request(
            NS,
            "dead",
            token(&claimed),
            retryable(None),
        ))
        .await
        .unwrap();
    let failure = pb::resolve_operation_request::Outcome::Failure(pb::Failure {
        code: "ACCOUNT_CLOSED".into(),
        message: "closed before the payout".into(),
    });
    let resolved = admin
        .resolve_operation(resolve("dead", failure))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        resolved.operation.unwrap().status(),
        OperationStatus::Failed
    );
}

#[tokio::test]
async fn requeue_gives_a_dead_operation_a_fresh_budget_under_its_own_identity() {
    let app = spawn_app().await;
    let (mut client, mut admin) = (app.client.clone(), app.admin.clone());
    let key = "settle:A:W:V";
    let mut once = claim_request(NS, key, "w", json!({"merchant": "A"}));
    once.retry_policy = Some(policy(1));
    let claimed = claim(&mut client, once.clone()).await;
    client
        .complete(complete_request(NS, key, token(&claimed), retryable(None)))
        .await
        .unwrap();
    assert_eq!(
        outcome(&claim(&mut client, once.clone()).await),
        ClaimOutcome::Dead
    );

    let requeued = admin
        .requeue_operation(requeue(key, Some(policy(2))))
        .await
        .unwrap()
        .into_inner();
    let operation = requeued.operation.unwrap();
    assert_eq!(operation.status(), OperationStatus::RetryScheduled);
    assert_eq!(
        operation.parameters_digest,
        claimed.operation.unwrap().parameters_digest
    );
    let entry = requeued.audit.unwrap();
    assert_eq!(entry.revision, "account unblocked");
    assert_eq!(
        (entry.status_before(), entry.status_after()),
        (OperationStatus::Dead, OperationStatus::RetryScheduled)
    );

    // Due now, handed out as a retry; the fresh budget allows two more attempts.
    let handed = claim_due(&mut client, NS, "worker", 10).await;
    assert_eq!(handed.len(), 1);
    let lease = handed[0].lease.clone().unwrap();
    assert_eq!(lease.attempt, 2);
    client
        .complete(complete_request(
            NS,
            key,
            lease.fencing_token,
            retryable(Some(Duration::ZERO)),
        ))
        .await
        .unwrap();
    let second = claim(&mut client, once.clone()).await;
    assert_eq!(outcome(&second), ClaimOutcome::Acquired);
    let after = client
        .complete(complete_request(NS, key, token(&second), retryable(None)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        after.operation.unwrap().status(),
        OperationStatus::Dead,
        "the fresh budget is spent"
    );

    // Changed parameters are a new operation, never an overwrite.
    let changed = client
        .claim(claim_request(NS, key, "w", json!({"merchant": "B"})))
        .await;
    assert_error(changed, Code::AlreadyExists, "PARAMETER_CONFLICT");
    assert_error(
        admin.requeue_operation(requeue("missing-op", None)).await,
        Code::NotFound,
        "OPERATION_NOT_FOUND",
    );
}

#[tokio::test]
async fn refused_actions_change_nothing_and_write_no_audit_row() {
    let app = spawn_app().await;
    let (mut client, mut admin) = (app.client.clone(), app.admin.clone());
    settle(&mut client, NS, "done", success(b"ok")).await;
    settle(
        &mut client,
        NS,
        "retry",
        retryable(Some(Duration::from_secs(60))),
    )
    .await;
    let before = app.row_counts().await;

    assert_invalid_transition(
        admin.hold_operation(hold("done")).await,
        OperationStatus::Succeeded,
        false,
    );
    assert_invalid_transition(
        admin.release_operation(release("retry")).await,
        OperationStatus::RetryScheduled,
        false,
    );
    assert_invalid_transition(
        admin
            .resolve_operation(resolve("retry", resolved_success(b"x")))
            .await,
        OperationStatus::RetryScheduled,
        false,
    );
    assert_invalid_transition(
        admin.requeue_operation(requeue("retry", None)).await,
        OperationStatus::RetryScheduled,
        false,
    );
    assert_error(
        admin.hold_operation(hold("nope")).await,
        Code::NotFound,
        "OPERATION_NOT_FOUND",
    );

    let mut anonymous = hold("retry");
    anonymous.operator.clear();
    anonymous.reason.clear();
    let refused = assert_error(
        admin.hold_operation(anonymous).await,
        Code::InvalidArgument,
        "INVALID_ARGUMENT",
    );
    let fields: Vec<_> = tonic_types::StatusExt::get_details_bad_request(&refused)
        .unwrap()
        .field_violations
        .into_iter()
        .map(|violation| violation.field)
        .collect();
    assert_eq!(fields, ["operator", "reason"]);
    let mut bad_policy = requeue("retry", Some(policy(0)));
    bad_policy.operator = "carol".into();
    assert_error(
        admin.requeue_operation(bad_policy).await,
        Code::InvalidArgument,
        "INVALID_ARGUMENT",
    );

    assert_eq!(app.row_counts().await, before);
    assert_eq!(app.count("SELECT count(*) FROM audit_entries").await, 0);
    let retry = lookup_history(&mut client, NS, "retry")
        .await
        .operation
        .unwrap();
    assert_eq!(retry.status(), OperationStatus::RetryScheduled);
    assert!(!retry.held);
}

#[tokio::test]
async fn lookup_returns_parameters_and_the_audit_trail_on_request() {
    let app = spawn_app().await;
    let (mut client, mut admin) = (app.client.clone(), app.admin.clone());
    let parameters =
        json!({"amount": 100, "account": "A", "tags": ["x", 1.5, null], "nested": {"b": true}});
    claim(&mut client, claim_request(NS, "k", "w", parameters.clone())).await;
    admin.hold_operation(hold("k")).await.unwrap();
    admin.release_operation(release("k")).await.unwrap();

    let plain = client
        .lookup(pb::LookupRequest {
            namespace: NS.into(),
            operation_key: "k".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(plain.operation.unwrap().parameters.is_none() && plain.audit.is_empty());
    let full = client
        .lookup(pb::LookupRequest {
            namespace: NS.into(),
            operation_key: "k".into(),
            include_parameters: true,
            include_audit: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        full.operation.unwrap().parameters,
        Some(opreg_client::parameters(parameters))
    );
    let actions: Vec<_> = full.audit.iter().map(|entry| entry.action()).collect();
    assert_eq!(actions, [AdminAction::Hold, AdminAction::Release]);
    assert!(
        full.audit[0].at.as_ref().unwrap().seconds <= full.audit[1].at.as_ref().unwrap().seconds
    );
}
