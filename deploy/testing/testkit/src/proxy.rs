//! A TCP proxy a test can cut, to take a server away from a service without stopping the
//! shared server: after [`TcpProxy::stop`] open connections are closed and new ones refused;
//! after [`TcpProxy::cut`] the same happens until [`TcpProxy::restore`], on the same address
//! (a server that restarts). After [`TcpProxy::stall`] connections stay open and new ones are
//! taken, but no byte passes either way until [`TcpProxy::resume`] (a server that hangs: a
//! paused process, a long election, `failCommand` with `blockConnection`).

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
    /// Whether bytes are held (true) or pass (false).
    stalled: tokio::sync::watch::Sender<bool>,
}

impl TcpProxy {
    /// Proxies a new loopback port to `target` (`host:port`).
    pub async fn start(target: String) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let down = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(stop.child_token()));
        let (stalled, _) = tokio::sync::watch::channel(false);
        let (token, refusing, current, stall) = (stop.clone(), down.clone(), open.clone(), stalled.clone());
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
                let (up, down) = (stall.subscribe(), stall.subscribe());
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    let (mut in_read, mut in_write) = inbound.split();
                    let (mut out_read, mut out_write) = outbound.into_split();
                    tokio::select! {
                        _ = closed.cancelled() => {}
                        _ = pump(&mut in_read, &mut out_write, up) => {}
                        _ = pump(&mut out_read, &mut in_write, down) => {}
                    }
                });
            }
        });
        Ok(Self { addr, stop, down, open, stalled })
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

    /// Holds every byte, both ways, on open connections and new ones, until [`Self::resume`].
    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    /// Lets bytes pass again after a [`Self::stall`], the held ones first.
    pub fn resume(&self) {
        self.stalled.send_replace(false);
    }

    /// Closes every connection and stops listening.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

/// Copies `from` to `to` until either ends, holding each piece read while `stalled` says so.
async fn pump(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    to: &mut (impl tokio::io::AsyncWrite + Unpin),
    mut stalled: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stalled.wait_for(|stalled| !stalled).await.is_err() {
            return;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
