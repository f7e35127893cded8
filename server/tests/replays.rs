//! Replays of terminal results answered from the server's memory: only
//! SUCCEEDED and FAILED are kept, never when retention could delete the row
//! meanwhile; a compensation registered here is seen at once, and a change
//! made anywhere else (another replica, a hand edit) as soon as its notice
//! arrives, long before an entry's lifetime; a lost listening session forgets
//! everything. One test function, so that this binary's statement counts are
//! its own.

mod common;

use std::time::Duration;

use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome};
use opreg_server::config::Retention;
use serde_json::json;

const KEPT: &str = "payments";
const SHORT_LIVED: &str = "callbacks";
/// Long enough that only a notice can explain an entry gone within a test.
const LIFETIME: Duration = Duration::from_secs(120);

/// Longest a notice may take to arrive here, on a loaded machine.
const NOTICE_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn terminal_results_replay_from_memory_within_their_bounds() {
    let app = spawn_app_with(|config| {
        config.database.replay_cache_ttl = LIFETIME;
        config
            .lifecycle
            .namespace_retention
            .0
            .push((SHORT_LIVED.into(), Retention(Some(Duration::from_secs(1)))));
    })
    .await;
    let mut client = app.client.clone();
    wait_until_following(&app).await;

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

    // Deleted behind the server's back, the key registers anew once the
    // deletion's notice arrives, not after the entry's lifetime.
    sqlx::query("DELETE FROM operations WHERE namespace = $1 AND operation_key = 'order-1'")
        .bind(KEPT)
        .execute(&app.db)
        .await
        .unwrap();
    soon("a deleted record still replays", async || {
        let again = claim(
            &mut client.clone(),
            claim_request(KEPT, "order-1", "w", json!({"n": 1})),
        )
        .await;
        outcome(&again) == ClaimOutcome::Acquired
    })
    .await;

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

    // A compensation registered on another replica shows on this one's
    // replays once its notice arrives.
    let other = replica_of(&app, |config| config.database.replay_cache_ttl = LIFETIME).await;
    finish(&mut client, KEPT, "order-3").await;
    let hits_before = hits(&app, KEPT).await;
    claim(
        &mut client,
        claim_request(KEPT, "order-3", "other", json!({"n": 1})),
    )
    .await;
    claim(
        &mut client,
        claim_request(KEPT, "order-3", "other", json!({"n": 1})),
    )
    .await;
    assert_eq!(
        hits(&app, KEPT).await,
        hits_before + 1.0,
        "order-3 was not kept"
    );
    let refund = pb::ClaimRequest {
        compensates: "order-3".into(),
        ..claim_request(KEPT, "refund:order-3", "w", json!({"refund": 1}))
    };
    assert_eq!(
        outcome(&claim(&mut other.client.clone(), refund).await),
        ClaimOutcome::Acquired
    );
    soon("another replica's compensation never showed", async || {
        let original = claim(
            &mut client.clone(),
            claim_request(KEPT, "order-3", "other", json!({"n": 1})),
        )
        .await;
        original.operation.unwrap().compensated_by == "refund:order-3"
    })
    .await;

    // A lost listening session may have missed notices: what was kept goes,
    // and the next replay reads the database.
    finish(&mut client, KEPT, "order-4").await;
    for _ in 0..2 {
        claim(
            &mut client,
            claim_request(KEPT, "order-4", "other", json!({"n": 1})),
        )
        .await;
    }
    let killed = terminate_listeners(&app).await;
    assert_eq!(killed.len(), 2, "one listening session per replica");
    wait_for_new_listeners(&app, &killed).await;
    // Following again once a key finished now is answered from memory.
    finish(&mut client, KEPT, "order-5").await;
    let hits_before = hits(&app, KEPT).await;
    soon("the cache never followed again", async || {
        claim(
            &mut client.clone(),
            claim_request(KEPT, "order-5", "other", json!({"n": 1})),
        )
        .await;
        hits(&app, KEPT).await > hits_before
    })
    .await;
    let statements = registrations(&app).await;
    claim(
        &mut client,
        claim_request(KEPT, "order-4", "other", json!({"n": 1})),
    )
    .await;
    assert_eq!(
        registrations(&app).await,
        statements + 1.0,
        "an entry outlived its listening session"
    );
}

/// Waits until a replica hears its own heartbeats, so replays may be
/// answered from memory.
async fn wait_until_following(app: &TestApp) {
    soon("the cache never followed", async || {
        scrape(app.metrics_addr)
            .await
            .value("opreg_replay_cache_following", &[])
            == 1.0
    })
    .await;
}

/// Waits until `done` holds, for at most [`NOTICE_WITHIN`].
async fn soon(failure: &str, mut done: impl AsyncFnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done().await {
        assert!(started.elapsed() < NOTICE_WITHIN, "{failure}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ends the replicas' listening sessions on this test's database; their pids.
async fn terminate_listeners(app: &TestApp) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity, pg_terminate_backend(pid)
         WHERE datname = current_database() AND application_name = 'opreg-replays'",
    )
    .fetch_all(&app.db)
    .await
    .unwrap()
}

async fn wait_for_new_listeners(app: &TestApp, killed: &[i32]) {
    soon("no listener came back", async || {
        let listening: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = 'opreg-replays'",
        )
        .fetch_all(&app.db)
        .await
        .unwrap();
        listening.len() == killed.len() && listening.iter().all(|pid| !killed.contains(pid))
    })
    .await;
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
