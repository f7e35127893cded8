//! The background maintenance: budgets enforced without waiting for a caller,
//! retention that deletes only finished operations past their namespace's
//! retention, and one maintainer among several replicas.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome, OperationStatus};
use serde_json::json;
use sqlx::postgres::PgConnectOptions;

const NS: &str = "callbacks";

/// Maintenance every 100 ms, finished operations kept `retention`.
fn maintained(retention: &str) -> impl FnOnce(&mut opreg_server::config::Config) {
    let retention = retention.parse().unwrap();
    move |config| {
        config.lifecycle.maintenance_interval = Duration::from_millis(100);
        config.lifecycle.maintenance_batch_pause = Duration::from_millis(1);
        config.lifecycle.retention = retention;
    }
}

/// Ages every operation's completion (and creation) by a day, by the database clock.
async fn age_everything(app: &TestApp) {
    sqlx::query(
        "UPDATE operations SET completed_at = clock_timestamp() - interval '1 day',
                               created_at = clock_timestamp() - interval '1 day'",
    )
    .execute(&app.db)
    .await
    .unwrap();
}

async fn keys_left(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar("SELECT operation_key FROM operations ORDER BY operation_key")
        .fetch_all(&app.db)
        .await
        .unwrap()
}

/// Polls `condition` for up to ten seconds.
async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    mut condition: impl FnMut() -> F,
) {
    for _ in 0..200 {
        if condition().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never: {what}");
}

#[tokio::test]
async fn retention_deletes_only_finished_operations_and_a_purged_key_registers_anew() {
    let app = spawn_app_with(maintained("1h")).await;
    let (mut client, mut admin) = (app.client.clone(), app.admin.clone());
    // What may go: finished operations, with their executions and audit rows.
    settle(&mut client, NS, "succeeded", success(b"ok")).await;
    settle(
        &mut client,
        NS,
        "failed",
        pb::complete_request::Outcome::Failure(pb::Failure {
            code: "DECLINED".into(),
            message: String::new(),
        }),
    )
    .await;
    settle(&mut client, NS, "resolved", unknown("psp-1")).await;
    admin
        .resolve_operation(pb::ResolveOperationRequest {
            namespace: NS.into(),
            operation_key: "resolved".into(),
            operator: "ops".into(),
            reason: "PSP says paid".into(),
            outcome: Some(pb::resolve_operation_request::Outcome::Success(
                pb::Success::default(),
            )),
        })
        .await
        .unwrap();
    // What must stay, one of each protected kind.
    claim(
        &mut client,
        claim_request(NS, "in-progress", "w", json!({})),
    )
    .await;
    settle(
        &mut client,
        NS,
        "retry-scheduled",
        retryable(Some(Duration::from_secs(600))),
    )
    .await;
    settle(&mut client, NS, "unknown", unknown("psp-2")).await;
    let mut once = claim_request(NS, "dead", "w", json!({}));
    once.retry_policy = Some(policy(1));
    let dead = claim(&mut client, once).await;
    client
        .complete(complete_request(NS, "dead", token(&dead), retryable(None)))
        .await
        .unwrap();
    settle(
        &mut client,
        NS,
        "held",
        retryable(Some(Duration::from_secs(600))),
    )
    .await;
    admin
        .hold_operation(pb::HoldOperationRequest {
            namespace: NS.into(),
            operation_key: "held".into(),
            operator: "ops".into(),
            reason: "investigating".into(),
        })
        .await
        .unwrap();
    settle(&mut client, NS, "compensated-original", success(b"debited")).await;
    let mut compensation = claim_request(NS, "refund", "w", json!({}));
    compensation.compensates = "compensated-original".into();
    claim(&mut client, compensation.clone()).await;

    age_everything(&app).await;
    eventually("finished operations are purged", || async {
        app.count("SELECT count(*) FROM operations WHERE status IN ('succeeded', 'failed')")
            .await
            == 1
    })
    .await;
    assert_eq!(
        keys_left(&app).await,
        [
            "compensated-original",
            "dead",
            "held",
            "in-progress",
            "refund",
            "retry-scheduled",
            "unknown"
        ],
        "an original stays while its compensation is live"
    );
    let orphans = app
        .count(
            "SELECT (SELECT count(*) FROM execution_history e WHERE NOT EXISTS (
                         SELECT 1 FROM operations o WHERE o.namespace = e.namespace AND o.operation_key = e.operation_key))
                  + (SELECT count(*) FROM audit_entries a WHERE NOT EXISTS (
                         SELECT 1 FROM operations o WHERE o.namespace = a.namespace AND o.operation_key = a.operation_key))",
        )
        .await;
    assert_eq!(
        orphans, 0,
        "executions and audit rows go with their operation"
    );
    let purged = scrape(app.metrics_addr).await;
    assert!(purged.value("opreg_operations_purged_total", &[("namespace", NS)]) >= 3.0);

    // Once the compensation finishes and ages, both may go.
    let refund = claim(&mut client, compensation).await;
    client
        .complete(complete_request(
            NS,
            "refund",
            token(&refund),
            success(b"refunded"),
        ))
        .await
        .unwrap();
    age_everything(&app).await;
    eventually(
        "the original goes with its finished compensation",
        || async {
            app.count("SELECT count(*) FROM operations WHERE status IN ('succeeded', 'failed')")
                .await
                == 0
        },
    )
    .await;

    // A purged key is a new operation: first attempt, new token, no history.
    let again = claim(
        &mut client,
        claim_request(NS, "succeeded", "later", json!({"key": "succeeded"})),
    )
    .await;
    assert_eq!(outcome(&again), ClaimOutcome::Acquired);
    assert_eq!(again.lease.unwrap().attempt, 1);
    assert_eq!(
        lookup_history(&mut client, NS, "succeeded")
            .await
            .executions
            .len(),
        1
    );
}

#[tokio::test]
async fn namespace_retention_overrides_the_default_and_forever_keeps_everything() {
    let app = spawn_app_with(|config| {
        maintained("1h")(config);
        config.lifecycle.namespace_retention = "ledger=forever,short=2s".parse().unwrap();
    })
    .await;
    let mut client = app.client.clone();
    for namespace in ["ledger", "short", NS] {
        settle(&mut client, namespace, "k", success(b"ok")).await;
    }
    // Younger than the default's hour: only the 2 s namespace is past its retention.
    sqlx::query("UPDATE operations SET completed_at = clock_timestamp() - interval '10 seconds'")
        .execute(&app.db)
        .await
        .unwrap();
    eventually("the short namespace is purged", || async {
        app.count("SELECT count(*) FROM operations WHERE namespace = 'short'")
            .await
            == 0
    })
    .await;
    age_everything(&app).await;
    eventually("the default namespace is purged", || async {
        app.count("SELECT count(*) FROM operations WHERE namespace = 'callbacks'")
            .await
            == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        app.count("SELECT count(*) FROM operations WHERE namespace = 'ledger'")
            .await,
        1
    );
}

#[tokio::test]
async fn budgets_run_out_into_dead_without_waiting_for_a_caller() {
    let app = spawn_app_with(maintained("forever")).await;
    let mut client = app.client.clone();
    settle(
        &mut client,
        NS,
        "past-deadline",
        retryable(Some(Duration::from_secs(600))),
    )
    .await;
    // A retry is never due later than its deadline (Complete makes it DEAD
    // instead), so both have passed.
    sqlx::query(
        "UPDATE operations SET deadline_at = clock_timestamp() - interval '1 second',
                               next_attempt_at = clock_timestamp() - interval '2 seconds'",
    )
    .execute(&app.db)
    .await
    .unwrap();
    let mut once = claim_request(NS, "stalled-last-attempt", "w", json!({}));
    once.retry_policy = Some(policy(1));
    claim(&mut client, once).await;
    app.expire_lease(NS, "stalled-last-attempt").await;
    claim(
        &mut client,
        claim_request(NS, "stalled-with-budget", "w", json!({})),
    )
    .await;
    app.expire_lease(NS, "stalled-with-budget").await;

    eventually("exhausted operations are DEAD", || async {
        app.count("SELECT count(*) FROM operations WHERE status = 'dead'")
            .await
            == 2
    })
    .await;
    let status = |key: &'static str| {
        let mut client = client.clone();
        async move {
            lookup_history(&mut client, NS, key)
                .await
                .operation
                .unwrap()
                .status()
        }
    };
    assert_eq!(status("past-deadline").await, OperationStatus::Dead);
    assert_eq!(status("stalled-last-attempt").await, OperationStatus::Dead);
    assert_eq!(
        status("stalled-with-budget").await,
        OperationStatus::InProgress,
        "a takeover may still run it"
    );
    let scraped = scrape(app.metrics_addr).await;
    assert_eq!(
        scraped.value("opreg_maintenance_exhausted_total", &[("namespace", NS)]),
        2.0
    );
}

/// A real `opreg-server` process over the test's database.
struct Replica {
    child: tokio::process::Child,
    endpoint: String,
    metrics: std::net::SocketAddr,
}

async fn replica(options: &PgConnectOptions) -> Replica {
    let metrics: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_opreg-server"))
        .env_clear()
        .env("OPREG_DATABASE_URL", database_url(options))
        .env("OPREG_LISTEN_ADDR", &listen)
        .env("OPREG_METRICS_ADDR", metrics.to_string())
        .env("OPREG_MAINTENANCE_INTERVAL", "100ms")
        .env("OPREG_MAINTENANCE_BATCH_SIZE", "10")
        .env("OPREG_MAINTENANCE_BATCH_PAUSE", "1ms")
        .env("OPREG_RETENTION", "2s")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    Replica {
        child,
        endpoint: format!("http://{listen}"),
        metrics,
    }
}

async fn scrape_replica(replica: &Replica) -> Option<Scrape> {
    match tokio::net::TcpStream::connect(replica.metrics).await {
        Ok(_) => Some(scrape(replica.metrics).await),
        Err(_) => None,
    }
}

#[tokio::test]
async fn of_two_replicas_one_maintains_and_the_other_takes_over_when_it_stops() {
    let mut app =
        spawn_app_with(|config| config.lifecycle.retention = "forever".parse().unwrap()).await;
    let mut client = app.client.clone();
    for i in 0..30 {
        settle(&mut client, NS, &format!("old:{i}"), success(b"ok")).await;
    }
    age_everything(&app).await;
    // The in-process server maintains too; it steps aside for the two replicas.
    app.begin_shutdown();
    eventually(
        "the in-process server hands the maintenance lease on",
        || async { app.count("SELECT count(*) FROM leader_leases").await == 0 },
    )
    .await;
    let mut replicas = vec![
        replica(&app.db_options).await,
        replica(&app.db_options).await,
    ];

    eventually("the aged operations are purged", || async {
        app.count("SELECT count(*) FROM operations").await == 0
    })
    .await;
    let mut scrapes = Vec::new();
    for replica in &replicas {
        let mut scraped = None;
        for _ in 0..100 {
            scraped = scrape_replica(replica).await;
            if scraped.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        scrapes.push(scraped.expect("the replica serves metrics"));
    }
    let leaders: Vec<f64> = scrapes
        .iter()
        .map(|s| s.value("opreg_maintenance_leader", &[]))
        .collect();
    let purged: Vec<f64> = scrapes
        .iter()
        .map(|s| s.value("opreg_operations_purged_total", &[("namespace", NS)]))
        .collect();
    let leader = leaders
        .iter()
        .position(|&l| l == 1.0)
        .expect("one replica leads");
    assert_eq!(
        leaders.iter().sum::<f64>(),
        1.0,
        "exactly one leader: {leaders:?}"
    );
    assert_eq!(purged[leader], 30.0);
    assert_eq!(purged[1 - leader], 0.0, "the other replica purged nothing");

    // The leader is killed: it never hands its lease on, and the other one
    // takes over once the lease expires.
    let mut stopped = replicas.remove(leader);
    stopped.child.kill().await.unwrap();
    let mut client = opreg_client::connect(replicas[0].endpoint.clone())
        .await
        .unwrap();
    for i in 0..5 {
        settle(&mut client, NS, &format!("later:{i}"), success(b"ok")).await;
    }
    age_everything(&app).await;
    eventually("the remaining replica purges", || async {
        app.count("SELECT count(*) FROM operations").await == 0
    })
    .await;
    let survivor = scrape_replica(&replicas[0]).await.unwrap();
    assert_eq!(survivor.value("opreg_maintenance_leader", &[]), 1.0);
    assert_eq!(
        survivor.value("opreg_operations_purged_total", &[("namespace", NS)]),
        5.0
    );
}
