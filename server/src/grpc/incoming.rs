//! Accepted connections, bounded: at most `max_connections` open at once (the
//! rest are closed as they arrive), each closed unless its HTTP/2 preface
//! arrives within the handshake timeout, and accept errors (file descriptors
//! exhausted) logged and backed off instead of spun on.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::telemetry::metrics;

/// The client connection preface every HTTP/2 connection starts with.
const PREFACE_BYTES: usize = 24;

/// How long accepting pauses after an accept error, e.g. no file descriptors left.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub handshake_timeout: Duration,
}

/// The listener as a stream of bounded connections, for `serve_with_incoming`.
pub struct Incoming {
    listener: TcpListener,
    open: Arc<Semaphore>,
    handshake_timeout: Duration,
    paused: Option<Pin<Box<Sleep>>>,
}

impl Incoming {
    pub fn new(listener: TcpListener, limits: ConnectionLimits) -> Self {
        Self {
            listener,
            open: Arc::new(Semaphore::new(limits.max_connections)),
            handshake_timeout: limits.handshake_timeout,
            paused: None,
        }
    }
}

impl Stream for Incoming {
    type Item = io::Result<Bounded>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(pause) = self.paused.as_mut() {
                if pause.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.paused = None;
            }
            let (stream, peer) = match self.listener.poll_accept(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(accepted)) => accepted,
                Poll::Ready(Err(error)) => {
                    tracing::warn!(%error, "cannot accept a connection; pausing");
                    self.paused = Some(Box::pin(tokio::time::sleep(ACCEPT_BACKOFF)));
                    continue;
                }
            };
            let Ok(permit) = Arc::clone(&self.open).try_acquire_owned() else {
                metrics::connection_refused();
                tracing::debug!(%peer, "connection limit reached; closing a new connection");
                continue;
            };
            let _ = stream.set_nodelay(true);
            return Poll::Ready(Some(Ok(Bounded {
                inner: stream,
                _permit: permit,
                handshake: Some(Box::pin(tokio::time::sleep(self.handshake_timeout))),
                preface_read: 0,
            })));
        }
    }
}

/// A connection that holds one of the open-connection permits while it lives.
pub struct Bounded {
    inner: TcpStream,
    _permit: OwnedSemaphorePermit,
    /// Runs until the preface has arrived; then `None`.
    handshake: Option<Pin<Box<Sleep>>>,
    preface_read: usize,
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
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
