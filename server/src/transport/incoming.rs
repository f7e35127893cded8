//! Accepted connections, bounded: at most `max_connections` open at once (the
//! rest are closed as they arrive), each closed unless its TLS handshake (when
//! TLS is on) and its HTTP/2 preface complete within the handshake timeout,
//! and accept errors (file descriptors exhausted) logged and backed off
//! instead of spun on. TLS handshakes run in their own tasks, so a slow one
//! never holds up the next accept.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::{Instant, Sleep};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::Stream;
use tokio_util::either::Either;
use tonic::transport::server::Connected;

use crate::access::tls::{TlsConfig, certificate_identities};
use crate::telemetry::metrics;

/// The client connection preface every HTTP/2 connection starts with.
const PREFACE_BYTES: usize = 24;

/// How long accepting pauses after an accept error, e.g. no file descriptors left.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Connections accepted but not yet taken by the server.
const ACCEPTED_QUEUE: usize = 64;

#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub handshake_timeout: Duration,
}

/// Who is at the other end of a connection, as every call on it sees it.
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    pub remote: Option<SocketAddr>,
    /// The URI and DNS names of the client certificate TLS verified; empty
    /// without mutual TLS.
    pub tls_identities: Arc<[String]>,
}

/// The listener as a stream of bounded connections, for `serve_with_incoming`.
/// Dropping it stops accepting and closes the listener.
pub struct Incoming {
    accepted: mpsc::Receiver<io::Result<Bounded>>,
}

impl Incoming {
    pub fn new(listener: TcpListener, limits: ConnectionLimits, tls: Option<TlsConfig>) -> Self {
        let (sender, accepted) = mpsc::channel(ACCEPTED_QUEUE);
        tokio::spawn(accept_forever(listener, limits, tls, sender));
        Self { accepted }
    }
}

impl Stream for Incoming {
    type Item = io::Result<Bounded>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.accepted.poll_recv(cx)
    }
}

async fn accept_forever(
    listener: TcpListener,
    limits: ConnectionLimits,
    tls: Option<TlsConfig>,
    sender: mpsc::Sender<io::Result<Bounded>>,
) {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = sender.closed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "cannot accept a connection; pausing");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            metrics::connection_refused();
            tracing::debug!(%peer, "connection limit reached; closing a new connection");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let deadline = Instant::now() + limits.handshake_timeout;
        let Some(tls) = &tls else {
            let plain = Bounded::new(Either::Left(stream), permit, deadline, peer, Vec::new());
            if sender.send(Ok(plain)).await.is_err() {
                return;
            }
            continue;
        };
        let acceptor = TlsAcceptor::from(tls.current());
        let sender = sender.clone();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout_at(deadline, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    metrics::tls_handshake_failed();
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    metrics::tls_handshake_failed();
                    tracing::debug!(%peer, "no TLS handshake within the handshake timeout");
                    return;
                }
            };
            let identities = client_identities(&stream);
            let secured = Bounded::new(
                Either::Right(Box::new(stream)),
                permit,
                deadline,
                peer,
                identities,
            );
            let _ = sender.send(Ok(secured)).await;
        });
    }
}

/// The names of the verified client certificate, if one was presented.
fn client_identities(stream: &TlsStream<TcpStream>) -> Vec<String> {
    stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(certificate_identities)
        .unwrap_or_default()
}

type Transport = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// A connection that holds one of the open-connection permits while it lives.
pub struct Bounded {
    inner: Transport,
    _permit: OwnedSemaphorePermit,
    /// Runs until the preface has arrived; then `None`.
    handshake: Option<Pin<Box<Sleep>>>,
    preface_read: usize,
    info: ConnectionInfo,
}

impl Bounded {
    fn new(
        inner: Transport,
        permit: OwnedSemaphorePermit,
        handshake_deadline: Instant,
        peer: SocketAddr,
        tls_identities: Vec<String>,
    ) -> Self {
        Self {
            inner,
            _permit: permit,
            handshake: Some(Box::pin(tokio::time::sleep_until(handshake_deadline))),
            preface_read: 0,
            info: ConnectionInfo {
                remote: Some(peer),
                tls_identities: tls_identities.into(),
            },
        }
    }
}

impl AsyncRead for Bounded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(handshake) = self.handshake.as_mut()
            && handshake.as_mut().poll(cx).is_ready()
        {
            metrics::connection_refused();
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no HTTP/2 preface within the handshake timeout",
            )));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.handshake.is_some() {
            self.preface_read += buf.filled().len() - before;
            if self.preface_read >= PREFACE_BYTES {
                self.handshake = None;
            }
        }
        read
    }
}

impl AsyncWrite for Bounded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        chunks: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, chunks)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl Connected for Bounded {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.info.clone()
    }
}
