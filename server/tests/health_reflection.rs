//! Health follows the database and the drain, over gRPC and over the plain-HTTP
//! probes (`/readyz`, `/livez`); reflection serves the contract.

mod common;

use std::time::Duration;

use common::*;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

async fn channel(endpoint: &str) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn status(endpoint: &str, service: &str) -> Result<ServingStatus, tonic::Status> {
    let mut health = HealthClient::new(channel(endpoint).await);
    let response = health
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await?;
    Ok(response.into_inner().status())
}

async fn wait_for_status(endpoint: &str, service: &str, expected: ServingStatus) {
    for _ in 0..100 {
        if status(endpoint, service).await.ok() == Some(expected) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{service:?} never reported {expected:?}");
}

#[tokio::test]
async fn health_is_serving_while_the_database_answers_and_not_serving_once_draining() {
    let mut app = spawn_app_with(|config| {
        config.telemetry.gauge_refresh_interval = Duration::from_millis(100);
        config.listeners.shutdown_delay = Duration::from_secs(2);
    })
    .await;
    for service in ["", "opreg.v1.OperationRegistry"] {
        wait_for_status(&app.endpoint, service, ServingStatus::Serving).await;
    }
    assert_eq!(http_status(app.metrics_addr, "/readyz").await, 200);
    app.begin_shutdown();
    // During the shutdown delay the server still answers, but reports NOT_SERVING.
    wait_for_status(&app.endpoint, "", ServingStatus::NotServing).await;
    assert_eq!(
        status(&app.endpoint, "opreg.v1.OperationRegistry")
            .await
            .unwrap(),
        ServingStatus::NotServing
    );
    assert_eq!(http_status(app.metrics_addr, "/readyz").await, 503);
    assert_eq!(http_status(app.metrics_addr, "/livez").await, 200);
}

#[tokio::test]
async fn health_is_not_serving_when_the_database_is_unreachable() {
    let app = spawn_app_without_database(|config| {
        config.telemetry.gauge_refresh_interval = Duration::from_millis(100);
        config.database.pool_acquire_timeout = Duration::from_millis(200);
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        status(&app.endpoint, "").await.unwrap(),
        ServingStatus::NotServing
    );
    let scrape = scrape(app.metrics_addr).await;
    assert_eq!(scrape.value("opreg_store_up", &[]), 0.0);
    // Out of rotation, not restarted.
    assert_eq!(http_status(app.metrics_addr, "/readyz").await, 503);
    assert_eq!(http_status(app.metrics_addr, "/livez").await, 200);
}

#[tokio::test]
async fn reflection_lists_and_describes_the_registry() {
    let app = spawn_app().await;
    let mut reflection = ServerReflectionClient::new(channel(&app.endpoint).await);
    let requests = [
        MessageRequest::ListServices(String::new()),
        MessageRequest::FileContainingSymbol("opreg.v1.OperationRegistry".into()),
    ]
    .map(|message| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(message),
    });
    let mut responses = reflection
        .server_reflection_info(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let listed = responses
        .message()
        .await
        .unwrap()
        .unwrap()
        .message_response
        .unwrap();
    let MessageResponse::ListServicesResponse(listed) = listed else {
        panic!("{listed:?}")
    };
    let names: Vec<_> = listed.service.iter().map(|s| s.name.as_str()).collect();
    for expected in ["opreg.v1.OperationRegistry", "grpc.health.v1.Health"] {
        assert!(names.contains(&expected), "{names:?}");
    }
    let file = responses
        .message()
        .await
        .unwrap()
        .unwrap()
        .message_response
        .unwrap();
    let MessageResponse::FileDescriptorResponse(file) = file else {
        panic!("{file:?}")
    };
    assert!(!file.file_descriptor_proto.is_empty());
}
