//! With an allowlist of metric namespaces, only those become labels, however
//! many others arrive first. Alone in its binary: the recorder is process-wide.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn only_allowlisted_namespaces_become_labels() {
    let app = spawn_app_with(|config| {
        config.telemetry.metric_namespaces = vec!["payments".into()];
        config.telemetry.metrics_max_namespaces = 1;
    })
    .await;
    let mut client = app.client.clone();
    for namespace in ["noise-1", "noise-2", "payments"] {
        claim(&mut client, claim_request(namespace, "k", "w", json!({}))).await;
    }
    let scraped = scrape(app.metrics_addr).await;
    let claims = |namespace| {
        scraped.value(
            "opreg_claims_total",
            &[("namespace", namespace), ("outcome", "acquired")],
        )
    };
    assert_eq!(claims("payments"), 1.0, "listed, though it came last");
    assert_eq!(claims("other"), 2.0);
    assert!(!scraped.text.contains("noise-1"));
}
