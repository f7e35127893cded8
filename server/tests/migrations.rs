//! Forward migrations carry existing data over: a database written under an
//! earlier schema reads the same afterwards and keeps working through the
//! real server.

mod common;

use common::*;
use opreg_server::config::Config;
use opreg_server::store;
use sqlx::postgres::PgPoolOptions;
use tonic::Code;

const NS: &str = "carried";

/// The last schema before the current execution moved onto its operation.
const BEFORE_CURRENT_EXECUTION_ON_ROW: i64 = 20261202000001;

/// Three operations as the earlier schema stored them: a success, a lease taken
/// over (its first execution superseded, the takeover running), and a retry
/// waiting with its retryable execution.
const EARLIER_ROWS: &str = "
    INSERT INTO operations (namespace, operation_key, status, parameters_digest, fencing_token,
        lease_owner, lease_expires_at, lease_takeover, attempts, max_attempts, initial_backoff_us,
        max_backoff_us, deadline_at, next_attempt_at, result, created_at, updated_at, completed_at)
    VALUES
        ('carried', 'done', 'succeeded', '\\x01', 1, NULL, NULL, false, 1, 5, 1000000, 300000000,
         now() + interval '1 day', NULL, 'ok', now(), now(), now()),
        ('carried', 'taken', 'in_progress', '\\x02', 3, 'worker-B', now() + interval '1 hour', true,
         2, 5, 1000000, 300000000, now() + interval '1 day', NULL, NULL, now(), now(), NULL),
        ('carried', 'retrying', 'retry_scheduled', '\\x03', 4, NULL, NULL, false, 1, 5, 1000000,
         300000000, now() + interval '1 day', now() + interval '1 hour', NULL, now(), now(), NULL);
    INSERT INTO executions (fencing_token, namespace, operation_key, attempt, kind, execution_id,
        owner, started_at, finished_at, outcome, outcome_digest, error_class, message)
    VALUES
        (1, 'carried', 'done', 1, 'first', 'run-1', 'worker-A', now(), now(), 'succeeded', '\\xaa',
         NULL, NULL),
        (2, 'carried', 'taken', 1, 'first', 'run-2', 'worker-A', now(), now(), 'superseded', NULL,
         NULL, NULL),
        (3, 'carried', 'taken', 2, 'takeover', 'run-3', 'worker-B', now(), NULL, 'running', NULL,
         NULL, NULL),
        (4, 'carried', 'retrying', 1, 'first', 'run-4', 'worker-C', now(), now(), 'retryable',
         '\\xbb', 'downstream_timeout', 'connect timed out');
    SELECT setval('fencing_tokens', 4);
";

/// Every execution as JSON, in token order: the same text before and after a
/// migration means the same rows and values.
async fn every_execution(db: &sqlx::PgPool) -> Vec<String> {
    sqlx::query_scalar("SELECT to_jsonb(e)::text FROM executions AS e ORDER BY fencing_token")
        .fetch_all(db)
        .await
        .unwrap()
}

#[tokio::test]
async fn executions_written_before_the_current_execution_moved_onto_its_row_are_kept() {
    let options = fresh_database().await;
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options.clone())
        .await
        .unwrap();
    store::MIGRATOR
        .run_to(BEFORE_CURRENT_EXECUTION_ON_ROW, &pool)
        .await
        .unwrap();
    sqlx::raw_sql(EARLIER_ROWS).execute(&pool).await.unwrap();
    let before = every_execution(&pool).await;
    assert_eq!(before.len(), 4);

    store::MIGRATOR.run(&pool).await.unwrap();

    assert_eq!(
        every_execution(&pool).await,
        before,
        "the view reads as the table did"
    );
    let current: Vec<(String, i64)> = sqlx::query_as(
        "SELECT operation_key, execution_token FROM operations ORDER BY operation_key",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        current,
        [
            ("done".into(), 1),
            ("retrying".into(), 4),
            ("taken".into(), 3)
        ],
        "each operation carries its newest execution"
    );
    let replaced: Vec<i64> = sqlx::query_scalar("SELECT fencing_token FROM execution_history")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        replaced,
        [2],
        "only the replaced execution stays in the history"
    );

    // The carried-over lease completes through the real server; the
    // superseded one stays refused, and the history reads in order.
    let mut config = Config::defaults();
    config.listeners.listen_addr = "127.0.0.1:0".parse().unwrap();
    config.listeners.metrics_addr = "127.0.0.1:0".parse().unwrap();
    let app = serve(&config, pool, options).await;
    let mut client = app.client.clone();
    assert_error(
        client
            .complete(complete_request(NS, "taken", 2, success(b"late")))
            .await,
        Code::Aborted,
        "STALE_FENCING_TOKEN",
    );
    client
        .complete(complete_request(NS, "taken", 3, success(b"settled")))
        .await
        .unwrap();
    let history = lookup_history(&mut client, NS, "taken").await;
    let executions: Vec<(u64, String)> = history
        .executions
        .iter()
        .map(|execution| {
            (
                execution.fencing_token,
                execution.outcome().as_str_name().into(),
            )
        })
        .collect();
    assert_eq!(
        executions,
        [
            (2, "EXECUTION_OUTCOME_SUPERSEDED".into()),
            (3, "EXECUTION_OUTCOME_SUCCEEDED".into())
        ]
    );
}

/// Every token is drawn above the floor (20261208000001): no function of the
/// schema and no statement of the server draws with a bare `nextval`, which
/// a restored database would answer with tokens already handed out. A later
/// migration that copies an SQL door function from before the floor fails
/// here.
#[tokio::test]
async fn every_token_is_drawn_above_the_floor() {
    let options = fresh_database().await;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    store::MIGRATOR.run(&pool).await.unwrap();
    let drawing: Vec<String> = sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text FROM pg_proc AS p
         WHERE p.prosrc LIKE '%nextval(''fencing_tokens'')%' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(drawing, ["draw_fencing_token()", "next_fencing_token()"]);
    let door: Vec<String> = sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text FROM pg_proc AS p
         WHERE p.prosrc LIKE '%next_fencing_token()%'
           AND p.pronamespace = 'opreg_sql'::regnamespace ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        door.iter().any(|name| name.starts_with("opreg_sql.claim(")),
        "{door:?}"
    );

    let mut sources = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src"
    ))];
    while let Some(path) = sources.pop() {
        if path.is_dir() {
            sources.extend(
                std::fs::read_dir(&path)
                    .unwrap()
                    .map(|entry| entry.unwrap().path()),
            );
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                !text.contains("nextval('fencing_tokens')"),
                "{} draws a token with a bare nextval",
                path.display()
            );
        }
    }
}
