//! Parameter fingerprints: canonical Struct digests, caller digests, conflicts.

mod common;

use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome};
use serde_json::{Value, json};
use tonic::Code;

const NAMESPACE: &str = "ledger";

#[derive(serde::Deserialize)]
struct Vector {
    name: String,
    input: String,
    canonical: String,
    sha256: String,
}

fn vectors() -> Vec<Vector> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../client/testdata/parameter_digests.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn digest_request(key: &str, owner: &str, digest: Vec<u8>) -> pb::ClaimRequest {
    pb::ClaimRequest {
        fingerprint: Some(pb::claim_request::Fingerprint::ParametersDigest(digest)),
        ..claim_request(NAMESPACE, key, owner, json!({}))
    }
}

#[tokio::test]
async fn the_server_stores_the_shared_vectors_canonical_text_and_digest() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let vectors = vectors();
    assert!(vectors.len() >= 10);
    for (index, vector) in vectors.iter().enumerate() {
        let key = format!("vector-{index}");
        let input: Value = serde_json::from_str(&vector.input).unwrap();
        let response = claim(&mut client, claim_request(NAMESPACE, &key, "w", input)).await;
        assert_eq!(
            outcome(&response),
            ClaimOutcome::Acquired,
            "{}",
            vector.name
        );
        assert_eq!(
            hex::encode(response.operation.unwrap().parameters_digest),
            vector.sha256,
            "{}",
            vector.name
        );
        let stored: String = sqlx::query_scalar(
            "SELECT parameters_canonical FROM operations WHERE namespace = $1 AND operation_key = $2",
        )
        .bind(NAMESPACE)
        .bind(&key)
        .fetch_one(&app.db)
        .await
        .unwrap();
        assert_eq!(stored, vector.canonical, "{}", vector.name);

        // A caller that computed the same digest names the same operation.
        let by_digest = claim(
            &mut client,
            digest_request(&key, "w", hex::decode(&vector.sha256).unwrap()),
        )
        .await;
        assert_eq!(
            outcome(&by_digest),
            ClaimOutcome::Acquired,
            "{}: resumed",
            vector.name
        );
    }
}

async fn assert_same(client: &mut Client, key: &str, first: Value, second: Value) {
    let registered = claim(client, claim_request(NAMESPACE, key, "a", first)).await;
    assert_eq!(outcome(&registered), ClaimOutcome::Acquired);
    let repeated = claim(client, claim_request(NAMESPACE, key, "b", second)).await;
    assert_eq!(outcome(&repeated), ClaimOutcome::InProgress, "{key}");
}

async fn assert_conflict(
    client: &mut Client,
    key: &str,
    first: Value,
    second: Value,
    fields: &str,
) {
    let registered = claim(client, claim_request(NAMESPACE, key, "a", first)).await;
    assert_eq!(outcome(&registered), ClaimOutcome::Acquired);
    let stored = hex::encode(registered.operation.unwrap().parameters_digest);
    let status = assert_error(
        client
            .claim(claim_request(NAMESPACE, key, "b", second))
            .await,
        Code::AlreadyExists,
        "PARAMETER_CONFLICT",
    );
    assert_eq!(metadata(&status, "differingFields"), fields, "{key}");
    assert_eq!(metadata(&status, "storedDigest"), stored);
    assert_ne!(metadata(&status, "requestDigest"), stored);
    assert_eq!(metadata(&status, "requestDigest").len(), 64);
}

#[tokio::test]
async fn equal_parameters_in_any_spelling_name_the_same_operation() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    assert_same(
        &mut client,
        "order",
        json!({"amount": 100, "account": "A"}),
        json!({"account": "A", "amount": 100}),
    )
    .await;
    assert_same(
        &mut client,
        "float",
        json!({"amount": 100}),
        json!({"amount": 100.0}),
    )
    .await;
    assert_same(
        &mut client,
        "nulls",
        json!({"amount": 1, "memo": null}),
        json!({"amount": 1}),
    )
    .await;
    assert_same(
        &mut client,
        "nested",
        json!({"target": {"b": 2, "a": {"y": null, "x": 1}}}),
        json!({"target": {"a": {"x": 1}, "b": 2.0}}),
    )
    .await;
}

#[tokio::test]
async fn different_parameters_conflict_and_name_the_top_level_fields() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    assert_conflict(
        &mut client,
        "amount",
        json!({"amount": 100}),
        json!({"amount": 101}),
        "amount",
    )
    .await;
    assert_conflict(
        &mut client,
        "nested",
        json!({"target": {"a": 1}, "currency": "EUR", "amount": 5}),
        json!({"target": {"a": 2}, "currency": "USD", "amount": 5}),
        "currency,target",
    )
    .await;
    assert_conflict(
        &mut client,
        "added",
        json!({"amount": 1}),
        json!({"amount": 1, "memo": "x"}),
        "memo",
    )
    .await;
    assert_conflict(
        &mut client,
        "array-null",
        json!({"list": [1, null]}),
        json!({"list": [1]}),
        "list",
    )
    .await;
}

#[tokio::test]
async fn caller_digests_match_only_the_canonical_digest_and_name_no_fields() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let registered = claim(&mut client, digest_request("by-digest", "a", vec![7; 32])).await;
    assert_eq!(outcome(&registered), ClaimOutcome::Acquired);
    let status = assert_error(
        client
            .claim(digest_request("by-digest", "b", vec![8; 32]))
            .await,
        Code::AlreadyExists,
        "PARAMETER_CONFLICT",
    );
    assert_eq!(metadata(&status, "differingFields"), "");
    let status = assert_error(
        client
            .claim(claim_request(
                NAMESPACE,
                "by-digest",
                "b",
                json!({"amount": 1}),
            ))
            .await,
        Code::AlreadyExists,
        "PARAMETER_CONFLICT",
    );
    assert_eq!(metadata(&status, "storedDigest"), hex::encode([7; 32]));
    assert_eq!(metadata(&status, "differingFields"), "");
}

#[tokio::test]
async fn the_same_key_compensating_something_else_conflicts() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    claim(
        &mut client,
        claim_request(NAMESPACE, "plain", "a", json!({"n": 1})),
    )
    .await;
    let request = pb::ClaimRequest {
        compensates: "other".into(),
        ..claim_request(NAMESPACE, "plain", "a", json!({"n": 1}))
    };
    let status = assert_error(
        client.claim(request).await,
        Code::AlreadyExists,
        "PARAMETER_CONFLICT",
    );
    assert_eq!(metadata(&status, "conflictingField"), "compensates");
}
