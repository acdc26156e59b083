//! The runner's receiver of Cog webhooks: `POST /cog/{token}`. Each running Cog prediction
//! registers an unguessable token and receives the snapshots posted to it through a channel.
//! The same server receives Cog servers' output files (`PUT /upload/{name}`, see
//! [`super::uploads`]). It listens on `RUNNER_COG_CALLBACK_BIND` and is announced to Cog
//! servers as `RUNNER_COG_CALLBACK_URL` (the address they can reach; start a Cog server with
//! `--upload-url {that URL}/upload/` to have its files streamed to the file store).

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::{DefaultBodyLimit, Path, State},
    http::StatusCode,
    routing::{post, put},
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::uploads::Uploads;

/// The largest snapshot a Cog server may post: a terminal one carries a file output (or a
/// trainer's weights) whole, as a `data:` URI. Past it the server is answered 413, retries,
/// and the run ends at its deadline. (axum's own default, 2 MB, failed any training whose
/// weights passed about 1.5 MB.)
pub const MAX_SNAPSHOT_BYTES: usize = 1024 * 1024 * 1024;

/// The registered runs.
pub struct Callbacks {
    public_url: String,
    waiting: Mutex<HashMap<String, mpsc::UnboundedSender<Value>>>,
    /// Where Cog servers' output files go, and the runs that may send them.
    pub uploads: Arc<Uploads>,
}

/// Removes a run's token when the run ends.
pub struct Registration {
    callbacks: Arc<Callbacks>,
    token: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.callbacks.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.token);
    }
}

impl Callbacks {
    /// Starts the receiver on `bind`; `public_url` overrides the address announced to Cog
    /// servers (default: the bound address).
    pub async fn serve(
        bind: SocketAddr,
        public_url: Option<String>,
        uploads: Arc<Uploads>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Arc<Self>> {
        let listener = tokio::net::TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let public_url = public_url.unwrap_or_else(|| format!("http://{addr}")).trim_end_matches('/').to_owned();
        let callbacks = Arc::new(Self { public_url, waiting: Mutex::new(HashMap::new()), uploads: uploads.clone() });
        // An upload's bound is the file store's write (RUNNER_MAX_OUTPUT_FILE_BYTES), streamed.
        let files = Router::new()
            .route("/upload/{name}", put(super::uploads::receive))
            .layer(DefaultBodyLimit::disable())
            .with_state(uploads);
        let app = Router::new()
            .route("/cog/{token}", post(receive))
            .layer(DefaultBodyLimit::max(MAX_SNAPSHOT_BYTES))
            .with_state(callbacks.clone())
            .merge(files);
        tokio::spawn(async move {
            let served = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
            if let Err(e) = served {
                tracing::error!(error = %e, "Cog callback server failed");
            }
        });
        tracing::info!(%addr, "Cog callback server listening");
        Ok(callbacks)
    }

    /// The URL Cog servers reach this receiver at.
    pub fn public_url(&self) -> &str {
        &self.public_url
    }

    /// Registers a run: its webhook URL (whose last segment is also its Cog prediction id),
    /// the channel of its snapshots, and the registration that unregisters it on drop.
    pub fn register(self: &Arc<Self>) -> (String, mpsc::UnboundedReceiver<Value>, Registration) {
        let token = format!("ps{}", common::domain::PredictionId::generate());
        let (tx, rx) = mpsc::unbounded_channel();
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).insert(token.clone(), tx);
        let url = format!("{}/cog/{token}", self.public_url);
        (url, rx, Registration { callbacks: self.clone(), token })
    }
}

async fn receive(
    State(callbacks): State<Arc<Callbacks>>,
    Path(token): Path<String>,
    Json(snapshot): Json<Value>,
) -> StatusCode {
    let sender = callbacks.waiting.lock().unwrap_or_else(|p| p.into_inner()).get(&token).cloned();
    match sender {
        Some(tx) => {
            let _ = tx.send(snapshot);
            StatusCode::OK
        }
        // A late or stale webhook: the run has ended. 200 stops Cog from retrying it.
        None => StatusCode::OK,
    }
}
