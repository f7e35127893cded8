//! Logging: plain or JSON lines on stderr, filtered by `RUST_LOG`; and, when
//! configured, the same spans exported over OTLP (`traces`).

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use super::traces::{self, Traces};
use crate::config::LogFormat;

/// Installs the global subscriber. Call inside the Tokio runtime; shut the
/// returned [`Traces`] down last, so that buffered spans are sent.
pub fn init(format: LogFormat) -> Traces {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Plain => lines.boxed(),
        LogFormat::Json => lines.json().boxed(),
    };
    let (exported, traces) = traces::layer::<Registry>();
    let mut layers = vec![lines];
    layers.extend(exported);
    tracing_subscriber::registry()
        .with(layers)
        .with(filter)
        .init();
    traces
}
