//! The lifecycle's metrics: a scripted scenario and the exact values it leaves
//! on `/metrics`. Alone in its binary: the recorder is process-wide.

mod common;

use std::time::Duration;

use common::*;
use opreg_client::proto as pb;
use serde_json::json;

const NS: &str = "lifecycle";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_due_work_handouts_and_operator_actions_are_counted() {
    let app = spawn_app_with(|config| {
        config.telemetry.gauge_refresh_interval = Duration::from_millis(100);
        config.lifecycle.maintenance_interval = Duration::from_millis(100);
        config.lifecycle.retention = "1h".parse().unwrap();
    })
    .await;
    let (mut client, mut admin) = (app.client.clone(), app.admin.clone());
    let ns = ("namespace", NS);

    // Two due retries, one pulled by a worker; a stalled lease; a held operation;
    // a live compensation; a finished operation past its retention.
    settle(&mut client, NS, "pulled", retryable(Some(Duration::ZERO))).await;
    let handed = claim_due(&mut client, NS, "worker", 1).await;
    assert_eq!(handed.len(), 1);
    settle(&mut client, NS, "waiting", retryable(Some(Duration::ZERO))).await;
    claim(&mut client, claim_request(NS, "stalled", "w", json!({}))).await;
    app.expire_lease(NS, "stalled").await;
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
    settle(&mut client, NS, "debit", success(b"ok")).await;
    let mut refund = claim_request(NS, "refund", "w", json!({}));
    refund.compensates = "debit".into();
    claim(&mut client, refund).await;
    settle(&mut client, NS, "old", success(b"ok")).await;
    sqlx::query(
        "UPDATE operations SET completed_at = clock_timestamp() - interval '2 hours'
         WHERE operation_key = 'old'",
    )
    .execute(&app.db)
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut scraped = scrape(app.metrics_addr).await;
    for _ in 0..100 {
        if scraped.value("opreg_operations_purged_total", &[ns]) == 1.0
            && scraped.value("opreg_operations", &[ns, ("status", "held")]) == 1.0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        scraped = scrape(app.metrics_addr).await;
    }
    let state = |state| scraped.value("opreg_operations", &[ns, ("status", state)]);
    // Live leases: the pulled retry and the compensation; the held one counts only as held.
    assert_eq!(state("in_progress"), 2.0);
    assert_eq!(state("expired_lease"), 1.0);
    assert_eq!(state("retry_scheduled"), 1.0, "the waiting retry");
    assert_eq!(state("held"), 1.0);
    assert!(scraped.value("opreg_due_oldest_age_seconds", &[ns]) > 0.0);
    assert_eq!(scraped.value("opreg_compensations_pending", &[ns]), 1.0);
    assert_eq!(
        scraped.value("opreg_claim_due_operations_total", &[ns, ("kind", "retry")]),
        1.0
    );
    assert_eq!(
        scraped.value("opreg_admin_actions_total", &[ns, ("action", "hold")]),
        1.0
    );
    assert_eq!(scraped.value("opreg_operations_purged_total", &[ns]), 1.0);
    assert_eq!(scraped.value("opreg_maintenance_leader", &[]), 1.0);
    assert!(scraped.value("opreg_maintenance_last_run_timestamp_seconds", &[]) > 1.7e9);
    assert_eq!(scraped.value("opreg_retention_lag_seconds", &[ns]), 0.0);
    let handled = |service, method| {
        scraped.value(
            "grpc_server_handled_total",
            &[
                ("grpc_service", service),
                ("grpc_method", method),
                ("grpc_type", "unary"),
                ("grpc_code", "OK"),
            ],
        )
    };
    assert_eq!(handled("opreg.v1.OperationRegistry", "ClaimDue"), 1.0);
    assert_eq!(handled("opreg.v1.OperationAdmin", "HoldOperation"), 1.0);
    for name in [
        "opreg_due_oldest_age_seconds",
        "opreg_compensations_pending",
        "opreg_claim_due_operations_total",
        "opreg_admin_actions_total",
        "opreg_operations_purged_total",
        "opreg_retention_lag_seconds",
        "opreg_maintenance_leader",
    ] {
        assert!(
            scraped.text.contains(&format!("# HELP {name} ")),
            "{name} is described"
        );
    }
}
