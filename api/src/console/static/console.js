// Live updates of a running prediction's page, from its SSE stream (the stream URL carries
// the token that opens it). Output text and log lines are appended as they arrive; the
// status follows; when the stream says "done" the page reloads once to show the final state
// (images, timings, deliveries). While the prediction waits in the queue, the page reads
// itself again every 2 s and shows its new position and estimate, until it starts. No
// framework, no inline script.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const queue = document.getElementById("queue");
  if (!queue || !window.fetch || !window.DOMParser) return;
  const follow = () => {
    fetch(window.location.href, { credentials: "same-origin" })
      .then((r) => r.text())
      .then((html) => {
        const next = new DOMParser().parseFromString(html, "text/html").getElementById("queue");
        if (next) {
          queue.innerHTML = next.innerHTML;
          window.setTimeout(follow, 2000);
        } else {
          queue.remove();
        }
      })
      .catch(() => window.setTimeout(follow, 5000));
  };
  window.setTimeout(follow, 2000);
});

document.addEventListener("DOMContentLoaded", () => {
  const article = document.getElementById("prediction");
  if (!article || article.dataset.running !== "true" || !window.EventSource) return;
  const status = document.getElementById("status");
  const logs = document.getElementById("logs");
  const output = document.getElementById("output");
  const setStatus = (value) => {
    status.textContent = value;
    status.className = "badge " + value;
  };
  const appendOutput = (text) => {
    let pre = output.querySelector("pre.text-output");
    if (!pre) {
      output.textContent = "";
      pre = document.createElement("pre");
      pre.className = "text-output";
      output.appendChild(pre);
    }
    pre.textContent += text;
  };
  const source = new EventSource(article.dataset.stream);
  source.addEventListener("output", (e) => {
    setStatus("processing");
    appendOutput(e.data);
  });
  source.addEventListener("logs", (e) => {
    setStatus("processing");
    logs.textContent += e.data;
  });
  source.addEventListener("error", (e) => {
    if (e.data) setStatus("failed");
  });
  source.addEventListener("done", (e) => {
    let reason = "";
    try { reason = JSON.parse(e.data).reason || ""; } catch (_) { /* {} */ }
    setStatus(reason === "canceled" ? "canceled" : reason === "error" ? "failed" : "succeeded");
    source.close();
    window.setTimeout(() => window.location.reload(), 300);
  });
});
