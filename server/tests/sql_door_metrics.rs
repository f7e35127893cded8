//! The SQL door's calls on `/metrics`: PostgreSQL counts them
//! (`opreg_sql.call_counts`), refusals included, and the server reports the
//! counts with its gauges. Alone in its binary: the recorder is process-wide.

mod common;

use std::time::Duration;

use common::*;

#[tokio::test]
async fn the_sql_doors_calls_are_counted_refusals_and_rollbacks_included() {
    let app = spawn_app_with(|config| {
        config.telemetry.gauge_refresh_interval = Duration::from_millis(100);
    })
    .await;
    let claim = "SELECT fencing_token FROM opreg_sql.claim('metered', $1, $2::jsonb, 'lab')";
    let token: i64 = sqlx::query_scalar(claim)
        .bind("k")
        .bind(r#"{"amount": 1}"#)
        .fetch_one(&app.db)
        .await
        .unwrap();
    sqlx::query("SELECT 1 FROM opreg_sql.complete('metered', 'k', $1, 'SUCCESS')")
        .bind(token)
        .execute(&app.db)
        .await
        .unwrap();
    // A replay, a conflict and a stale report; a claim whose transaction
    // rolls back still counts as a call answered.
    for (key, parameters) in [("k", r#"{"amount": 1}"#), ("k", r#"{"amount": 2}"#)] {
        let _ = sqlx::query(claim)
            .bind(key)
            .bind(parameters)
            .execute(&app.db)
            .await;
    }
    let stale = sqlx::query("SELECT 1 FROM opreg_sql.complete('metered', 'k', $1, 'SUCCESS')")
        .bind(token + 1_000)
        .execute(&app.db)
        .await;
    assert!(stale.is_err());
    let mut tx = app.db.begin().await.unwrap();
    sqlx::query(claim)
        .bind("rolled-back")
        .bind("{}")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let expected = [
        (("claim", "acquired"), 2.0),
        (("claim", "replayed"), 1.0),
        (("claim", "conflict"), 1.0),
        (("execution", "first"), 2.0),
        (("complete", "success"), 1.0),
        (("complete", "stale_fencing_token"), 1.0),
        (("claim", "in_progress"), 0.0),
    ];
    let value = |scraped: &Scrape, (call, outcome): (&str, &str)| {
        scraped.value(
            "opreg_sql_door_calls_total",
            &[("call", call), ("outcome", outcome)],
        )
    };
    let mut scraped = scrape(app.metrics_addr).await;
    for _ in 0..50 {
        if expected
            .iter()
            .all(|(series, calls)| value(&scraped, *series) == *calls)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        scraped = scrape(app.metrics_addr).await;
    }
    for (series, calls) in expected {
        assert_eq!(value(&scraped, series), calls, "{series:?}");
    }
    // None of them went through the server's own counters.
    assert_eq!(
        scraped.value(
            "opreg_claims_total",
            &[("namespace", "metered"), ("outcome", "acquired")]
        ),
        0.0
    );
}
