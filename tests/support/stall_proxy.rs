//! A loopback TCP proxy that can stall: it forwards bytes both ways between its
//! clients and one upstream address until `stall()`, then holds everything it reads
//! without closing any connection — what a process sees when the network path to its
//! API server silently stops delivering (no RST, no FIN, requests simply never
//! answered). `resume()` forwards what was held and carries on. Shared by the cluster
//! tests (leader election, chaos).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The proxy; every connection it holds is closed when it is dropped.
pub struct StallProxy {
    pub addr: SocketAddr,
    stalled: watch::Sender<bool>,
    accepted: Arc<AtomicU64>,
    stop: CancellationToken,
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl StallProxy {
    /// Listens on an ephemeral loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> StallProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stalled, _) = watch::channel(false);
        let accepted = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let (gate, count, token) = (stalled.subscribe(), accepted.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let client = tokio::select! {
                    _ = token.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok((client, _)) => client,
                        Err(_) => continue,
                    },
                };
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(connect(client, upstream, gate.clone(), token.clone()));
            }
        });
        StallProxy {
            addr,
            stalled,
            accepted,
            stop,
        }
    }

    /// Stops forwarding in both directions; connections stay open, new ones are
    /// accepted but get nothing through. Bytes read after this returns are held.
    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    /// Forwards again, held bytes first.
    pub fn resume(&self) {
        self.stalled.send_replace(false);
    }

    /// Client connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// One client connection: open the upstream one and pump both directions until
/// either side closes or the proxy is dropped.
async fn connect(
    client: TcpStream,
    upstream: SocketAddr,
    stalled: watch::Receiver<bool>,
    stop: CancellationToken,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return; // the client sees its connection closed, as with a refused upstream
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = pump(client_read, server_write, stalled.clone()) => {}
        _ = pump(server_read, client_write, stalled) => {}
    }
}

/// Copies `from` to `to`, waiting while stalled both before reading (so nothing more
/// is taken off the socket) and before writing (so what was read when the stall began
/// is held, not delivered).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut stalled: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if stalled.wait_for(|s| !*s).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stalled.wait_for(|s| !*s).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
