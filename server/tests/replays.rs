//! Replays of terminal results answered from the server's memory: only
//! SUCCEEDED and FAILED are kept, only for their lifetime, never when
//! retention could delete the row meanwhile, and a compensation registered
//! here is seen at once. One test function, so that this binary's statement
//! counts are its own.

mod common;

use std::time::Duration;

use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome};
use opreg_server::config::Retention;
use serde_json::json;

const KEPT: &str = "payments";
const SHORT_LIVED: &str = "callbacks";
const LIFETIME: Duration = Duration::from_millis(400);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn terminal_results_replay_from_memory_within_their_bounds() {
    let app = spawn_app_with(|config| {
        config.replay_cache_ttl = LIFETIME;
        config
            .namespace_retention
            .0
            .push((SHORT_LIVED.into(), Retention(Some(Duration::from_secs(1)))));
    })
    .await;
    let mut client = app.client.clone();

    // A finished key is read once, then replayed with no statement.
    let done = finish(&mut client, KEPT, "order-1").await;
    let statements = registrations(&app).await;
    for _ in 0..5 {
        let replay = claim(
            &mut client,
            claim_request(KEPT, "order-1", "other", json!({"n": 1})),
        )
        .await;
        assert_eq!(outcome(&replay), ClaimOutcome::Replayed);
        assert_eq!(replay.operation.unwrap().result, done.result);
    }
    assert_eq!(
        registrations(&app).await,
        statements + 1.0,
        "only the first replay reads"
    );
    assert_eq!(hits(&app, KEPT).await, 4.0);

    // A conflict is judged against the kept record as against the row.
    assert_error(
        client
            .claim(claim_request(KEPT, "order-1", "other", json!({"n": 2})))
            .await,
        tonic::Code::AlreadyExists,
        "PARAMETER_CONFLICT",
    );

    // The kept answer outlives the row only by its lifetime: deleted behind
    // the server's back, the key still replays, and then registers anew.
    sqlx::query("DELETE FROM operations WHERE namespace = $1 AND operation_key = 'order-1'")
        .bind(KEPT)
        .execute(&app.db)
        .await
        .unwrap();
    let remembered = claim(
        &mut client,
        claim_request(KEPT, "order-1", "w", json!({"n": 1})),
    )
    .await;
    assert_eq!(outcome(&remembered), ClaimOutcome::Replayed);
    tokio::time::sleep(LIFETIME).await;
    let fresh = claim(
        &mut client,
        claim_request(KEPT, "order-1", "w", json!({"n": 1})),
    )
    .await;
    assert_eq!(
        outcome(&fresh),
        ClaimOutcome::Acquired,
        "an expired entry answered"
    );

    // Unfinished operations are never answered from memory.
    let held = claim(&mut client, claim_request(KEPT, "open", "w", json!({}))).await;
    let hits_before = hits(&app, KEPT).await;
    for _ in 0..3 {
        let waiting = claim(&mut client, claim_request(KEPT, "open", "other", json!({}))).await;
        assert_eq!(outcome(&waiting), ClaimOutcome::InProgress);
    }
    assert_eq!(hits(&app, KEPT).await, hits_before);
    client
        .complete(complete_request(
            KEPT,
            "open",
            token(&held),
            success(b"late"),
        ))
        .await
        .unwrap();
    let after = claim(&mut client, claim_request(KEPT, "open", "other", json!({}))).await;
    assert_eq!(outcome(&after), ClaimOutcome::Replayed);

    // Retention of one second could delete the row while an entry lives.
    finish(&mut client, SHORT_LIVED, "cb-1").await;
    for _ in 0..3 {
        claim(
            &mut client,
            claim_request(SHORT_LIVED, "cb-1", "other", json!({"n": 1})),
        )
        .await;
    }
    assert_eq!(hits(&app, SHORT_LIVED).await, 0.0);

    // A compensation registered here shows on the original's next replay.
    finish(&mut client, KEPT, "order-2").await;
    claim(
        &mut client,
        claim_request(KEPT, "order-2", "other", json!({"n": 1})),
    )
    .await;
    let refund = pb::ClaimRequest {
        compensates: "order-2".into(),
        ..claim_request(KEPT, "refund:order-2", "w", json!({"refund": 1}))
    };
    assert_eq!(
        outcome(&claim(&mut client, refund).await),
        ClaimOutcome::Acquired
    );
    let original = claim(
        &mut client,
        claim_request(KEPT, "order-2", "other", json!({"n": 1})),
    )
    .await;
    assert_eq!(original.operation.unwrap().compensated_by, "refund:order-2");
}

async fn finish(client: &mut Client, namespace: &str, key: &str) -> pb::Operation {
    let claimed = claim(client, claim_request(namespace, key, "w", json!({"n": 1}))).await;
    assert_eq!(outcome(&claimed), ClaimOutcome::Acquired);
    client
        .complete(complete_request(
            namespace,
            key,
            token(&claimed),
            success(b"paid"),
        ))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap()
}

/// Registration statements this process has run.
async fn registrations(app: &TestApp) -> f64 {
    scrape(app.metrics_addr).await.value(
        "opreg_db_query_duration_seconds_count",
        &[("query", "operations_register")],
    )
}

async fn hits(app: &TestApp, namespace: &str) -> f64 {
    scrape(app.metrics_addr)
        .await
        .value("opreg_replay_cache_hits_total", &[("namespace", namespace)])
}
