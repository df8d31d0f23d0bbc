//! Leader election under a stalled API connection: the leader that cannot renew
//! stops before another replica may take over.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::stall_proxy::StallProxy;

/// The proxy itself (no cluster needed): bytes pass, are held while stalled without
/// the connection closing, and arrive after `resume()`.
#[tokio::test]
async fn the_stall_proxy_holds_bytes_until_resumed() {
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = echo.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut conn, _) = echo.accept().await.unwrap();
        let mut buf = [0u8; 64];
        loop {
            let n = conn.read(&mut buf).await.unwrap();
            if n == 0 {
                return;
            }
            conn.write_all(&buf[..n]).await.unwrap();
        }
    });
    let proxy = StallProxy::start(upstream).await;
    let mut conn = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let mut buf = [0u8; 5];
    conn.write_all(b"hello").await.unwrap();
    conn.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"hello");

    proxy.stall();
    conn.write_all(b"again").await.unwrap();
    let held = tokio::time::timeout(Duration::from_millis(500), conn.read(&mut buf)).await;
    assert!(held.is_err(), "nothing comes back while stalled: {held:?}");

    proxy.resume();
    conn.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"again", "held bytes arrive after resume");
    assert_eq!(proxy.accepted(), 1);
}
