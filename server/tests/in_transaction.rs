//! The transactional door (`opreg_server::in_transaction`): a Claim, the
//! caller's business write and the Complete commit together or not at all,
//! and the gRPC door reads the same records, waits on the same uncommitted
//! rows and refuses the same tokens. Every check reads the database (or the
//! server) after the transaction ended.

mod common;

use std::time::Duration;

use common::accounts::*;
use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome};
use opreg_server::config::Config;
use opreg_server::domain::error::RegistryError;
use opreg_server::in_transaction::InTransaction;
use serde_json::json;
use sqlx::PgConnection;

const NS: &str = "transactional";

fn door() -> InTransaction {
    InTransaction::new(Config::defaults().request_limits().unwrap())
}

fn debit_claim(key: &str, owner: &str, amount: i64) -> pb::ClaimRequest {
    claim_request(NS, key, owner, json!({"account": "A", "amount": amount}))
}

fn claimed_token(response: &pb::ClaimResponse) -> u64 {
    assert_eq!(response.outcome(), ClaimOutcome::Acquired, "{response:?}");
    token(response)
}

/// Claims `key` in the transaction, which must acquire it; its token.
async fn acquire(door: &InTransaction, tx: &mut PgConnection, key: &str, owner: &str) -> u64 {
    claimed_token(&door.claim(tx, debit_claim(key, owner, 30)).await.unwrap())
}

/// Records the debit's success under `token` in the transaction.
async fn record_debited(door: &InTransaction, tx: &mut PgConnection, key: &str, token: u64) {
    door.complete(tx, complete_request(NS, key, token, success(b"debited")))
        .await
        .unwrap();
}

/// Claim, debit and Complete in one transaction; `commit` decides its end.
async fn debit_once(app: &TestApp, key: &str, amount: i64, commit: bool) {
    let door = door();
    let mut tx = app.db.begin().await.unwrap();
    let token = claimed_token(
        &door
            .claim(&mut tx, debit_claim(key, "lab", amount))
            .await
            .unwrap(),
    );
    debit(&mut tx, amount).await.unwrap();
    record_debited(&door, &mut tx, key, token).await;
    if commit {
        tx.commit().await.unwrap();
    } else {
        tx.rollback().await.unwrap();
    }
}

#[tokio::test]
async fn claim_debit_and_complete_commit_together_and_the_grpc_door_replays_them() {
    let mut app = spawn_app().await;
    open_account(&app.db).await;
    debit_once(&app, "debit-1", 30, true).await;

    assert_eq!(balance(&app.db).await, OPENING_BALANCE - 30);
    let replayed = claim(&mut app.client, debit_claim("debit-1", "grpc", 30)).await;
    assert_eq!(replayed.outcome(), ClaimOutcome::Replayed);
    let operation = replayed.operation.unwrap();
    assert_eq!(operation.status(), pb::OperationStatus::Succeeded);
    assert_eq!(operation.result, b"debited");
    assert_eq!(
        balance(&app.db).await,
        OPENING_BALANCE - 30,
        "a replay debits nothing"
    );
}

#[tokio::test]
async fn a_rollback_leaves_no_operation_and_no_debit() {
    let mut app = spawn_app().await;
    open_account(&app.db).await;
    debit_once(&app, "debit-2", 30, false).await;

    assert_eq!(operation_rows(&app.db, NS, "debit-2").await, 0);
    assert_eq!(balance(&app.db).await, OPENING_BALANCE);
    let found = app
        .client
        .lookup(pb::LookupRequest {
            namespace: NS.into(),
            operation_key: "debit-2".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(found.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn a_business_error_rolls_the_claim_back_with_it() {
    let app = spawn_app().await;
    open_account(&app.db).await;
    let door = door();
    let mut tx = app.db.begin().await.unwrap();
    door.claim(&mut tx, debit_claim("debit-3", "lab", 500))
        .await
        .unwrap();
    let refused = debit(&mut tx, 500).await.unwrap_err();
    assert_eq!(
        refused
            .as_database_error()
            .and_then(|e| e.code())
            .as_deref(),
        Some("23514"),
        "the balance check refuses the debit"
    );
    tx.rollback().await.unwrap();

    assert_eq!(operation_rows(&app.db, NS, "debit-3").await, 0);
    assert_eq!(balance(&app.db).await, OPENING_BALANCE);
}

/// A gRPC Claim of `key`, sent while a transaction holds its uncommitted
/// registration: it must still be waiting after a while.
async fn racing_grpc_claim(app: &TestApp, key: &str) -> tokio::task::JoinHandle<pb::ClaimResponse> {
    let mut client = app.client.clone();
    let request = debit_claim(key, "grpc", 30);
    let racing = tokio::spawn(async move { claim(&mut client, request).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !racing.is_finished(),
        "the gRPC Claim answered before the registering transaction ended"
    );
    racing
}

#[tokio::test]
async fn a_grpc_claim_waits_on_the_uncommitted_registration_then_replays_what_committed() {
    let app = spawn_app().await;
    open_account(&app.db).await;
    let door = door();
    let mut tx = app.db.begin().await.unwrap();
    let token = acquire(&door, &mut tx, "debit-4", "lab").await;
    let racing = racing_grpc_claim(&app, "debit-4").await;
    debit(&mut tx, 30).await.unwrap();
    record_debited(&door, &mut tx, "debit-4", token).await;
    tx.commit().await.unwrap();

    let answer = racing.await.unwrap();
    assert_eq!(answer.outcome(), ClaimOutcome::Replayed);
    assert_eq!(answer.operation.unwrap().result, b"debited");
    assert_eq!(operation_rows(&app.db, NS, "debit-4").await, 1);
    assert_eq!(balance(&app.db).await, OPENING_BALANCE - 30);
}

#[tokio::test]
async fn a_grpc_claim_waits_on_the_uncommitted_registration_then_registers_after_a_rollback() {
    let app = spawn_app().await;
    open_account(&app.db).await;
    let door = door();
    let mut tx = app.db.begin().await.unwrap();
    door.claim(&mut tx, debit_claim("debit-5", "lab", 30))
        .await
        .unwrap();
    let racing = racing_grpc_claim(&app, "debit-5").await;
    tx.rollback().await.unwrap();

    let answer = racing.await.unwrap();
    assert_eq!(answer.outcome(), ClaimOutcome::Acquired);
    assert_eq!(answer.lease.unwrap().owner, "grpc");
    assert_eq!(operation_rows(&app.db, NS, "debit-5").await, 1);
}

#[tokio::test]
async fn each_door_refuses_a_complete_without_the_current_token_of_the_other() {
    let mut app = spawn_app().await;
    let door = door();

    // A token issued to another operation.
    let foreign = claimed_token(&claim(&mut app.client, debit_claim("another", "grpc", 30)).await);
    // Leased over gRPC: the transactional door cannot complete it with another token.
    let held =
        claimed_token(&claim(&mut app.client, debit_claim("held-by-grpc", "grpc", 30)).await);
    let mut tx = app.db.begin().await.unwrap();
    let in_progress = door
        .claim(&mut tx, debit_claim("held-by-grpc", "lab", 30))
        .await
        .unwrap();
    assert_eq!(in_progress.outcome(), ClaimOutcome::InProgress);
    let refused = door
        .complete(
            &mut tx,
            complete_request(NS, "held-by-grpc", foreign, success(b"x")),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, RegistryError::StaleFencingToken { presented, current } if presented == foreign && current == held),
        "{refused:?}"
    );
    tx.commit().await.unwrap();

    // Leased in a committed transaction: gRPC cannot complete it with another token.
    let mut tx = app.db.begin().await.unwrap();
    let leased = acquire(&door, &mut tx, "held-in-sql", "lab").await;
    tx.commit().await.unwrap();
    let refused = app
        .client
        .complete(complete_request(NS, "held-in-sql", foreign, success(b"x")))
        .await;
    assert_error(refused, tonic::Code::Aborted, "STALE_FENCING_TOKEN");

    // And each one's status is untouched.
    for key in ["held-by-grpc", "held-in-sql"] {
        let status: String = sqlx::query_scalar(
            "SELECT status::text FROM operations WHERE namespace = $1 AND operation_key = $2",
        )
        .bind(NS)
        .bind(key)
        .fetch_one(&app.db)
        .await
        .unwrap();
        assert_eq!(status, "in_progress", "{key}");
    }
    assert!(leased > held);
}

#[tokio::test]
async fn bad_input_is_refused_with_the_contracts_error_and_writes_nothing() {
    let app = spawn_app().await;
    let door = door();
    let mut tx = app.db.begin().await.unwrap();
    let mut request = debit_claim("bad-input", "lab", 30);
    request.namespace = String::new();
    let refused = door.claim(&mut tx, request).await.unwrap_err();
    assert!(
        matches!(refused, RegistryError::InvalidArgument(_)),
        "{refused:?}"
    );
    let refused = door
        .complete(&mut tx, complete_request(NS, "bad-input", 0, success(b"x")))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, RegistryError::InvalidArgument(_)),
        "{refused:?}"
    );
    // A wait would hold the caller's locks: refused, not ignored.
    let waiting = pb::ClaimRequest {
        wait: Some(prost_types::Duration {
            seconds: 5,
            nanos: 0,
        }),
        ..debit_claim("bad-input", "lab", 30)
    };
    let refused = door.claim(&mut tx, waiting).await.unwrap_err();
    assert!(
        matches!(&refused, RegistryError::InvalidArgument(fields) if fields[0].field == "wait"),
        "{refused:?}"
    );
    let waiting = pb::LookupRequest {
        namespace: NS.into(),
        operation_key: "bad-input".into(),
        wait: Some(prost_types::Duration {
            seconds: 5,
            nanos: 0,
        }),
        ..Default::default()
    };
    let refused = door.lookup(&mut tx, waiting).await.unwrap_err();
    assert!(
        matches!(&refused, RegistryError::InvalidArgument(fields) if fields[0].field == "wait"),
        "{refused:?}"
    );
    // The transaction is still usable: nothing was sent for the refusals.
    tx.commit().await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM operations")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn a_second_transaction_waits_on_the_first_ones_registration_then_replays_it() {
    let app = spawn_app().await;
    open_account(&app.db).await;
    let door = door();
    let mut first = app.db.begin().await.unwrap();
    let token = acquire(&door, &mut first, "debit-6", "first").await;
    let second = {
        let (db, door) = (app.db.clone(), door.clone());
        tokio::spawn(async move {
            let mut tx = db.begin().await.unwrap();
            let answer = door
                .claim(&mut tx, debit_claim("debit-6", "second", 30))
                .await;
            tx.commit().await.unwrap();
            answer
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "the second Claim did not wait");
    debit(&mut first, 30).await.unwrap();
    record_debited(&door, &mut first, "debit-6", token).await;
    first.commit().await.unwrap();

    let answer = second.await.unwrap().unwrap();
    assert_eq!(answer.outcome(), ClaimOutcome::Replayed);
    assert_eq!(answer.operation.unwrap().result, b"debited");
    assert_eq!(balance(&app.db).await, OPENING_BALANCE - 30);
}

#[tokio::test]
async fn a_retry_recorded_in_a_transaction_is_queued_and_handed_out_over_grpc() {
    let mut app = spawn_app().await;
    let door = door();
    let mut tx = app.db.begin().await.unwrap();
    let token = acquire(&door, &mut tx, "debit-7", "lab").await;
    door.complete(
        &mut tx,
        complete_request(NS, "debit-7", token, retryable(Some(Duration::ZERO))),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    // The operator queue lists it,
    let listed = admin_list(&mut app, pb::OperationStatus::RetryScheduled).await;
    assert_eq!(listed, ["debit-7"]);
    // and a worker is handed it under a new token.
    let handed = claim_due(&mut app.client, NS, "worker", 10).await;
    assert_eq!(handed.len(), 1);
    assert_eq!(
        handed[0].operation.as_ref().unwrap().operation_key,
        "debit-7"
    );
    assert!(handed[0].lease.as_ref().unwrap().fencing_token > token);
}

/// The keys the operator queue lists in `status`.
async fn admin_list(app: &mut TestApp, status: pb::OperationStatus) -> Vec<String> {
    app.admin
        .list_operations(pb::ListOperationsRequest {
            namespace: NS.into(),
            statuses: vec![status.into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operations
        .into_iter()
        .map(|operation| operation.operation_key)
        .collect()
}

#[tokio::test]
async fn a_fenced_write_in_the_transaction_lands_with_it_and_a_stale_one_changes_nothing() {
    let mut app = spawn_app().await;
    let door = door();
    let stale = claimed_token(&claim(&mut app.client, debit_claim("other", "grpc", 1)).await);
    let mut tx = app.db.begin().await.unwrap();
    let token = acquire(&door, &mut tx, "debit-8", "lab").await;
    let refused = door
        .fenced_write(&mut tx, write_request(NS, "debit-8", stale, b"stale"))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, RegistryError::StaleFencingToken { presented, current } if presented == stale && current == token),
        "{refused:?}"
    );
    // The refusal wrote nothing and left the transaction usable.
    let written = door
        .fenced_write(&mut tx, write_request(NS, "debit-8", token, b"debited"))
        .await
        .unwrap();
    assert_eq!((written.fence, written.version), (token, 1));
    record_debited(&door, &mut tx, "debit-8", token).await;
    tx.commit().await.unwrap();

    let resource = app
        .client
        .get_resource(pb::GetResourceRequest {
            namespace: NS.into(),
            resource: "account:1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (resource.value.as_slice(), resource.fence),
        (&b"debited"[..], token)
    );
}
