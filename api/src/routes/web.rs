//! `GET /predictions/{id}` (scope `read`): the prediction's `urls.web`, an HTML page for
//! people — status, timings, input, output (a link for files), logs and error. It needs the
//! same bearer key as the API, since predictions are private to their account. While the
//! prediction runs the page refreshes itself every 2 seconds. Every value is HTML-escaped.

use axum::{
    extract::{Path, State},
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use common::domain::{ApiSurface, PredictionView};

use super::predictions::owned_prediction;
use crate::{
    auth::{Authorized, Read},
    error::ApiError,
    state::AppState,
};

/// `text` with the HTML special characters escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The page of one prediction.
pub fn page(p: &PredictionView, files_base: &str) -> String {
    let e = escape;
    let time = |t: Option<chrono::DateTime<chrono::Utc>>| t.map_or("—".to_owned(), |t| t.to_rfc3339());
    let refresh = if p.status.is_terminal() { "" } else { r#"<meta http-equiv="refresh" content="2">"# };
    let output = match &p.output {
        None => "—".to_owned(),
        Some(o) if o.starts_with(files_base) => format!(r#"<a href="{0}">{0}</a>"#, e(o)),
        Some(o) => format!("<pre>{}</pre>", e(o)),
    };
    let error =
        p.error.as_ref().map_or(String::new(), |err| format!("<tr><th>error</th><td>{}</td></tr>", e(err.message())));
    let metrics =
        p.metrics.map_or("—".to_owned(), |m| format!("predict {:.3} s, total {:.3} s", m.predict_time, m.total_time));
    let input = serde_json::to_string_pretty(&p.input).unwrap_or_default();
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">{refresh}<title>Prediction {id}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2rem;max-width:60rem}}th{{text-align:left;padding-right:1rem;vertical-align:top}}pre{{background:#f4f4f4;padding:.5rem;white-space:pre-wrap}}</style>
</head><body>
<h1>Prediction {id}</h1>
<table>
<tr><th>model</th><td>{model}</td></tr>
<tr><th>status</th><td>{status}</td></tr>
<tr><th>created</th><td>{created}</td></tr>
<tr><th>started</th><td>{started}</td></tr>
<tr><th>completed</th><td>{completed}</td></tr>
<tr><th>metrics</th><td>{metrics}</td></tr>
{error}
</table>
<h2>Input</h2><pre>{input}</pre>
<h2>Output</h2>{output}
<h2>Logs</h2><pre>{logs}</pre>
</body></html>
"#,
        id = e(&p.id),
        model = e(&p.model),
        status = e(p.status.as_str()),
        created = e(&p.created_at.to_rfc3339()),
        started = e(&time(p.started_at)),
        completed = e(&time(p.completed_at)),
        input = e(&input),
        logs = e(&p.logs),
    )
}

/// `GET /predictions/{id}`
pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<Read>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let prediction = owned_prediction(&state, &auth.caller, &id).await?;
    let html = page(
        &prediction.view(&state.links, ApiSurface::Canonical),
        &format!("{}/files/", state.links.api(ApiSurface::Canonical)),
    );
    let mut response = html.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_values_is_escaped() {
        assert_eq!(
            escape(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
    }
}
