//! Wiring: the listener, the service and the server, built apart from `main`
//! so tests can start the real server on port 0.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

use crate::config::Config;
use crate::grpc::RegistryService;
use crate::registry::Registry;

/// A bound, not yet serving, opreg server.
#[derive(Debug)]
pub struct Application {
    listener: TcpListener,
    service: RegistryService,
}

impl Application {
    /// Binds `config.listen_addr` (port 0 picks a free port).
    pub async fn build(
        config: &Config,
        pool: PgPool,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let limits = config.request_limits()?;
        let listener = TcpListener::bind(config.listen_addr).await?;
        Ok(Self {
            listener,
            service: RegistryService::new(Registry::new(pool), limits),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves, then stops accepting and waits for
    /// in-flight calls; the caller bounds that wait.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), tonic::transport::Error> {
        tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .add_service(self.service.into_server())
            .serve_with_incoming_shutdown(TcpListenerStream::new(self.listener), shutdown)
            .await
    }
}
