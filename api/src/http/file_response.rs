//! A file's bytes as an HTTP answer, streamed from the file store, for the API's downloads and
//! the console's file links alike: `Content-Length`, `ETag` (the MD5) with `If-None-Match`
//! (304), and one byte range with `Range` (206 with `Content-Range`; 416 for a range past the
//! end). Several ranges in one request are answered with the whole file, which HTTP allows.
//!
//! A file in an S3-compatible store is answered, after the `If-None-Match` and range checks, with a 307
//! to a presigned URL of its object (unless `FILES_S3_REDIRECT=false`): the bytes go from the
//! store to the client, the `Range` header travels with the redirected request, and the URL
//! lives no longer than the link that led to it. One exception: a request made with a key by
//! the official Python client (`User-Agent: replicate-python/…`) is streamed, because its
//! `FileOutput.read()` does not follow redirects (it raises on a 307) and code written for
//! Replicate reads file outputs that way.

use crate::problem::{Problem, ProblemKind};
use axum::{
    body::Body,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use std::time::Duration;

use common::{files::Files, store::FileRecord};

use crate::error::ApiError;

/// What a `Range` header asks of a file of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranged {
    /// The whole file (no header, several ranges, or a header this does not read).
    Whole,
    /// Bytes `start..end` (end exclusive).
    Part(u64, u64),
    /// Nothing of the file: 416.
    Unsatisfiable,
}

/// Reads one `bytes=` range: `a-b`, `a-` or `-n`.
pub fn parse_range(header: Option<&str>, size: u64) -> Ranged {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else { return Ranged::Whole };
    if spec.contains(',') {
        return Ranged::Whole;
    }
    let Some((from, to)) = spec.trim().split_once('-') else { return Ranged::Whole };
    let (from, to) = (from.trim(), to.trim());
    let parsed = match (from.is_empty(), to.is_empty()) {
        (true, false) => to.parse::<u64>().ok().map(|n| (size.saturating_sub(n), size, n == 0)),
        (false, _) => from.parse::<u64>().ok().and_then(|a| {
            let end =
                if to.is_empty() { Some(size) } else { to.parse::<u64>().ok().map(|b| b.saturating_add(1).min(size)) };
            end.map(|end| (a, end, a >= size || a >= end))
        }),
        (true, true) => None,
    };
    match parsed {
        None => Ranged::Whole,
        Some((_, _, true)) => Ranged::Unsatisfiable,
        Some((start, end, false)) => Ranged::Part(start, end),
    }
}

/// How long the presigned URL of a redirected download lives when the request carried a key
/// (or a console session) rather than a signed link.
pub const REDIRECT_VALID_FOR: Duration = Duration::from_secs(900);

/// The answer to a GET of `file`'s bytes with the request's `headers`; a redirect to its
/// store, if any, is valid for `valid_for`.
pub async fn serve(
    files: &Files,
    file: &FileRecord,
    headers: &HeaderMap,
    valid_for: Duration,
) -> Result<Response, ApiError> {
    let size = u64::try_from(file.size).unwrap_or(0);
    let etag = (!file.md5.is_empty()).then(|| format!("\"{}\"", file.md5));
    let mut out = HeaderMap::new();
    let content_type =
        HeaderValue::from_str(&file.content_type).unwrap_or(HeaderValue::from_static("application/octet-stream"));
    out.insert(header::CONTENT_TYPE, content_type);
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=3600"));
    if let Ok(disposition) = HeaderValue::from_str(&format!("inline; filename=\"{}\"", file.name.replace('"', ""))) {
        out.insert(header::CONTENT_DISPOSITION, disposition);
    }
    if let Some(etag) = etag.as_deref().and_then(|e| HeaderValue::from_str(e).ok()) {
        let matches = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()).is_some_and(|v| {
            v.split(',').any(|t| t.trim() == "*" || t.trim().trim_start_matches("W/") == etag.to_str().unwrap_or(""))
        });
        out.insert(header::ETAG, etag);
        if matches {
            return Ok((StatusCode::NOT_MODIFIED, out).into_response());
        }
    }
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let (status, start, end) = match parse_range(range, size) {
        Ranged::Whole => (StatusCode::OK, 0, size),
        Ranged::Part(start, end) => {
            let content_range = format!("bytes {start}-{}/{size}", end - 1);
            out.insert(header::CONTENT_RANGE, HeaderValue::from_str(&content_range).map_err(anyhow::Error::from)?);
            (StatusCode::PARTIAL_CONTENT, start, end)
        }
        Ranged::Unsatisfiable => {
            let detail = format!("The range asked for lies outside the file's {size} bytes.");
            let mut response =
                ApiError::Problem(Problem::new(ProblemKind::RangeNotSatisfiable, detail)).into_response();
            let content_range = HeaderValue::from_str(&format!("bytes */{size}")).map_err(anyhow::Error::from)?;
            response.headers_mut().insert(header::CONTENT_RANGE, content_range);
            return Ok(response);
        }
    };
    if !follows_no_redirects(headers)
        && let Some(url) = files.redirect_for(file, valid_for)
    {
        let mut redirect = HeaderMap::new();
        redirect.insert(header::LOCATION, HeaderValue::from_str(url.as_str()).map_err(anyhow::Error::from)?);
        redirect.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
        if let Some(etag) = out.remove(header::ETAG) {
            redirect.insert(header::ETAG, etag);
        }
        return Ok((StatusCode::TEMPORARY_REDIRECT, redirect).into_response());
    }
    out.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
    let stream = files.read(file, start..end).await?;
    Ok((status, out, Body::from_stream(stream)).into_response())
}

/// Whether the request comes from a client known not to follow redirects with its key: the
/// official Python client's `FileOutput.read()` (httpx, redirects not followed, 3xx raised).
fn follows_no_redirects(headers: &HeaderMap) -> bool {
    let agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    agent.starts_with("replicate-python/") && headers.contains_key(header::AUTHORIZATION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_python_clients_keyed_requests_are_streamed_rather_than_redirected() {
        let headers = |pairs: &[(header::HeaderName, &'static str)]| {
            pairs.iter().map(|(k, v)| (k.clone(), HeaderValue::from_static(v))).collect::<HeaderMap>()
        };
        let python = headers(&[(header::USER_AGENT, "replicate-python/1.0.7"), (header::AUTHORIZATION, "Bearer k")]);
        assert!(follows_no_redirects(&python));
        assert!(!follows_no_redirects(&headers(&[(header::USER_AGENT, "replicate-python/1.0.7")])), "a signed link");
        assert!(!follows_no_redirects(&headers(&[
            (header::USER_AGENT, "curl/8"),
            (header::AUTHORIZATION, "Bearer k")
        ])));
    }

    #[test]
    fn ranges_are_read_as_http_says() {
        assert_eq!(parse_range(None, 10), Ranged::Whole);
        assert_eq!(parse_range(Some("bytes=0-3"), 10), Ranged::Part(0, 4));
        assert_eq!(parse_range(Some("bytes=4-"), 10), Ranged::Part(4, 10));
        assert_eq!(parse_range(Some("bytes=-3"), 10), Ranged::Part(7, 10));
        assert_eq!(parse_range(Some("bytes=5-100"), 10), Ranged::Part(5, 10));
        assert_eq!(parse_range(Some("bytes=10-"), 10), Ranged::Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=-0"), 10), Ranged::Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=5-2"), 10), Ranged::Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=0-1,4-5"), 10), Ranged::Whole);
        assert_eq!(parse_range(Some("items=0-1"), 10), Ranged::Whole);
        assert_eq!(parse_range(Some("bytes=x-1"), 10), Ranged::Whole);
    }
}
