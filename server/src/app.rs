//! Wiring: the listeners, the services and the background tasks, built apart
//! from `main` so tests can start the real server on port 0.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::access::Access;
use crate::access::reload::{self, Loaded, Reloadable};
use crate::access::tls::TlsConfig;
use crate::config::Config;
use crate::console::{self, Console};
use crate::grpc::{AdminService, Gate, RegistryService};
use crate::maintenance;
use crate::monitor::{gauges, health};
use crate::registry::{MaintenanceSettings, Registry};
use crate::store::{self, Sessions, StoreHealth};
use crate::telemetry::grpc_layer::GrpcTelemetryLayer;
use crate::telemetry::{metrics, metrics_http};
use crate::transport::{
    AuthenticateLayer, ConnectionLimits, EdgeLayer, Incoming, MessageLimits, RateLimits,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A bound, not yet serving, opreg server.
#[derive(Debug)]
pub struct Application {
    grpc_listener: TcpListener,
    metrics_listener: TcpListener,
    metrics: PrometheusHandle,
    service: RegistryService,
    admin: AdminService,
    message_limits: MessageLimits,
    max_concurrent_calls: usize,
    connection_limits: ConnectionLimits,
    keepalive_timeout: Duration,
    registry: Registry,
    maintenance: MaintenanceSettings,
    pool: PgPool,
    /// For the connections kept open beside the pool: the maintenance
    /// lease's, the gauges' and the replay notices'.
    session_options: PgConnectOptions,
    gauge_refresh_interval: Duration,
    health_probe_interval: Duration,
    store_health: Arc<StoreHealth>,
    shutdown_delay: Duration,
    access: Access,
    tls: Option<TlsConfig>,
    reloadable: Reloadable,
    hangups: tokio::signal::unix::Signal,
    /// The operator console, unless turned off.
    console: Option<Console>,
}

impl Application {
    /// Binds `config.listeners.listen_addr` and `config.listeners.metrics_addr` (port 0 picks a free port).
    pub async fn build(config: &Config, pool: PgPool) -> Result<Self, BoxError> {
        let limits = config.request_limits()?;
        let metrics = metrics::install(
            config.telemetry.metrics_max_namespaces,
            &config.telemetry.metric_namespaces,
        )?;
        for setting in config.lifecycle.short_retentions() {
            tracing::warn!(
                setting,
                retry_deadline = %humantime::format_duration(config.lifecycle.retry_deadline),
                "retention is shorter than the retry deadline: a key purged while it may still be retried registers again as a new operation"
            );
        }
        let loaded = Loaded::read(
            config.listeners.auth_file.as_deref(),
            config.listeners.tls_files(),
        )?;
        if loaded.access.is_restricted()
            && loaded.tls.is_none()
            && !config.listeners.listen_addr.ip().is_loopback()
        {
            tracing::warn!(
                "API keys travel in plaintext: give OPREG_TLS_CERT and OPREG_TLS_KEY unless a \
                 proxy in front terminates TLS"
            );
        }
        let gate = Gate::new(Arc::new(RateLimits::new(config.limits.rate_limits())));
        let store_health = Arc::new(StoreHealth::default());
        let registry = Registry::new(
            Sessions::new(pool.clone(), &config.database.pool_settings()),
            Arc::clone(&store_health),
            config.lifecycle.retry_caps(),
            config.database.gather_settings(),
            config.database.replay_settings(),
            config.lifecycle.maintenance_settings().retention,
            config.limits.wait_settings(),
        );
        let console = config.console.settings().map(|settings| {
            Console::new(
                registry.clone(),
                loaded.access.clone(),
                settings,
                limits,
                metrics.clone(),
            )
        });
        let session_options = match config.database.session_database()? {
            Some(options) => store::session_options(options),
            None => (*pool.connect_options()).clone(),
        };
        Ok(Self {
            grpc_listener: bind(config.listeners.listen_addr, "gRPC (OPREG_LISTEN_ADDR)").await?,
            metrics_listener: bind(
                config.listeners.metrics_addr,
                "metrics (OPREG_METRICS_ADDR)",
            )
            .await?,
            metrics,
            message_limits: crate::grpc::message_limits(&limits),
            max_concurrent_calls: config.limits.max_concurrent_calls,
            connection_limits: config.listeners.connection_limits(),
            keepalive_timeout: config.listeners.keepalive_timeout,
            service: RegistryService::new(registry.clone(), limits, gate.clone()),
            admin: AdminService::new(registry.clone(), limits, gate),
            registry,
            maintenance: config.lifecycle.maintenance_settings(),
            pool,
            session_options,
            gauge_refresh_interval: config.telemetry.gauge_refresh_interval,
            health_probe_interval: config.database.health_probe_interval,
            store_health,
            shutdown_delay: config.listeners.shutdown_delay,
            access: loaded.access,
            tls: loaded.tls,
            reloadable: loaded.reloadable,
            hangups: reload::hangups()?,
            console,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.grpc_listener.local_addr()
    }

    pub fn metrics_addr(&self) -> std::io::Result<SocketAddr> {
        self.metrics_listener.local_addr()
    }

    /// Serves until `shutdown` resolves. Then health turns NOT_SERVING, and
    /// after `shutdown_delay` the server stops accepting calls and waits for
    /// in-flight ones; the caller bounds that wait.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), BoxError> {
        let (reporter, health_service) = tonic_health::server::health_reporter();
        let health = health::Health::new(reporter).await;
        // The probe takes the requests' path, through any pooler.
        let prober = tokio::spawn(health::probe_forever(
            (*self.pool.connect_options()).clone(),
            health.clone(),
            self.store_health,
            self.health_probe_interval,
        ));
        let _refresher = AbortOnDrop(tokio::spawn(gauges::refresh_forever(
            self.session_options.clone(),
            self.pool.clone(),
            self.gauge_refresh_interval,
        )));
        let _reloader = AbortOnDrop(tokio::spawn(reload::watch_forever(
            self.reloadable,
            self.hangups,
            reload::POLL_INTERVAL,
        )));
        let waiting = self.registry.clone();
        let _follower = AbortOnDrop(tokio::spawn({
            let registry = self.registry.clone();
            let options = self.session_options.clone();
            async move { registry.follow_changes(options).await }
        }));
        let pool = self.pool.clone();
        let holder = maintenance::holder_id();
        let maintainer = AbortOnDrop(tokio::spawn(maintenance::run_forever(
            self.session_options,
            self.registry,
            self.maintenance,
            holder.clone(),
        )));

        let mut console_tasks = Vec::new();
        let console_routes = self.console.map(|console| {
            console_tasks.push(AbortOnDrop(tokio::spawn(console::sample_forever(
                console.clone(),
            ))));
            console_tasks.push(AbortOnDrop(tokio::spawn(console::run_jobs_forever(
                console.clone(),
            ))));
            console::router(console)
        });

        let (stop, stopped) = watch::channel(false);
        let metrics_server = tokio::spawn(metrics_http::serve(
            self.metrics_listener,
            self.metrics,
            health.ready(),
            console_routes,
            wait_for(stopped.clone()),
        ));
        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(opreg_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(opreg_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()?;

        let shutdown = async move {
            shutdown.await;
            // Waiting calls answer now rather than hold up the drain.
            waiting.stop_waiting();
        };
        let draining = drain_after(shutdown, prober, health, self.shutdown_delay, stop);
        let incoming = Incoming::new(self.grpc_listener, self.connection_limits, self.tls);
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(self.keepalive_timeout))
            .layer(GrpcTelemetryLayer)
            .layer(EdgeLayer::new(
                self.message_limits,
                self.max_concurrent_calls,
            ))
            .layer(AuthenticateLayer::new(self.access))
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(self.service.into_server())
            .add_service(self.admin.into_server())
            .serve_with_incoming_shutdown(incoming, draining)
            .await?;
        // Another replica takes the maintenance over at once, not when the
        // lease expires.
        drop(maintainer);
        maintenance::step_down(&pool, &holder).await;
        drop(console_tasks);
        metrics_server.await??;
        Ok(())
    }
}

/// How often idle connections are pinged, so dead peers are found and closed.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// Aborts a background task when dropped, including on an early return.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn bind(address: SocketAddr, purpose: &str) -> Result<TcpListener, BoxError> {
    TcpListener::bind(address)
        .await
        .map_err(|error| format!("cannot listen on {address} for {purpose}: {error}").into())
}

/// Resolves once the drain may start: after `shutdown`, with health reporting
/// NOT_SERVING for `delay` so load balancers stop routing here first.
async fn drain_after(
    shutdown: impl Future<Output = ()>,
    prober: tokio::task::JoinHandle<()>,
    health: health::Health,
    delay: Duration,
    stop: watch::Sender<bool>,
) {
    shutdown.await;
    prober.abort();
    // A probe already running could otherwise report SERVING after this.
    let _ = prober.await;
    health.set(false).await;
    tokio::time::sleep(delay).await;
    let _ = stop.send(true);
}

async fn wait_for(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stopped| *stopped).await;
}
