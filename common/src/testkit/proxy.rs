//! A TCP proxy a test can cut, to take a server away from a service without stopping the
//! shared server: after [`TcpProxy::stop`] open connections are closed and new ones refused;
//! after [`TcpProxy::cut`] the same happens until [`TcpProxy::restore`], on the same address
//! (a server that restarts).

use std::{
    io,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A running proxy to one target.
pub struct TcpProxy {
    addr: SocketAddr,
    stop: CancellationToken,
    /// Whether connections are refused for now.
    down: Arc<AtomicBool>,
    /// Closes the connections open now (a child of `stop`, replaced at each cut).
    open: Arc<Mutex<CancellationToken>>,
}

impl TcpProxy {
    /// Proxies a new loopback port to `target` (`host:port`).
    pub async fn start(target: String) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let down = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(stop.child_token()));
        let (token, refusing, current) = (stop.clone(), down.clone(), open.clone());
        tokio::spawn(async move {
            loop {
                let (mut inbound, _) = tokio::select! {
                    _ = token.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok(conn) => conn,
                        Err(_) => continue,
                    },
                };
                if refusing.load(Ordering::SeqCst) {
                    continue;
                }
                let target = target.clone();
                let closed = current.lock().expect("lock").clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = closed.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                    }
                });
            }
        });
        Ok(Self { addr, stop, down, open })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every connection and refuses new ones until [`Self::restore`].
    pub fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        let mut open = self.open.lock().expect("lock");
        open.cancel();
        *open = self.stop.child_token();
    }

    /// Takes connections again after a [`Self::cut`].
    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
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
