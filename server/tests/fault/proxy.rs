//! A TCP proxy that injects network faults: it cuts every connection at once,
//! blackholes traffic (bytes stop moving, connections stay open, as behind a
//! dead switch), or delays every chunk.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// Where the proxy forwards to.
#[derive(Clone, Debug)]
pub enum Target {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Faults {
    blackhole: bool,
    latency: Duration,
}

pub struct Proxy {
    pub address: SocketAddr,
    faults: watch::Sender<Faults>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    acceptor: AbortHandle,
}

impl Proxy {
    pub async fn start(target: Target) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (faults, watching) = watch::channel(Faults::default());
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let live = Arc::clone(&connections);
        let acceptor = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let _ = client.set_nodelay(true);
                let forwarding = tokio::spawn(forward(client, target.clone(), watching.clone()));
                let mut live = live.lock().unwrap();
                live.retain(|handle| !handle.is_finished());
                live.push(forwarding.abort_handle());
            }
        })
        .abort_handle();
        Self {
            address,
            faults,
            connections,
            acceptor,
        }
    }

    /// Closes every open connection now; new ones are accepted as before.
    pub fn cut(&self) {
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    /// While on, no byte moves in either direction; connections stay open.
    pub fn blackhole(&self, on: bool) {
        self.faults.send_modify(|faults| faults.blackhole = on);
    }

    /// Every chunk waits this long before it is passed on.
    pub fn latency(&self, delay: Duration) {
        self.faults.send_modify(|faults| faults.latency = delay);
    }

    pub fn heal(&self) {
        self.faults.send_replace(Faults::default());
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.cut();
    }
}

async fn forward(client: TcpStream, target: Target, faults: watch::Receiver<Faults>) {
    let (client_read, client_write) = client.into_split();
    match target {
        Target::Unix(path) => {
            let Ok(server) = UnixStream::connect(path).await else {
                return;
            };
            let (server_read, server_write) = server.into_split();
            tokio::join!(
                pipe(client_read, server_write, faults.clone()),
                pipe(server_read, client_write, faults),
            );
        }
        Target::Tcp(address) => {
            let Ok(server) = TcpStream::connect(address).await else {
                return;
            };
            let _ = server.set_nodelay(true);
            let (server_read, server_write) = server.into_split();
            tokio::join!(
                pipe(client_read, server_write, faults.clone()),
                pipe(server_read, client_write, faults),
            );
        }
    }
}

async fn pipe(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut faults: watch::Receiver<Faults>,
) {
    let mut buffer = vec![0; 64 << 10];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        let current = *faults.borrow();
        if current.blackhole && faults.wait_for(|faults| !faults.blackhole).await.is_err() {
            break;
        }
        if !current.latency.is_zero() {
            tokio::time::sleep(current.latency).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
