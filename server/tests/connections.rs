//! Load at the door: calls past the concurrency limit are shed with RetryInfo
//! while health keeps answering, connections past the cap are closed, and so
//! is a connection that never sends its HTTP/2 preface.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_types::StatusExt;

fn address(app: &TestApp) -> String {
    app.endpoint.trim_start_matches("http://").to_owned()
}

/// True when the server closes `stream` (EOF or reset) within `within`.
async fn closed_within(stream: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(within, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // The server's own preface (SETTINGS) may come first.
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_limit_are_shed_and_health_still_answers() {
    let app = spawn_app_with(|config| {
        config.limits.max_concurrent_calls = 2;
        config.database.lock_timeout = Duration::from_secs(5);
    })
    .await;
    let mut client = app.client.clone();
    claim(&mut client, claim_request("ns", "locked", "w", json!({}))).await;
    app.expire_lease("ns", "locked").await;
    let lock = app.lock_row("locked").await;
    let mut blocked = Vec::new();
    for i in 0..2 {
        let mut client = app.new_client().await;
        blocked.push(tokio::spawn(async move {
            client
                .claim(claim_request("ns", "locked", &format!("t{i}"), json!({})))
                .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = Instant::now();
    let shed = client
        .lookup(opreg_client::proto::LookupRequest {
            namespace: "ns".into(),
            operation_key: "locked".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(shed.code(), Code::Unavailable, "{shed:?}");
    let details = shed.get_error_details();
    assert_eq!(details.error_info().unwrap().reason, "OVERLOADED");
    assert!(details.retry_info().is_some());
    assert_eq!(
        app.health("").await,
        Some(ServingStatus::Serving),
        "health is never shed"
    );

    lock.release().await;
    for call in blocked {
        call.await.unwrap().unwrap();
    }
    let scraped = scrape(app.metrics_addr).await;
    assert!(scraped.value("opreg_calls_shed_total", &[]) >= 1.0);
    claim(&mut client, claim_request("ns", "after", "w", json!({}))).await;
}

#[tokio::test]
async fn a_connection_without_a_preface_is_closed_after_the_handshake_timeout() {
    let app =
        spawn_app_with(|config| config.listeners.handshake_timeout = Duration::from_millis(300))
            .await;
    let mut silent = tokio::net::TcpStream::connect(address(&app)).await.unwrap();
    let mut partial = tokio::net::TcpStream::connect(address(&app)).await.unwrap();
    partial.write_all(b"PRI * HTTP/2.0").await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(3)).await);
    assert!(closed_within(&mut partial, Duration::from_secs(3)).await);
    // A real client is unaffected.
    let mut client = app.new_client().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    claim(&mut client, claim_request("ns", "k", "w", json!({}))).await;
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_as_they_arrive() {
    let app = spawn_app_with(|config| config.listeners.max_connections = 1).await;
    // The harness's clients connect lazily and hold none yet: one fits.
    let mut fits = tokio::net::TcpStream::connect(address(&app)).await.unwrap();
    let mut over = tokio::net::TcpStream::connect(address(&app)).await.unwrap();
    assert!(
        closed_within(&mut over, Duration::from_secs(2)).await,
        "past the cap"
    );
    assert!(
        !closed_within(&mut fits, Duration::from_millis(300)).await,
        "within the cap"
    );
    drop(fits);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut client = app.client.clone();
    claim(&mut client, claim_request("ns", "k", "w", json!({}))).await;
}
