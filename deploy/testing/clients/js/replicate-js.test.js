// The official Replicate JavaScript client (pinned in package-lock.json) against a live local
// system, with only the base URL changed: new Replicate({ baseUrl: `${BASE}/replicate/v1` }).
// Run by deploy/local/client-tests, which starts the system and sets BASE_URL and ADMIN_KEY.

const test = require("node:test");
const assert = require("node:assert/strict");
const http = require("node:http");
const Replicate = require("replicate");
const { validateWebhook } = require("replicate");

const BASE_URL = process.env.BASE_URL;
const ROOT = `${BASE_URL}/replicate/v1`;
const replicate = new Replicate({ auth: process.env.ADMIN_KEY, baseUrl: ROOT });

test("run returns text output", async () => {
  assert.equal(await replicate.run("demo/echo", { input: { prompt: "hello", repeat: 2 } }), "hello hello");
});

test("run returns a file URL inside the surface", async () => {
  const output = await replicate.run("demo/text-to-image", { input: { prompt: "a fox", width: 32, height: 32 } });
  assert.ok(String(output).startsWith(`${ROOT}/files/`), String(output));
  const file = await fetch(String(output), { headers: { Authorization: `Bearer ${process.env.ADMIN_KEY}` } });
  assert.equal(file.status, 200);
  assert.equal(file.headers.get("content-type"), "image/png");
  // A signed link: it opens without a key, as a FileOutput's blob() or a browser's <img> fetches it.
  const anonymous = await fetch(String(output));
  assert.equal(anonymous.status, 200);
  assert.equal(Buffer.from(await anonymous.arrayBuffer()).subarray(0, 4).toString("latin1"), "\x89PNG");
});

const fetchBytes = async (url) => {
  const file = await fetch(String(url), { headers: { Authorization: `Bearer ${process.env.ADMIN_KEY}` } });
  assert.equal(file.status, 200, String(url));
  return Buffer.from(await file.arrayBuffer());
};

test("run of a list of files model returns a list of fetchable files", async () => {
  const output = await replicate.run("acme/images", { input: { count: 2, size: 3 } });
  assert.ok(Array.isArray(output) && output.length === 2, JSON.stringify(output));
  for (const url of output) {
    assert.ok(String(url).startsWith(`${ROOT}/files/`), String(url));
    assert.equal((await fetchBytes(url)).subarray(0, 4).toString("latin1"), "\x89PNG");
  }
});

test("run of a token stream model returns its tokens, which join into the text", async () => {
  const output = await replicate.run("acme/tokens", { input: { text: "The quick brown fox jumps over the lazy dog", delay: 0 } });
  assert.ok(Array.isArray(output), JSON.stringify(output));
  assert.equal(output.length, 9);
  assert.equal(output.join(""), "The quick brown fox jumps over the lazy dog");
});

test("stream of a token stream model sends the text, then done", async () => {
  const events = [];
  for await (const event of replicate.stream("acme/tokens", { input: { text: "one two three", delay: 0.1 } })) {
    events.push(event);
  }
  assert.equal(events.filter((e) => e.event === "output").map(String).join(""), "one two three");
  assert.equal(events.at(-1).event, "done");
});

test("run of a stream of files model returns each file", async () => {
  const output = await replicate.run("acme/frames", { input: { count: 3, delay: 0 } });
  const contents = await Promise.all(output.map(async (url) => (await fetchBytes(url)).toString()));
  // Uploaded (coglet's --upload-url), so listed in the order the uploads finished.
  assert.deepEqual(contents.sort(), ["frame 0\n", "frame 1\n", "frame 2\n"]);
});

test("run of an object model returns its fields with the file as a link", async () => {
  const output = await replicate.run("acme/annotate", { input: { prompt: "red fox" } });
  assert.equal(output.caption, "a picture of red fox");
  assert.deepEqual(output.scores, [1, 1]);
  assert.equal((await fetchBytes(output.image)).toString(), "mask of red fox\n");
});

test("run of a model that outlasts its wait keeps polling", async () => {
  const output = await replicate.run("demo/sleep", { input: { seconds: 2.5 }, wait: { mode: "block", timeout: 1 } });
  assert.equal(output, "slept 2.5 s");
});

test("run of a failing model rejects with its message", async () => {
  await assert.rejects(replicate.run("demo/fail", { input: { message: "boom" } }), /Prediction failed: boom/);
});

test("stream yields the output without an Authorization header, then done", async () => {
  const events = [];
  for await (const event of replicate.stream("demo/sleep", { input: { seconds: 1.5 } })) {
    events.push(event);
  }
  assert.equal(events.filter((e) => e.event === "output").map(String).join(""), "slept 1.5 s");
  assert.equal(events.at(-1).event, "done");
  assert.ok(events.every((e) => e.id));
});

test("stream of a failing model rejects", async () => {
  const consume = async () => {
    for await (const _ of replicate.stream("demo/fail", { input: { message: "boom" } })) {
      // drain
    }
  };
  await assert.rejects(consume, /boom/);
});

test("wait follows a prediction to its end", async () => {
  const created = await replicate.predictions.create({ model: "demo/sleep", input: { seconds: 1 } });
  assert.equal(created.status, "starting");
  const done = await replicate.wait(created, { interval: 200 });
  assert.equal(done.status, "succeeded");
  assert.equal(done.output, "slept 1 s");
});

test("cancel stops a running prediction", async () => {
  const created = await replicate.predictions.create({ model: "demo/sleep", input: { seconds: 30 } });
  const canceled = await replicate.predictions.cancel(created.id);
  assert.equal(canceled.status, "canceled");
  assert.equal((await replicate.predictions.get(created.id)).status, "canceled");
});

test("models.get and versions.list", async () => {
  const model = await replicate.models.get("demo", "echo");
  assert.equal(model.visibility, "public");
  const version = model.latest_version;
  assert.equal(version.openapi_schema.components.schemas.Input.properties.prompt.type, "string");
  const versions = await replicate.models.versions.list("demo", "echo");
  assert.ok(versions.results.some((v) => v.id === version.id));
  assert.equal((await replicate.models.versions.get("demo", "echo", version.id)).id, version.id);
  await assert.rejects(replicate.models.get("demo", "nothing"), /404/);
});

test("models.search finds a model by its name, best match first", async () => {
  const page = await replicate.models.search("echo");
  assert.equal(`${page.results[0].owner}/${page.results[0].name}`, "demo/echo");
  const none = await replicate.models.search("no-such-model-anywhere");
  assert.deepEqual(none.results, []);
});

test("collections.list and collections.get show the operator's collection", async () => {
  const list = await replicate.collections.list();
  assert.ok(list.results.some((c) => c.slug === "demo"));
  const demo = await replicate.collections.get("demo");
  assert.equal(demo.name, "Demo models");
  assert.deepEqual(
    demo.models.map((m) => `${m.owner}/${m.name}`),
    ["demo/echo", "demo/sleep"],
  );
});

test("run by owner/name:version and create by version", async () => {
  const { latest_version: version } = await replicate.models.get("demo", "echo");
  assert.equal(await replicate.run(`demo/echo:${version.id}`, { input: { prompt: "pinned" } }), "pinned");
  const created = await replicate.predictions.create({ version: version.id, input: { prompt: "v" }, wait: true });
  assert.equal(created.output, "v");
  assert.equal(created.version, version.id);
});

test("trainings.create makes a version that run then answers with the trained weights", async () => {
  const owner = (await replicate.accounts.current()).username;
  await replicate.models.create(owner, "js-tuned", { visibility: "private", hardware: "cpu" });
  const base = (await replicate.models.get("acme", "tune")).latest_version.id;
  let training = await replicate.trainings.create("acme", "tune", base, {
    destination: `${owner}/js-tuned`,
    input: { suffix: "js" },
  });
  assert.equal(training.status, "starting");
  const deadline = Date.now() + 60_000;
  while (["starting", "processing"].includes(training.status)) {
    assert.ok(Date.now() < deadline, `training ${training.id} still ${training.status}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
    training = await replicate.trainings.get(training.id);
  }
  assert.equal(training.status, "succeeded", JSON.stringify(training.error));
  assert.ok(training.output.version.startsWith(`${owner}/js-tuned:`), training.output.version);
  assert.equal(await replicate.run(training.output.version, { input: { prompt: "hi" } }), "hi js");
  assert.equal(await replicate.run(`${owner}/js-tuned`, { input: { prompt: "by name" } }), "by name js");
  assert.equal(await replicate.run("acme/tune", { input: { prompt: "base" } }), "base");
});

test("pagination of predictions and models", async () => {
  for (let i = 0; i < 21; i++) {
    // more than one page of the default 20
    await replicate.predictions.create({ model: "demo/echo", input: { prompt: `p${i}` } });
  }
  const first = await replicate.predictions.list();
  assert.ok(first.next.startsWith(`${ROOT}/predictions?`), first.next);
  const ids = [];
  for await (const page of replicate.paginate(replicate.predictions.list)) {
    ids.push(...page.map((p) => p.id));
  }
  assert.ok(ids.length >= 21);
  assert.equal(new Set(ids).size, ids.length);
  const models = [];
  for await (const page of replicate.paginate(replicate.models.list)) {
    models.push(...page.map((m) => `${m.owner}/${m.name}`));
  }
  for (const name of ["demo/echo", "demo/sleep", "demo/fail"]) {
    assert.ok(models.includes(name), name);
  }
});

test("a Replicate-shaped webhook validates with the client's own check", async () => {
  let deliver;
  const delivered = new Promise((resolve) => (deliver = resolve));
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      res.end("ok");
      deliver({ headers: req.headers, body });
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const hook = `http://127.0.0.1:${server.address().port}/hook`;
    const created = await replicate.predictions.create({
      model: "demo/fail",
      input: { message: "boom" },
      webhook: hook,
      webhook_events_filter: ["completed"],
    });
    const request = await delivered;
    const secret = await replicate.webhooks.default.secret.get();
    assert.ok(await validateWebhook(request, secret.key));
    const payload = JSON.parse(request.body);
    assert.equal(payload.id, created.id);
    assert.equal(payload.error, "boom");
  } finally {
    server.close();
  }
});

const crypto = require("node:crypto");

function sample(size) {
  const bytes = Buffer.alloc(size);
  for (let i = 0; i < size; i++) bytes[i] = (i * 7) % 251;
  return bytes;
}

const sha256 = (bytes) => crypto.createHash("sha256").update(bytes).digest("hex");

test("files.create, files.get, files.list and files.delete", async () => {
  const bytes = sample(300 * 1024);
  const created = await replicate.files.create(bytes, { purpose: "test" });
  assert.equal(created.size, bytes.length);
  assert.equal(created.checksums.sha256, sha256(bytes));
  assert.deepEqual(created.metadata, { purpose: "test" });
  assert.equal(created.urls.get, `${ROOT}/files/${created.id}`);
  const got = await replicate.files.get(created.id);
  assert.deepEqual(got.checksums, created.checksums);
  const listed = await replicate.files.list();
  assert.ok(listed.results.some((f) => f.id === created.id));
  if (process.env.FILES_STORE === "s3") {
    // The bytes come from the object store: the api answers a redirect to it.
    const redirect = await fetch(created.urls.download, { redirect: "manual" });
    assert.equal(redirect.status, 307);
    assert.ok(!redirect.headers.get("location").startsWith(BASE_URL));
  }
  const download = await fetch(created.urls.download);
  assert.equal(download.status, 200);
  assert.equal(sha256(Buffer.from(await download.arrayBuffer())), sha256(bytes));
  assert.equal(await replicate.files.delete(created.id), true);
  await assert.rejects(replicate.files.get(created.id), /404/);
});

test("run with a Buffer input uploads it and the model sees its exact bytes", async () => {
  const bytes = sample(300 * 1024);
  const output = await replicate.run("demo/checksum", { input: { file: bytes } });
  assert.equal(output.sha256, sha256(bytes));
  assert.equal(output.size, bytes.length);
});

test("run with a Blob input uploads it and the model sees its exact bytes", async () => {
  const bytes = sample(100 * 1024);
  const blob = new Blob([bytes], { type: "image/png" });
  const output = await replicate.run("demo/checksum", { input: { file: blob } });
  assert.equal(output.sha256, sha256(bytes));
  assert.equal(output.content_type, "image/png");
});

test("a Cog model with a Path input sees the exact bytes of a Buffer", async () => {
  const bytes = sample(300 * 1024);
  const output = await replicate.run("acme/hash", { input: { file: bytes } });
  assert.equal(output, `${sha256(bytes)} ${bytes.length}`);
});

test("deployments.predictions.create runs the deployment's release, and the deployment's life", async () => {
  const account = await replicate.accounts.current();
  const model = await replicate.models.get("demo", "versioned");
  const version = model.latest_version.id;
  const name = `js-${process.pid}`;
  const created = await replicate.deployments.create({
    name, model: "demo/versioned", version, hardware: "cpu", min_instances: 0, max_instances: 1,
  });
  assert.equal(created.current_release.number, 1);
  const prediction = await replicate.deployments.predictions.create(account.username, name, {
    input: { seconds: 0 }, wait: 10,
  });
  assert.equal(prediction.status, "succeeded");
  assert.equal(prediction.output, `version ${version}`);
  assert.equal(prediction.deployment, `${account.username}/${name}`);
  const updated = await replicate.deployments.update(account.username, name, { max_instances: 2 });
  assert.equal(updated.current_release.number, 2);
  assert.equal(await replicate.deployments.delete(account.username, name), true);
});

test("a waiting prediction carries its queue place", async () => {
  // The local runner has 4 slots: the fifth of five long sleeps waits.
  const created = [];
  for (let i = 0; i < 5; i++) {
    created.push(await replicate.predictions.create({ model: "demo/sleep", input: { seconds: 30, quiet: true } }));
  }
  try {
    const waiting = await replicate.predictions.get(created[4].id);
    assert.equal(waiting.status, "starting");
    assert.ok(waiting.queue.position >= 1, JSON.stringify(waiting.queue));
  } finally {
    for (const p of created) await replicate.predictions.cancel(p.id);
  }
});
