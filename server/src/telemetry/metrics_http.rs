//! The plain-HTTP port beside gRPC: `GET /metrics` in the Prometheus text
//! format, and `GET /readyz` and `GET /livez` for probes that cannot speak
//! gRPC over TLS (Kubernetes' gRPC probe has no TLS). `/readyz` answers 200
//! while the replica serves (the gRPC health status of the registry) and 503
//! otherwise; `/livez` answers 200 while the process runs. The operator
//! console, when it is on, is served beside them under `/console/`.

use std::future::Future;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub async fn serve(
    listener: TcpListener,
    handle: PrometheusHandle,
    ready: watch::Receiver<bool>,
    console: Option<Router>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let body = handle.render();
                async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body) }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let serving = *ready.borrow();
                async move {
                    if serving {
                        (StatusCode::OK, "serving\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not serving\n")
                    }
                }
            }),
        )
        .route("/livez", get(|| async { "alive\n" }))
        .merge(console.unwrap_or_default());
    // The console needs the peer's address: without a policy it answers loopback only.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
