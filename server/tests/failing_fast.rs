//! Failing fast: a stopped PostgreSQL is answered UNAVAILABLE with RetryInfo
//! within seconds and health follows it; a locked row is answered
//! OPERATION_BUSY without holding up other keys; a deadline that passes inside
//! the server is DEADLINE_EXCEEDED and stops the work.

mod common;

use std::time::{Duration, Instant};

use common::*;
use opreg_embedded::{EmbeddedOptions, EmbeddedPostgres};
use opreg_server::config::Config;
use opreg_server::store;
use serde_json::json;
use sqlx::Connection;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_types::StatusExt;

/// A PostgreSQL of this test's own, so stopping it disturbs no other test.
fn own_cluster(name: &str) -> EmbeddedOptions {
    let root = std::env::temp_dir().join(format!("opreg-outage-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    EmbeddedOptions {
        root,
        bin_dir: None,
        ephemeral: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_database_is_unavailable_within_seconds_and_recovers() {
    let options = own_cluster("stop");
    let cluster = tokio::task::block_in_place(|| EmbeddedPostgres::start(&options)).unwrap();
    cluster.ensure_database("opreg").await.unwrap();
    let db_options = cluster.connect_options("opreg");
    let mut config = Config::defaults();
    config.listeners.listen_addr = "127.0.0.1:0".parse().unwrap();
    config.listeners.metrics_addr = "127.0.0.1:0".parse().unwrap();
    config.database.health_probe_interval = Duration::from_millis(500);
    let pool = store::connect(db_options.clone(), &config.database.pool_settings())
        .await
        .unwrap();
    store::MIGRATOR.run(&pool).await.unwrap();
    let app = serve(&config, pool, db_options).await;
    let mut client = app.client.clone();
    claim(&mut client, claim_request("ns", "k", "w", json!({}))).await;
    app.until_health(ServingStatus::Serving, Duration::from_secs(5))
        .await;

    tokio::task::block_in_place(|| drop(cluster));
    for attempt in 0..3 {
        let mut request = tonic::Request::new(lookup_request("ns", "k"));
        request.set_timeout(Duration::from_secs(60));
        let started = Instant::now();
        let refused = client.lookup(request).await.unwrap_err();
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "attempt {attempt} took {took:?}"
        );
        assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
        let details = refused.get_error_details();
        assert_eq!(details.error_info().unwrap().reason, "STORE_UNAVAILABLE");
        assert!(
            details.retry_info().is_some(),
            "UNAVAILABLE carries RetryInfo"
        );
        assert!(!refused.message().to_lowercase().contains("postgres"));
    }
    let noticed = app
        .until_health(ServingStatus::NotServing, Duration::from_secs(5))
        .await;
    assert!(noticed < Duration::from_secs(3), "health took {noticed:?}");

    let restarted = tokio::task::block_in_place(|| EmbeddedPostgres::start(&options)).unwrap();
    app.until_health(ServingStatus::Serving, Duration::from_secs(10))
        .await;
    let found = client
        .lookup(lookup_request("ns", "k"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(found.operation.unwrap().operation_key, "k");
    drop(restarted);
    let _ = std::fs::remove_dir_all(&options.root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_row_is_busy_for_its_callers_and_does_not_hold_up_other_keys() {
    let app =
        spawn_app_with(|config| config.database.lock_timeout = Duration::from_millis(500)).await;
    let mut client = app.client.clone();
    claim(&mut client, claim_request("ns", "locked", "w", json!({}))).await;
    app.expire_lease("ns", "locked").await;
    let lock = app.lock_row("locked").await;

    let mut waiting = Vec::new();
    for i in 0..20 {
        let mut client = app.new_client().await;
        waiting.push(tokio::spawn(async move {
            let started = Instant::now();
            let answer = client
                .claim(claim_request(
                    "ns",
                    "locked",
                    &format!("taker-{i}"),
                    json!({}),
                ))
                .await;
            (answer, started.elapsed())
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    for i in 0..20 {
        claim(
            &mut client,
            claim_request("ns", &format!("free-{i}"), "w", json!({})),
        )
        .await;
    }
    let others = started.elapsed();
    assert!(
        others < Duration::from_millis(400),
        "other keys took {others:?}"
    );
    for waiter in waiting {
        let (answer, took) = waiter.await.unwrap();
        let refused = answer.expect_err("the row stays locked");
        assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
        let details = refused.get_error_details();
        assert_eq!(details.error_info().unwrap().reason, "OPERATION_BUSY");
        assert!(details.retry_info().is_some());
        assert!(took < Duration::from_secs(3), "{took:?}");
    }
    lock.release().await;
    let taken = claim(&mut client, claim_request("ns", "locked", "w2", json!({}))).await;
    assert!(taken.lease.is_some(), "free again once the lock is gone");
}

#[tokio::test]
async fn a_deadline_that_passes_inside_the_server_is_deadline_exceeded() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    // An uncommitted registration of the same key makes the Claim wait.
    let mut outside = sqlx::PgConnection::connect_with(&app.db_options)
        .await
        .unwrap();
    let mut tx = outside.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO operations (namespace, operation_key, status, parameters_digest,
             fencing_token, lease_owner, lease_expires_at, attempts, max_attempts,
             initial_backoff_us, max_backoff_us, deadline_at, created_at, updated_at)
         VALUES ('ns', 'slow', 'in_progress', '\\x00', next_fencing_token(), 'other',
                 now() + interval '1 minute', 1, 5, 1000000, 300000000,
                 now() + interval '1 day', now(), now())",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    let mut request = tonic::Request::new(claim_request("ns", "slow", "w", json!({})));
    request.set_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let refused = client.claim(request).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // The server answers just ahead of the deadline; on a loaded machine the
    // client's own timer may still win the race, and says so itself.
    match refused.code() {
        Code::DeadlineExceeded => assert_eq!(
            refused.get_error_details().error_info().unwrap().reason,
            "DEADLINE_EXCEEDED"
        ),
        Code::Cancelled => assert_eq!(refused.message(), "Timeout expired"),
        other => panic!("{other:?}: {refused:?}"),
    }
    let server_said = |code| {
        let scraped = scrape(app.metrics_addr);
        async move {
            scraped.await.value(
                "grpc_server_handled_total",
                &[
                    ("grpc_service", "opreg.v1.OperationRegistry"),
                    ("grpc_method", "Claim"),
                    ("grpc_type", "unary"),
                    ("grpc_code", code),
                ],
            )
        }
    };
    assert_eq!(
        server_said("DeadlineExceeded").await,
        1.0,
        "never CANCELLED"
    );
    assert_eq!(server_said("Canceled").await, 0.0);
    tx.rollback().await.unwrap();
    let claimed = claim(&mut client, claim_request("ns", "slow", "w", json!({}))).await;
    assert!(
        claimed.lease.is_some(),
        "the stopped call left nothing behind"
    );
}
