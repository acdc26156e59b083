//! A TCP proxy a test can cut, to take a server away from a service without stopping the
//! shared server: after [`TcpProxy::stop`] open connections are closed and new ones refused.

use std::{io, net::SocketAddr};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A running proxy to one target.
pub struct TcpProxy {
    addr: SocketAddr,
    stop: CancellationToken,
}

impl TcpProxy {
    /// Proxies a new loopback port to `target` (`host:port`).
    pub async fn start(target: String) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            loop {
                let (mut inbound, _) = tokio::select! {
                    _ = token.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok(conn) => conn,
                        Err(_) => continue,
                    },
                };
                let target = target.clone();
                let token = token.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = token.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                    }
                });
            }
        });
        Ok(Self { addr, stop })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every connection and stops listening.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
