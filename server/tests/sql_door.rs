//! The SQL door (schema `opreg_sql`, `migrations/20261204*`). Its parameter
//! fingerprint (`opreg_sql.parameters_digest`) is the server's: it passes every
//! shared vector, agrees with `opreg_proto::parameters` on random documents,
//! and is what a gRPC Claim of the same parameters stores. Its Lookup
//! (`opreg_sql.lookup`) answers what the gRPC door recorded. Refusals carry the
//! contract's reason as the message detail.

mod common;

use common::*;
use opreg_proto::parameters::Fingerprint;
use rand::Rng;
use serde_json::{Map, Value, json};

const VECTORS: &str = include_str!("../../client/testdata/parameter_digests.json");
/// Random documents compared with the server's canonical form.
const RANDOM_DOCUMENTS: usize = 2000;

/// `opreg_sql.canonical_json` and `opreg_sql.parameters_digest` of a JSON text.
async fn sql_fingerprint(app: &TestApp, json: &str) -> Result<(String, Vec<u8>), sqlx::Error> {
    sqlx::query_as(
        "SELECT opreg_sql.canonical_json($1::jsonb), opreg_sql.parameters_digest($1::jsonb)",
    )
    .bind(json)
    .fetch_one(&app.db)
    .await
}

fn vectors() -> Vec<Value> {
    let vectors: Vec<Value> = serde_json::from_str(VECTORS).unwrap();
    assert!(vectors.len() >= 16, "the vector file lost vectors");
    vectors
}

#[tokio::test]
async fn the_sql_digest_passes_every_shared_vector() {
    let app = spawn_app().await;
    for vector in vectors() {
        let name = vector["name"].as_str().unwrap();
        let (canonical, digest) = sql_fingerprint(&app, vector["input"].as_str().unwrap())
            .await
            .unwrap();
        assert_eq!(canonical, vector["canonical"].as_str().unwrap(), "{name}");
        assert_eq!(
            hex::encode(digest),
            vector["sha256"].as_str().unwrap(),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_grpc_claim_stores_the_digest_the_sql_door_computes() {
    let mut app = spawn_app().await;
    for (index, vector) in vectors().into_iter().enumerate() {
        let input = vector["input"].as_str().unwrap();
        let key = format!("digest-{index}");
        let parameters: Value = serde_json::from_str(input).unwrap();
        claim(
            &mut app.client,
            claim_request("sql-door", &key, "grpc", parameters),
        )
        .await;
        let (stored, computed): (Vec<u8>, Vec<u8>) = sqlx::query_as(
            "SELECT parameters_digest, opreg_sql.parameters_digest($3::jsonb)
             FROM operations WHERE namespace = $1 AND operation_key = $2",
        )
        .bind("sql-door")
        .bind(&key)
        .bind(input)
        .fetch_one(&app.db)
        .await
        .unwrap();
        assert_eq!(stored, computed, "{}", vector["name"]);
    }
}

#[tokio::test]
async fn the_sql_digest_agrees_with_the_server_on_random_documents() {
    let app = spawn_app().await;
    let mut rng = rand::rng();
    for _ in 0..RANDOM_DOCUMENTS {
        let document = Value::Object(random_object(&mut rng, 0));
        let text = serde_json::to_string(&document).unwrap();
        let server = Fingerprint::from_json(&document).unwrap();
        let (canonical, digest) = sql_fingerprint(&app, &text).await.unwrap();
        assert_eq!(Some(canonical), server.canonical, "{text}");
        assert_eq!(digest, server.digest, "{text}");
    }
}

#[tokio::test]
async fn parameters_that_are_no_object_or_no_double_are_refused_with_the_contracts_reason() {
    let app = spawn_app().await;
    for refused in ["[1, 2]", "\"text\"", "{\"amount\": 1e400}"] {
        let error = sql_fingerprint(&app, refused).await.unwrap_err();
        assert_eq!(
            refusal(&error),
            ("22023".into(), "INVALID_ARGUMENT".into()),
            "{refused}"
        );
    }
}

/// A refusal's SQLSTATE and detail (the contract's reason).
fn refusal(error: &sqlx::Error) -> (String, String) {
    let database = error
        .as_database_error()
        .and_then(|error| error.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
        .unwrap_or_else(|| panic!("a database error, not {error:?}"));
    (
        database.code().to_owned(),
        database.detail().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn the_sql_lookup_answers_what_the_grpc_door_recorded() {
    let mut app = spawn_app().await;
    let claimed = claim(
        &mut app.client,
        claim_request("sql-door", "looked-up", "grpc", json!({"amount": 1})),
    )
    .await;
    let lookup = |key: &'static str| {
        sqlx::query_as::<_, (String, i64, Option<Vec<u8>>, Option<String>)>(
            "SELECT status, fencing_token, result, lease_owner FROM opreg_sql.lookup('sql-door', $1)",
        )
        .bind(key)
        .fetch_one(&app.db)
    };
    let token = i64::try_from(token(&claimed)).unwrap();
    assert_eq!(
        lookup("looked-up").await.unwrap(),
        ("IN_PROGRESS".into(), token, None, Some("grpc".into()))
    );
    app.client
        .complete(complete_request(
            "sql-door",
            "looked-up",
            token.try_into().unwrap(),
            success(b"paid"),
        ))
        .await
        .unwrap();
    assert_eq!(
        lookup("looked-up").await.unwrap(),
        ("SUCCEEDED".into(), token, Some(b"paid".to_vec()), None)
    );
    assert_eq!(
        refusal(&lookup("missing").await.unwrap_err()),
        ("P0002".into(), "OPERATION_NOT_FOUND".into())
    );
    assert_eq!(
        refusal(&lookup("").await.unwrap_err()),
        ("22023".into(), "INVALID_ARGUMENT".into())
    );
}

/// Characters where canonical forms differ: escapes, controls, DEL, line
/// separators, and names that sort differently by UTF-16 than by code point.
const TRICKY: &[char] = &[
    'a',
    'Z',
    '0',
    ' ',
    '"',
    '\\',
    '/',
    '\u{1}',
    '\u{8}',
    '\u{c}',
    '\n',
    '\r',
    '\t',
    '\u{1f}',
    '\u{7f}',
    'é',
    '東',
    '\u{2028}',
    '\u{e000}',
    '\u{fb33}',
    '\u{ffff}',
    '\u{1f600}',
    '\u{10ffff}',
];

fn random_text(rng: &mut impl Rng, longest: usize) -> String {
    let length = rng.random_range(0..=longest);
    (0..length)
        .map(|_| {
            if rng.random_bool(0.7) {
                TRICKY[rng.random_range(0..TRICKY.len())]
            } else {
                // Any scalar value but U+0000, which PostgreSQL's text cannot hold.
                loop {
                    if let Some(c) = char::from_u32(rng.random_range(1..=0x10_ffff)) {
                        break c;
                    }
                }
            }
        })
        .collect()
}

fn random_number(rng: &mut impl Rng) -> Value {
    match rng.random_range(0..4) {
        0 => json!(rng.random_range(-1_000_i64..1_000)),
        1 => json!(rng.random::<i64>()),
        2 => json!(rng.random::<f64>() * 10f64.powi(rng.random_range(-12..30))),
        _ => loop {
            // Any finite double, subnormals and the extremes included.
            let n = f64::from_bits(rng.random());
            if n.is_finite() {
                break json!(n);
            }
        },
    }
}

fn random_value(rng: &mut impl Rng, depth: usize) -> Value {
    let nested = depth < 3;
    match rng.random_range(0..if nested { 7 } else { 5 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.random()),
        2 => random_number(rng),
        3 | 4 => Value::String(random_text(rng, 12)),
        5 => Value::Array(
            (0..rng.random_range(0..4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => Value::Object(random_object(rng, depth + 1)),
    }
}

fn random_object(rng: &mut impl Rng, depth: usize) -> Map<String, Value> {
    (0..rng.random_range(0..6))
        .map(|_| (random_text(rng, 4), random_value(rng, depth)))
        .collect()
}
