//! A scripted scenario, and the exact change it makes to every metric on
//! `/metrics`. Alone in its binary: the recorder is process-wide.

mod common;

use std::time::Duration;

use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome};
use serde_json::json;

const NS: &str = "metrics";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_scenario_moves_every_metric_by_exactly_its_events() {
    let app = spawn_app_with(|config| {
        config.telemetry.gauge_refresh_interval = Duration::from_millis(100)
    })
    .await;
    let mut client = app.client.clone();
    let before = scrape(app.metrics_addr).await;

    // New key, a duplicate from another owner, a resume by the holder, success, a replay.
    let k1 = claim(&mut client, claim_request(NS, "k1", "a", json!({"n": 1}))).await;
    claim(&mut client, claim_request(NS, "k1", "b", json!({"n": 1}))).await;
    claim(&mut client, claim_request(NS, "k1", "a", json!({"n": 1}))).await;
    client
        .complete(complete_request(NS, "k1", token(&k1), success(b"ok")))
        .await
        .unwrap();
    claim(&mut client, claim_request(NS, "k1", "c", json!({"n": 1}))).await;
    // A conflict and an invalid claim.
    assert!(
        client
            .claim(claim_request(NS, "k1", "c", json!({"n": 2})))
            .await
            .is_err()
    );
    assert!(
        client
            .claim(claim_request(NS, "k1", "", json!({"n": 1})))
            .await
            .is_err()
    );
    // An invalid namespace never becomes a label.
    let refused = client
        .claim(claim_request(" bad\u{1}", "k1", "a", json!({})))
        .await;
    assert_eq!(refused.unwrap_err().code(), tonic::Code::InvalidArgument);
    // An unknown outcome, then its reconcile lease.
    let k2 = claim(&mut client, claim_request(NS, "k2", "a", json!({}))).await;
    client
        .complete(complete_request(NS, "k2", token(&k2), unknown("r")))
        .await
        .unwrap();
    let reconcile = claim(&mut client, claim_request(NS, "k2", "b", json!({}))).await;
    assert_eq!(outcome(&reconcile), ClaimOutcome::Reconcile);
    // A retryable failure, a claim before it is due, and the retry.
    let k3 = claim(&mut client, claim_request(NS, "k3", "a", json!({}))).await;
    client
        .complete(complete_request(
            NS,
            "k3",
            token(&k3),
            retryable(Some(Duration::from_secs(60))),
        ))
        .await
        .unwrap();
    assert_eq!(
        outcome(&claim(&mut client, claim_request(NS, "k3", "a", json!({}))).await),
        ClaimOutcome::RetryLater
    );
    app.make_retry_due(NS, "k3").await;
    assert_eq!(
        outcome(&claim(&mut client, claim_request(NS, "k3", "a", json!({}))).await),
        ClaimOutcome::Acquired
    );
    // A takeover, and the old holder's stale Complete.
    let k4 = claim(&mut client, claim_request(NS, "k4", "a", json!({}))).await;
    app.expire_lease(NS, "k4").await;
    let taken = claim(&mut client, claim_request(NS, "k4", "b", json!({}))).await;
    assert!(taken.lease.unwrap().takeover);
    assert!(
        client
            .complete(complete_request(NS, "k4", token(&k4), success(b"")))
            .await
            .is_err()
    );
    // A compensation of k1.
    let refund = pb::ClaimRequest {
        compensates: "k1".into(),
        ..claim_request(NS, "refund:k1", "a", json!({}))
    };
    claim(&mut client, refund).await;

    // Gauges follow the database on the next refresh: k2 (reconciling), k3, k4, refund in progress.
    let mut after = scrape(app.metrics_addr).await;
    for _ in 0..100 {
        if after.value(
            "opreg_operations",
            &[("namespace", NS), ("status", "in_progress")],
        ) == 4.0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        after = scrape(app.metrics_addr).await;
    }
    let delta = |name: &str, labels: &[(&str, &str)]| {
        after.value(name, labels) - before.value(name, labels)
    };
    let ns = ("namespace", NS);
    let claims = |outcome| delta("opreg_claims_total", &[ns, ("outcome", outcome)]);
    // k1, its resume, k2, k3, its retry, k4, its takeover, the refund.
    assert_eq!(claims("acquired"), 8.0);
    assert_eq!(claims("in_progress"), 1.0);
    assert_eq!(claims("replayed"), 1.0);
    assert_eq!(claims("conflict"), 1.0);
    assert_eq!(claims("invalid"), 1.0);
    assert_eq!(
        delta(
            "opreg_claims_total",
            &[("namespace", "other"), ("outcome", "invalid")]
        ),
        1.0
    );
    assert!(!after.text.contains("bad"));
    assert_eq!(claims("reconcile"), 1.0);
    assert_eq!(claims("retry_later"), 1.0);
    assert_eq!(claims("dead"), 0.0);
    assert_eq!(
        delta("opreg_operations_registered_total", &[ns]),
        5.0,
        "k1..k4 and the refund"
    );
    assert_eq!(delta("opreg_parameter_conflicts_total", &[ns]), 1.0);
    assert_eq!(delta("opreg_unknown_outcomes_total", &[ns]), 1.0);
    let executions = |kind| delta("opreg_executions_total", &[ns, ("kind", kind)]);
    assert_eq!(
        [
            executions("first"),
            executions("retry"),
            executions("takeover"),
            executions("reconcile"),
            executions("resume")
        ],
        [5.0, 1.0, 1.0, 1.0, 1.0]
    );
    let completions = |outcome| delta("opreg_completions_total", &[ns, ("outcome", outcome)]);
    assert_eq!(
        [
            completions("success"),
            completions("failure"),
            completions("retryable"),
            completions("unknown")
        ],
        [1.0, 0.0, 1.0, 1.0]
    );
    assert_eq!(
        delta(
            "opreg_stale_token_rejections_total",
            &[ns, ("rpc", "Complete")]
        ),
        1.0
    );
    assert_eq!(delta("opreg_lease_takeovers_total", &[ns]), 1.0);
    assert_eq!(delta("opreg_compensations_total", &[ns]), 1.0);
    assert_eq!(
        delta("opreg_attempts_per_operation_count", &[ns]),
        1.0,
        "only k1 finished"
    );
    assert_eq!(delta("opreg_attempts_per_operation_sum", &[ns]), 1.0);
    assert_eq!(
        after.value("opreg_operations", &[ns, ("status", "in_progress")]),
        4.0
    );
    assert_eq!(
        after.value("opreg_operations", &[ns, ("status", "retry_scheduled")]),
        0.0
    );
    assert_eq!(after.value("opreg_operations_unknown", &[ns]), 1.0);
    assert!(after.value("opreg_unknown_oldest_age_seconds", &[ns]) > 0.0);
    assert_eq!(after.value("opreg_store_up", &[]), 1.0);

    let grpc = |method, code| {
        delta(
            "grpc_server_handled_total",
            &[
                ("grpc_service", "opreg.v1.OperationRegistry"),
                ("grpc_method", method),
                ("grpc_type", "unary"),
                ("grpc_code", code),
            ],
        )
    };
    assert_eq!(grpc("Claim", "OK"), 12.0);
    assert_eq!(grpc("Claim", "AlreadyExists"), 1.0);
    assert_eq!(grpc("Claim", "InvalidArgument"), 2.0);
    assert_eq!(grpc("Complete", "OK"), 3.0);
    assert_eq!(grpc("Complete", "Aborted"), 1.0);
    let started = delta(
        "grpc_server_started_total",
        &[
            ("grpc_service", "opreg.v1.OperationRegistry"),
            ("grpc_method", "Claim"),
            ("grpc_type", "unary"),
        ],
    );
    assert_eq!(started, 15.0);
    let timed = delta(
        "grpc_server_handling_seconds_count",
        &[
            ("grpc_service", "opreg.v1.OperationRegistry"),
            ("grpc_method", "Claim"),
            ("grpc_type", "unary"),
        ],
    );
    assert_eq!(timed, 15.0);
    assert!(after.value("opreg_db_pool_connections", &[("state", "size")]) >= 1.0);
    assert!(
        after
            .text
            .contains("opreg_db_query_duration_seconds_bucket{query=\"operations_register\"")
    );
    for name in [
        "opreg_claims_total",
        "opreg_operations_registered_total",
        "opreg_unknown_oldest_age_seconds",
        "opreg_attempts_per_operation",
        "grpc_server_handling_seconds",
        "opreg_db_pool_waiting",
    ] {
        assert!(
            after.text.contains(&format!("# HELP {name} ")),
            "{name} is described"
        );
    }
    assert!(
        after
            .text
            .contains("# TYPE opreg_attempts_per_operation histogram")
    );
}
