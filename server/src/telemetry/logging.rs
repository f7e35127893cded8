//! Logging: plain or JSON lines on stderr, filtered by `RUST_LOG`; and, when
//! configured, the same spans exported over OTLP (`traces`).

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use super::traces::{self, Traces};
use crate::config::LogFormat;

/// Installs the global subscriber. Call inside the Tokio runtime; shut the
/// returned [`Traces`] down last, so that buffered spans are sent.
///
/// Each layer filters for itself. The lines follow `RUST_LOG` (default
/// `info`): the RPC span (trace id, method) is at INFO, so a line inside a
/// call says which call it came from. The handler and store spans are at
/// DEBUG: they are created only when something wants them (spans exported
/// over OTLP, or `RUST_LOG=debug`), so a server that exports nothing does not
/// pay for them on every call.
pub fn init(format: LogFormat) -> Traces {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Plain => lines.with_filter(filter).boxed(),
        LogFormat::Json => lines.json().with_filter(filter).boxed(),
    };
    let (exported, traces) = traces::layer::<Registry>();
    let mut layers = vec![lines];
    layers.extend(exported.map(|exported| {
        let spans = Targets::new()
            .with_default(LevelFilter::INFO)
            .with_target(env!("CARGO_CRATE_NAME"), LevelFilter::DEBUG);
        exported.with_filter(spans).boxed()
    }));
    tracing_subscriber::registry().with(layers).init();
    traces
}
