//! The health probe: one task per replica checks the database every probe
//! interval on a connection of its own (so a busy pool cannot make a healthy
//! replica look down), and sets the gRPC health status, `opreg_store_up`, and
//! the flag that makes calls fail fast while the store is down. The same
//! status is readable over plain HTTP on the metrics port (`/readyz`), for
//! probes that cannot speak gRPC over TLS, such as Kubernetes'.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use tokio::sync::watch;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::store::{self, Dedicated, StoreHealth};
use crate::telemetry::metrics;

/// Service names whose health follows the database: the server ("") and the registry.
pub const HEALTH_SERVICES: [&str; 3] =
    ["", "opreg.v1.OperationRegistry", "opreg.v1.OperationAdmin"];

/// A health entry that is SERVING while the process runs, whatever the
/// database does: for liveness probes, which must not restart every replica
/// during a database outage.
pub const LIVENESS_SERVICE: &str = "liveness";

/// The replica's serving status, as gRPC health reports it and as `/readyz` does.
#[derive(Clone, Debug)]
pub struct Health {
    reporter: HealthReporter,
    ready: Arc<watch::Sender<bool>>,
}

impl Health {
    /// Starts NOT_SERVING, with the liveness entry SERVING.
    pub async fn new(reporter: HealthReporter) -> Self {
        let health = Self {
            reporter,
            ready: Arc::new(watch::Sender::new(false)),
        };
        health.set(false).await;
        health
            .reporter
            .set_service_status(LIVENESS_SERVICE, ServingStatus::Serving)
            .await;
        health
    }

    pub async fn set(&self, serving: bool) {
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for service in HEALTH_SERVICES {
            self.reporter.set_service_status(service, status).await;
        }
        self.ready.send_replace(serving);
    }

    /// Follows the status, for `/readyz`.
    pub fn ready(&self) -> watch::Receiver<bool> {
        self.ready.subscribe()
    }
}

/// Probes every `interval` until the task is aborted. One probe (connecting
/// included) may take at most the interval, so an outage shows within two.
pub async fn probe_forever(
    options: PgConnectOptions,
    health: Health,
    store_health: Arc<StoreHealth>,
    interval: Duration,
) {
    let mut connection = Dedicated::new(options);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut was_up = true;
    loop {
        ticker.tick().await;
        let up = match connection.get(interval).await {
            Some(open) => store::probe(open, interval).await,
            None => false,
        };
        if !up {
            connection.reset();
        }
        if up != was_up {
            if up {
                tracing::info!("the database answers again; serving");
            } else {
                tracing::warn!("the database does not answer; refusing calls as UNAVAILABLE");
            }
            was_up = up;
        }
        store_health.set(up);
        metrics::store_up(up);
        health.set(up).await;
    }
}
