//! Per-namespace rate limits through the real server: a namespace past its
//! calls per second is answered RESOURCE_EXHAUSTED / RATE_LIMITED with a
//! RetryInfo, other namespaces are not slowed, and the run-once helper rides
//! the limit out as the transient answer it is.

mod common;

use std::time::Duration;

use common::*;
use opreg_client::{Client, Error, RunOnce, Success, error_reason, proto as pb};
use opreg_server::config::Overrides;
use serde_json::json;
use tonic::Code;

fn lookup(namespace: &str) -> pb::LookupRequest {
    pb::LookupRequest {
        namespace: namespace.into(),
        operation_key: "k".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_namespace_past_its_rate_waits_and_the_others_do_not() {
    let app = spawn_app_with(|config| {
        config.limits.namespace_rate_limits = Overrides(vec![("reports".into(), 5)]);
    })
    .await;
    let mut client = app.client.clone();
    let mut refused = Vec::new();
    for _ in 0..10 {
        if let Err(status) = client.lookup(lookup("reports")).await
            && status.code() != Code::NotFound
        {
            refused.push(status);
        }
    }
    assert!(refused.len() >= 4, "{} of 10 refused", refused.len());
    let status = &refused[0];
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(error_reason(status).as_deref(), Some("RATE_LIMITED"));
    assert_eq!(metadata(status, "callsPerSecond"), "5");
    let delay = tonic_types::StatusExt::get_details_retry_info(status)
        .and_then(|info| info.retry_delay)
        .expect("a RetryInfo");
    assert!(
        delay > Duration::ZERO && delay <= Duration::from_millis(200),
        "{delay:?}"
    );

    for _ in 0..20 {
        let answer = client.lookup(lookup("payments")).await.unwrap_err();
        assert_eq!(
            answer.code(),
            Code::NotFound,
            "other namespaces are not limited"
        );
    }
    tokio::time::sleep(delay).await;
    assert_eq!(
        client.lookup(lookup("reports")).await.unwrap_err().code(),
        Code::NotFound
    );
    let scraped = scrape(app.metrics_addr).await;
    assert!(scraped.value("opreg_rate_limited_total", &[("namespace", "reports")]) >= 4.0);
}

#[tokio::test]
async fn the_typed_error_is_transient_and_run_once_rides_it_out() {
    let app = spawn_app_with(|config| {
        config.limits.namespace_rate_limits = Overrides(vec![("reports".into(), 2)]);
    })
    .await;
    let client = Client::connect(app.endpoint.clone()).await.unwrap();
    let mut limited = None;
    for _ in 0..5 {
        if let Err(error) = client.lookup(lookup("reports")).await
            && !matches!(error, Error::NotFound { .. })
        {
            limited = Some(error);
        }
    }
    let limited = limited.expect("the third call in a second is limited");
    assert!(
        matches!(
            limited,
            Error::RateLimited {
                calls_per_second: 2,
                ..
            }
        ),
        "{limited:?}"
    );
    assert!(limited.is_transient() && limited.retry_after().is_some());

    // Three runs of two calls each against two calls per second: they wait, none fails.
    let runs = (0..3).map(|run| {
        let client = client.clone();
        async move {
            RunOnce::new(
                &client,
                "reports",
                &format!("report-{run}"),
                json!({"run": run}),
            )
            .run(|_lease| async { Ok(Success::new("done")) })
            .await
        }
    });
    for done in futures::future::join_all(runs).await {
        assert_eq!(done.unwrap().result, b"done");
    }
    assert_eq!(
        app.count("SELECT count(*) FROM operations WHERE status = 'succeeded'")
            .await,
        3
    );
}
