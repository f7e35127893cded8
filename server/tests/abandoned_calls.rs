//! A call its caller abandons (a worker stopping mid-poll, a client deadline)
//! drops the server's future wherever it waits. Dropped while its transaction's
//! BEGIN is on the wire, it must still end that transaction: otherwise the
//! pooled connection goes back with a transaction open on the server, every
//! later statement on it runs inside that transaction, and a Claim it answers
//! ACQUIRED never commits (a Complete of it then finds no such operation).

mod common;
// The fault suite's proxy; this test needs only its latency.
#[path = "fault/proxy.rs"]
#[allow(dead_code)]
mod proxy;

use std::time::Duration;

use common::*;
use opreg_client::proto as pb;
use proxy::{Proxy, Target};
use serde_json::json;
use sqlx::postgres::PgConnectOptions;

const NS: &str = "payouts";

/// Each chunk through the database proxy waits this long, each way.
const LATENCY: Duration = Duration::from_millis(200);

#[tokio::test]
async fn a_call_abandoned_while_its_transaction_begins_leaves_no_transaction_open() {
    let app = spawn_app().await;
    let socket = app
        .db_options
        .get_socket()
        .expect("the test database is on a socket");
    let database_proxy = Proxy::start(Target::Unix(
        socket.join(format!(".s.PGSQL.{}", app.db_options.get_port())),
    ))
    .await;
    let through_proxy = PgConnectOptions::new()
        .host("127.0.0.1")
        .port(database_proxy.address.port())
        .username(app.db_options.get_username())
        .database(app.db_options.get_database().unwrap());
    let replica = replica_on(through_proxy, |config| {
        config.database.pool_acquire_timeout = Duration::from_secs(30);
    })
    .await;
    let mut client = replica.client.clone();

    // ClaimDue opens a transaction; abandon it at points a half latency
    // apart over its first round trips (the pool's checks, then the BEGIN),
    // so that several fall between the BEGIN leaving and its answer arriving.
    for (trial, quarter_latencies) in (1..=25).step_by(2).enumerate() {
        database_proxy.latency(LATENCY);
        let abandoned = tokio::time::timeout(
            LATENCY * quarter_latencies / 4,
            client.claim_due(pb::ClaimDueRequest {
                namespace: NS.into(),
                owner: "worker".into(),
                execution_id: format!("pull-{trial}"),
                lease_ttl: None,
                limit: 8,
            }),
        )
        .await;
        assert!(
            abandoned.is_err(),
            "trial {trial}: the call was not abandoned"
        );
        database_proxy.heal();

        let key = format!("after-{trial}");
        let claimed = claim(&mut client, claim_request(NS, &key, "w", json!({}))).await;
        assert!(is_outcome(&claimed, pb::ClaimOutcome::Acquired));
        let committed: i64 =
            sqlx::query_scalar("SELECT count(*) FROM operations WHERE operation_key = $1")
                .bind(&key)
                .fetch_one(&app.db)
                .await
                .unwrap();
        assert_eq!(
            committed, 1,
            "trial {trial}: an ACQUIRED claim is not visible to another session"
        );
    }
    // Whatever connection the later calls took, none may sit in a transaction
    // the abandoned calls began.
    tokio::time::sleep(LATENCY * 4).await;
    let stuck: Vec<String> = sqlx::query_scalar(
        "SELECT coalesce(query, '') FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'opreg'
           AND state LIKE 'idle in transaction%'
           AND xact_start < now() - $1 * interval '1 second'",
    )
    .bind((LATENCY * 4).as_secs_f64())
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert!(
        stuck.is_empty(),
        "connections left inside an abandoned call's transaction, last ran: {stuck:?}"
    );
}
