//! The load tool's HTTP/1.1 client for closed loops. Each simulated client owns one keep-alive
//! connection (hyper's connection API: no pool, no URL parsing, no redirect or timeout layers)
//! and sends a request whose parts were built once, so the tool takes as little of the shared
//! cores as it can from the system it measures. reqwest spent ~45 µs of CPU per create at 128
//! clients, half a core at 11,000 creates/s on this 2-core machine. [`closed_loop`] drives
//! such clients back to back for a while.

use std::{net::SocketAddr, time::Duration};

use anyhow::Context;
use bytes::Bytes;
use futures::future::try_join_all;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::{net::TcpStream, time::Instant};

use crate::{processes::own_usage, stats::Samples};

/// A request to send again and again: method, path and query, headers and body.
#[derive(Clone, Debug)]
pub struct Template {
    method: Method,
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Template {
    /// `method` on `path` (with its query) at `base` (`http://host:port`), with a bearer key.
    pub fn new(method: Method, base: &str, path: &str, key: &str) -> anyhow::Result<Self> {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(authority(base)?)?);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {key}"))?);
        Ok(Self { method, path: path.to_owned(), headers, body: Bytes::new() })
    }

    /// The same request with a JSON body.
    pub fn json(mut self, body: &'static str) -> Self {
        self.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        self.body = Bytes::from_static(body.as_bytes());
        self
    }

    /// The same request with one more header.
    pub fn header(mut self, name: &'static str, value: &str) -> anyhow::Result<Self> {
        self.headers.insert(name, HeaderValue::from_str(value)?);
        Ok(self)
    }

    fn request(&self) -> anyhow::Result<Request<Full<Bytes>>> {
        let mut request =
            Request::builder().method(self.method.clone()).uri(&self.path).body(Full::new(self.body.clone()))?;
        *request.headers_mut() = self.headers.clone();
        Ok(request)
    }
}

/// One client's connection.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
}

impl Connection {
    /// Connects to `base` (`http://host:port`).
    pub async fn open(base: &str) -> anyhow::Result<Self> {
        let address: SocketAddr = authority(base)?.parse().with_context(|| format!("{base} is not http://ip:port"))?;
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        // The connection task ends when the sender is dropped or the server closes it.
        tokio::spawn(connection);
        Ok(Self { sender })
    }

    /// Sends `template` and reads the whole answer.
    pub async fn send(&mut self, template: &Template) -> anyhow::Result<(StatusCode, Bytes)> {
        self.sender.ready().await.context("the connection closed")?;
        let response = self.sender.send_request(template.request()?).await?;
        let status = response.status();
        Ok((status, response.into_body().collect().await?.to_bytes()))
    }
}

/// `host:port` of `http://host:port`.
fn authority(base: &str) -> anyhow::Result<&str> {
    base.strip_prefix("http://")
        .map(|a| a.trim_end_matches('/'))
        .with_context(|| format!("{base} is not http://host:port"))
}

/// The body of every demo/echo create.
pub const CREATE_BODY: &str = r#"{"input":{"prompt":"bench","repeat":2}}"#;

/// Requests per second, latencies and the load tool's CPU per request of `template` sent by
/// `clients` clients, each on its own connection, in a loop for `seconds`; each answer must
/// have status `expect`. Requests in flight at the end are finished and counted.
pub async fn closed_loop(
    seconds: u64,
    clients: usize,
    base: &str,
    template: &Template,
    expect: u16,
) -> anyhow::Result<(f64, Samples, f64)> {
    let connections = try_join_all((0..clients).map(|_| Connection::open(base))).await?;
    let cpu_before = own_usage()?.cpu_seconds;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let client = |mut connection: Connection| async move {
        let mut samples = Vec::new();
        while Instant::now() < deadline {
            let sent = Instant::now();
            let (status, _) = connection.send(template).await?;
            anyhow::ensure!(status.as_u16() == expect, "answered {status}");
            samples.push(sent.elapsed());
        }
        anyhow::Ok(samples)
    };
    let samples: Vec<Duration> =
        try_join_all(connections.into_iter().map(client)).await?.into_iter().flatten().collect();
    let per_second = samples.len() as f64 / started.elapsed().as_secs_f64();
    let cpu_us = (own_usage()?.cpu_seconds - cpu_before) * 1e6 / samples.len().max(1) as f64;
    Ok((per_second, Samples::new(samples), cpu_us))
}

#[cfg(test)]
mod tests {
    use axum::{Router, http::HeaderMap as Headers, routing::post};

    use super::*;

    #[test]
    fn the_authority_is_the_part_after_the_scheme() {
        assert_eq!(authority("http://127.0.0.1:8080").expect("http"), "127.0.0.1:8080");
        assert!(authority("https://example.com").is_err());
    }

    #[tokio::test]
    async fn a_template_is_sent_repeatedly_on_one_connection() {
        let app = Router::new().route(
            "/echo",
            post(|headers: Headers, body: Bytes| async move {
                let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                format!("{auth} {}", String::from_utf8_lossy(&body))
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        let template = Template::new(Method::POST, &base, "/echo", "k1").expect("template").json(r#"{"a":1}"#);
        let mut connection = Connection::open(&base).await.expect("connects");
        for _ in 0..3 {
            let (status, body) = connection.send(&template).await.expect("answered");
            assert_eq!(status, StatusCode::OK);
            assert_eq!(body, Bytes::from_static(br#"Bearer k1 {"a":1}"#));
        }
    }
}
