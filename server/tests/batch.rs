//! BatchClaim and BatchComplete: each item answered as its unary call would
//! answer it, in request order, an error in its own slot with its ErrorInfo;
//! a batch out of bounds refused whole, before anything is written.

mod common;

use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome};
use prost::Message;
use serde_json::json;

const NAMESPACE: &str = "payments";

/// The ErrorInfo reason in an item's status.
fn reason(status: &tonic_types::pb::Status) -> String {
    let infos: Vec<tonic_types::pb::ErrorInfo> = status
        .details
        .iter()
        .filter(|any| any.type_url == "type.googleapis.com/google.rpc.ErrorInfo")
        .map(|any| tonic_types::pb::ErrorInfo::decode(any.value.as_slice()).unwrap())
        .collect();
    assert_eq!(infos.len(), 1, "exactly one ErrorInfo: {status:?}");
    assert_eq!(infos[0].domain, "opreg");
    infos[0].reason.clone()
}

fn claimed(result: &pb::BatchClaimResult) -> &pb::ClaimResponse {
    match &result.result {
        Some(pb::batch_claim_result::Result::Claim(response)) => response,
        other => panic!("expected a claim response, got {other:?}"),
    }
}

fn claim_error(result: &pb::BatchClaimResult) -> &tonic_types::pb::Status {
    match &result.result {
        Some(pb::batch_claim_result::Result::Error(status)) => status,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_batch_answers_each_claim_as_claim_would_in_request_order() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let done = claim(
        &mut client,
        claim_request(NAMESPACE, "done", "w0", json!({"amount": 1})),
    )
    .await;
    client
        .complete(complete_request(
            NAMESPACE,
            "done",
            token(&done),
            success(b"paid"),
        ))
        .await
        .unwrap();

    let claims = vec![
        claim_request(NAMESPACE, "order-A", "w1", json!({"amount": 100})),
        claim_request(NAMESPACE, "order-B", "w1", json!({"amount": 200})),
        claim_request(NAMESPACE, "order-A", "w2", json!({"amount": 100})),
        claim_request(NAMESPACE, "order-B", "w2", json!({"amount": 999})),
        claim_request(NAMESPACE, "", "w3", json!({"amount": 1})),
        claim_request(NAMESPACE, "done", "w3", json!({"amount": 1})),
    ];
    let results = client
        .batch_claim(pb::BatchClaimRequest { claims })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(results.len(), 6);
    assert_eq!(outcome(claimed(&results[0])), ClaimOutcome::Acquired);
    assert_eq!(outcome(claimed(&results[1])), ClaimOutcome::Acquired);
    assert_eq!(outcome(claimed(&results[2])), ClaimOutcome::InProgress);
    assert_eq!(
        claimed(&results[2])
            .operation
            .as_ref()
            .unwrap()
            .lease
            .as_ref()
            .unwrap()
            .owner,
        "w1"
    );
    let conflict = claim_error(&results[3]);
    assert_eq!(conflict.code, tonic::Code::AlreadyExists as i32);
    assert_eq!(reason(conflict), "PARAMETER_CONFLICT");
    let invalid = claim_error(&results[4]);
    assert_eq!(invalid.code, tonic::Code::InvalidArgument as i32);
    assert_eq!(reason(invalid), "INVALID_ARGUMENT");
    let replayed = claimed(&results[5]);
    assert_eq!(outcome(replayed), ClaimOutcome::Replayed);
    assert_eq!(replayed.operation.as_ref().unwrap().result, b"paid");

    // done, order-A, order-B: the refused claims wrote nothing.
    assert_eq!(app.row_counts().await, (3, 3, 0));
}

#[tokio::test]
async fn a_batch_out_of_bounds_is_refused_whole_and_writes_nothing() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let empty = client
        .batch_claim(pb::BatchClaimRequest { claims: Vec::new() })
        .await;
    assert_error(empty, tonic::Code::InvalidArgument, "INVALID_ARGUMENT");
    let too_many = (0..1001)
        .map(|i| claim_request(NAMESPACE, &format!("k-{i}"), "w", json!({"amount": i})))
        .collect();
    let refused = client
        .batch_claim(pb::BatchClaimRequest { claims: too_many })
        .await;
    assert_error(refused, tonic::Code::InvalidArgument, "INVALID_ARGUMENT");
    let no_completions = client
        .batch_complete(pb::BatchCompleteRequest {
            completions: Vec::new(),
        })
        .await;
    assert_error(
        no_completions,
        tonic::Code::InvalidArgument,
        "INVALID_ARGUMENT",
    );
    assert_eq!(app.row_counts().await, (0, 0, 0));
}

#[tokio::test]
async fn a_thousand_claims_in_one_batch_register_a_thousand_operations() {
    let app = spawn_app().await;
    let claims = (0..1000)
        .map(|i| claim_request(NAMESPACE, &format!("k-{i}"), "w", json!({"amount": i})))
        .collect();
    let results = app
        .client
        .clone()
        .batch_claim(pb::BatchClaimRequest { claims })
        .await
        .unwrap()
        .into_inner()
        .results;
    for (i, result) in results.iter().enumerate() {
        let response = claimed(result);
        assert_eq!(outcome(response), ClaimOutcome::Acquired);
        assert_eq!(
            response.operation.as_ref().unwrap().operation_key,
            format!("k-{i}"),
            "results are in request order"
        );
    }
    assert_eq!(results.len(), 1000);
    assert_eq!(app.row_counts().await, (1000, 1000, 0));
    assert_eq!(
        app.count("SELECT count(DISTINCT fencing_token) FROM operations")
            .await,
        1000
    );
}

#[tokio::test]
async fn a_batch_complete_answers_each_completion_in_request_order() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let first = claim(
        &mut client,
        claim_request(NAMESPACE, "first", "w", json!({"amount": 1})),
    )
    .await;
    let second = claim(
        &mut client,
        claim_request(NAMESPACE, "second", "w", json!({"amount": 2})),
    )
    .await;
    let completions = vec![
        complete_request(NAMESPACE, "first", token(&first), success(b"one")),
        complete_request(NAMESPACE, "second", token(&second) + 100, success(b"two")),
        complete_request(NAMESPACE, "missing", 1, success(b"three")),
        complete_request(NAMESPACE, "second", token(&second), success(b"two")),
    ];
    let results = client
        .batch_complete(pb::BatchCompleteRequest { completions })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(results.len(), 4);
    let completed = |i: usize| match &results[i].result {
        Some(pb::batch_complete_result::Result::Completed(response)) => {
            response.operation.clone().unwrap()
        }
        other => panic!("item {i}: expected a completion, got {other:?}"),
    };
    let failed = |i: usize| match &results[i].result {
        Some(pb::batch_complete_result::Result::Error(status)) => reason(status),
        other => panic!("item {i}: expected an error, got {other:?}"),
    };
    assert_eq!(completed(0).result, b"one");
    assert_eq!(failed(1), "STALE_FENCING_TOKEN");
    assert_eq!(failed(2), "OPERATION_NOT_FOUND");
    assert_eq!(completed(3).result, b"two");
    assert_eq!(
        app.count("SELECT count(*) FROM operations WHERE status = 'succeeded'")
            .await,
        2
    );
}

#[tokio::test]
async fn the_rust_client_returns_each_item_as_its_unary_call_would() {
    let app = spawn_app().await;
    let client = opreg_client::Client::connect_lazy(app.endpoint.clone()).unwrap();
    let answers = client
        .batch_claim(vec![
            claim_request(NAMESPACE, "order-A", "w1", json!({"amount": 100})),
            claim_request(NAMESPACE, "order-A", "w2", json!({"amount": 999})),
        ])
        .await
        .unwrap();
    let acquired = answers[0].as_ref().unwrap();
    assert_eq!(outcome(acquired), ClaimOutcome::Acquired);
    assert!(
        matches!(
            answers[1],
            Err(opreg_client::Error::ParameterConflict { .. })
        ),
        "{:?}",
        answers[1]
    );
    let completed = client
        .batch_complete(vec![
            complete_request(NAMESPACE, "order-A", token(acquired), success(b"ok")),
            complete_request(NAMESPACE, "order-A", token(acquired) + 1, success(b"ok")),
        ])
        .await
        .unwrap();
    assert_eq!(
        completed[0]
            .as_ref()
            .unwrap()
            .operation
            .as_ref()
            .unwrap()
            .result,
        b"ok"
    );
    assert!(completed[1].is_err(), "{:?}", completed[1]);
}
