//! Traces across services: the Rust client sends the caller's W3C trace
//! context, and the server exports its spans over OTLP (when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set) as children of the caller's span, with
//! the store statements under them. The export is received by an OTLP
//! collector this test starts.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use opreg_client::proto as pb;
use opreg_conformance::FaultProxy;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// Collects every span exported to it.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans = request
            .into_inner()
            .resource_spans
            .into_iter()
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans);
        self.0.lock().unwrap().extend(spans);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn start_collector() -> (Collector, std::net::SocketAddr) {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = TraceServiceServer::new(collector.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (collector, addr)
}

#[tokio::test]
async fn the_server_exports_its_spans_under_the_callers_trace() {
    let app = spawn_app().await;
    let (collector, collector_addr) = start_collector().await;
    let listen = format!("127.0.0.1:{}", free_port());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_opreg-server"))
        .env_clear()
        .env("OPREG_DATABASE_URL", database_url(&app.db_options))
        .env("OPREG_LISTEN_ADDR", &listen)
        .env("OPREG_METRICS_ADDR", "127.0.0.1:0")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://{collector_addr}"),
        )
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut client = None;
    for _ in 0..100 {
        if let Ok(connected) =
            opreg_client::OperationRegistryClient::connect(format!("http://{listen}")).await
        {
            client = Some(connected);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut client = client.expect("the server came up");
    client
        .claim(traced(claim_request(
            "traces",
            "k",
            "caller",
            serde_json::json!({"amount": 1}),
        )))
        .await
        .unwrap();
    client
        .lookup(traced(pb::LookupRequest {
            namespace: "traces".into(),
            operation_key: "k".into(),
            include_executions: true,
            ..Default::default()
        }))
        .await
        .unwrap();
    // SIGTERM: the server drains, then sends the spans it still buffers.
    let pid = i32::try_from(child.id().unwrap()).unwrap();
    terminate(pid);
    tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();

    let spans = collector.0.lock().unwrap().clone();
    let ours: Vec<&Span> = spans
        .iter()
        .filter(|s| hex(&s.trace_id) == TRACE_ID)
        .collect();
    let named = |name: &str| ours.iter().copied().find(|s| s.name == name);
    let lookup = named("opreg.v1.OperationRegistry/Lookup")
        .unwrap_or_else(|| panic!("no Lookup span in {:?}", names(&spans)));
    let claim = named("opreg.v1.OperationRegistry/Claim")
        .unwrap_or_else(|| panic!("no Claim span in {:?}", names(&spans)));
    for rpc in [lookup, claim] {
        assert_eq!(
            hex(&rpc.parent_span_id),
            CALLER_SPAN,
            "{} is not the caller's child",
            rpc.name
        );
    }
    // The store statements run inside the handler's span, under the RPC's.
    let under_lookup = |span: &Span| {
        let mut parent = span.parent_span_id.clone();
        while let Some(up) = ours.iter().find(|s| s.span_id == parent) {
            if up.span_id == lookup.span_id {
                return true;
            }
            parent = up.parent_span_id.clone();
        }
        false
    };
    let statements: Vec<&str> = ours
        .iter()
        .filter(|s| s.name.starts_with("store.") && under_lookup(s))
        .map(|s| s.name.as_str())
        .collect();
    assert!(
        statements.contains(&"store.operations.find"),
        "{statements:?}"
    );
    assert!(
        !statements.is_empty(),
        "no store span under Lookup in {:?}",
        names(&spans)
    );
}

#[tokio::test]
async fn the_client_sends_the_trace_of_the_current_span() {
    let app = spawn_app().await;
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _installed = tracing::subscriber::set_default(subscriber);

    let log = std::env::temp_dir().join(format!("opreg-traces-{}.log", rand::random::<u32>()));
    let proxy = FaultProxy::start(&app.endpoint, Vec::new(), &log)
        .await
        .unwrap();
    let client = opreg_client::Client::connect(format!("http://{}", proxy.addr()))
        .await
        .unwrap();
    let span = tracing::info_span!("settle a window");
    let trace_id = span.context().span().span_context().trace_id().to_string();
    client
        .claim(claim_request(
            "traces",
            "sent",
            "caller",
            serde_json::json!({"amount": 1}),
        ))
        .instrument(span)
        .await
        .unwrap();
    let untraced = client
        .claim(claim_request(
            "traces",
            "untraced",
            "caller",
            serde_json::json!({"amount": 1}),
        ))
        .await;
    assert!(untraced.is_ok());
    let lines = proxy.finish().await;
    let _ = std::fs::remove_file(&log);
    let sent: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("# Claim traceparent="))
        .collect();
    assert_eq!(
        sent.len(),
        1,
        "exactly the traced call carries a traceparent: {lines:?}"
    );
    assert!(
        sent[0].starts_with(&format!("# Claim traceparent=00-{trace_id}-")),
        "{lines:?}"
    );
}

/// `message` as a call from the caller's span.
fn traced<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let parent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    request
        .metadata_mut()
        .insert("traceparent", parent.parse().unwrap());
    request
}

fn terminate(pid: i32) {
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn names(spans: &[Span]) -> Vec<String> {
    spans
        .iter()
        .map(|s| format!("{} ({})", s.name, hex(&s.trace_id)))
        .collect()
}
