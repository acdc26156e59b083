"""The official replicate-python client (pinned in requirements.txt) against a live local
system, with only the base URL changed: `replicate.Client(base_url=f"{BASE}/replicate")`.

Run by deploy/local/client-tests, which starts the system and sets BASE_URL and ADMIN_KEY.
"""

import hashlib
import http.server
import json
import os
import queue
import threading
import time

import httpx
import pytest
import replicate
from replicate.exceptions import ModelError, ReplicateError
from replicate.helpers import FileOutput
from replicate.pagination import paginate

BASE_URL = os.environ["BASE_URL"]
ADMIN_KEY = os.environ["ADMIN_KEY"]
OTHER_KEY = os.environ["OTHER_KEY"]
# Where new files go: "gridfs" (the first pass) or "s3" (deploy/local/client-tests runs the file
# tests again with S3Proxy), where a download answers 307 to the object store.
FILES_STORE = os.environ.get("FILES_STORE", "gridfs")
MAX_FILE_BYTES = int(os.environ.get("API_MAX_FILE_BYTES", str(100 * 1024 * 1024)))


@pytest.fixture(scope="module")
def client():
    return replicate.Client(api_token=ADMIN_KEY, base_url=f"{BASE_URL}/replicate")


def test_run_returns_text_output(client):
    assert client.run("demo/echo", input={"prompt": "hello", "repeat": 2}) == "hello hello"


def test_run_returns_a_file_url_that_the_client_can_fetch(client):
    output = client.run("demo/text-to-image", input={"prompt": "a fox", "width": 32, "height": 32})
    url = str(output)
    assert url.startswith(f"{BASE_URL}/replicate/v1/files/")
    response = client._client.get(url)
    assert response.status_code == 200
    assert response.content.startswith(b"\x89PNG")
    # As code written for Replicate reads it: the client wraps an https output URL in a
    # FileOutput (this local one is http, so it stays a string), whose read() follows no redirect.
    assert FileOutput(url, client).read() == response.content
    # The link is signed: it opens without a key, as in a browser's <img src>.
    anonymous = httpx.get(url, follow_redirects=True)
    assert anonymous.status_code == 200
    assert anonymous.content == response.content


def _fetch(client, url):
    response = client._client.get(str(url))
    assert response.status_code == 200, url
    return response.content


def test_run_of_a_list_of_files_model_returns_a_list_of_fetchable_files(client):
    output = client.run("acme/images", input={"count": 2, "size": 3})
    assert isinstance(output, list) and len(output) == 2, output
    assert all(str(u).startswith(f"{BASE_URL}/replicate/v1/files/") for u in output)
    assert all(_fetch(client, u).startswith(b"\x89PNG") for u in output)
    assert str(output[0]) != str(output[1])


def test_run_of_a_token_stream_model_yields_its_tokens(client):
    output = client.run("acme/tokens", input={"text": "The quick brown fox jumps over the lazy dog", "delay": 0})
    tokens = list(output)
    assert tokens == ["The ", "quick ", "brown ", "fox ", "jumps ", "over ", "the ", "lazy ", "dog"]


def test_stream_of_a_token_stream_model_sends_the_text_then_done(client):
    events = list(client.stream("acme/tokens", input={"text": "one two three", "delay": 0.1}))
    assert "".join(str(e) for e in events if e.event.value == "output") == "one two three"
    assert events[-1].event.value == "done"


def test_run_of_a_stream_of_files_model_returns_each_file(client):
    output = client.run("acme/frames", input={"count": 3, "delay": 0})
    # Uploaded (coglet's --upload-url), so listed in the order the uploads finished.
    assert sorted(_fetch(client, u) for u in output) == [f"frame {i}\n".encode() for i in range(3)]


def test_run_of_an_object_model_returns_its_fields_with_the_file_as_a_link(client):
    output = client.run("acme/annotate", input={"prompt": "red fox"})
    assert output["caption"] == "a picture of red fox"
    assert output["scores"] == [1.0, 1.0]
    assert _fetch(client, output["image"]) == b"mask of red fox\n"


def test_an_iterator_models_version_declares_it(client):
    schema = client.models.get("acme/tokens").latest_version.openapi_schema
    assert schema["components"]["schemas"]["Output"]["x-cog-array-type"] == "iterator"


def test_run_of_the_built_in_list_and_object_models(client):
    images = client.run("demo/text-to-images", input={"prompt": "a fox", "num_outputs": 3, "size": 16})
    assert len(images) == 3 and all(_fetch(client, u).startswith(b"\x89PNG") for u in images)
    annotated = client.run("demo/annotate", input={"prompt": "a red fox"})
    assert annotated["caption"] == "a picture of a red fox"
    assert _fetch(client, annotated["image"]).startswith(b"\x89PNG")


def test_run_of_a_model_that_outlasts_its_wait_keeps_polling(client):
    assert client.run("demo/sleep", input={"seconds": 2.5}, wait=1) == "slept 2.5 s"


def test_run_of_a_failing_model_raises_model_error_with_its_message(client):
    with pytest.raises(ModelError) as raised:
        client.run("demo/fail", input={"message": "boom"})
    assert raised.value.prediction.error == "boom"
    assert raised.value.prediction.status == "failed"


def test_stream_yields_the_output_and_ends(client):
    events = list(client.stream("demo/sleep", input={"seconds": 1.5}))
    assert "".join(str(e) for e in events) == "slept 1.5 s"
    assert events[-1].event.value == "done"
    assert all(e.id for e in events)


def test_stream_of_a_failing_model_raises(client):
    with pytest.raises(RuntimeError, match="boom"):
        list(client.stream("demo/fail", input={"message": "boom"}))


def test_wait_follows_a_prediction_to_its_end(client):
    prediction = client.models.predictions.create(model="demo/sleep", input={"seconds": 1})
    assert prediction.status == "starting"
    prediction.wait()
    assert (prediction.status, prediction.output) == ("succeeded", "slept 1 s")
    assert prediction.urls["get"].startswith(f"{BASE_URL}/replicate/v1/")


def test_cancel_stops_a_running_prediction(client):
    prediction = client.models.predictions.create(model="demo/sleep", input={"seconds": 30})
    prediction.cancel()
    prediction.reload()
    assert prediction.status == "canceled"
    with pytest.raises(ReplicateError) as raised:
        client.predictions.cancel(prediction.id)
    assert raised.value.status == 400


def test_models_get_and_versions_list(client):
    model = client.models.get("demo/echo")
    assert (model.owner, model.name, model.visibility) == ("demo", "echo", "public")
    version = model.latest_version
    assert version.openapi_schema["components"]["schemas"]["Input"]["properties"]["prompt"]["type"] == "string"
    versions = model.versions.list()
    assert version.id in [v.id for v in versions]
    assert model.versions.get(version.id).id == version.id
    with pytest.raises(ReplicateError) as raised:
        client.models.get("demo/nothing")
    assert raised.value.status == 404


def test_a_dotted_model_name_is_created_and_fetched_as_on_replicate(client):
    owner = client.accounts.current().username
    model = client.models.create(owner, "flux-1.1-pro", visibility="private", hardware="cpu")
    assert (model.owner, model.name) == (owner, "flux-1.1-pro")
    assert client.models.get(f"{owner}/flux-1.1-pro").name == "flux-1.1-pro"
    assert client.models.delete(f"{owner}/flux-1.1-pro") is True


def test_an_accounts_own_model_is_created_read_and_deleted(client):
    owner = client.accounts.current().username
    model = client.models.create(owner, "py-tune", visibility="private", hardware="cpu", description="a tune")
    assert (model.owner, model.name, model.visibility, model.description) == (owner, "py-tune", "private", "a tune")
    assert model.latest_version is None
    assert client.models.get(f"{owner}/py-tune").latest_version is None
    with pytest.raises(ReplicateError) as raised:
        client.models.create(owner, "py-tune", visibility="private", hardware="cpu")
    assert raised.value.status == 409
    assert client.models.delete(f"{owner}/py-tune") is True
    with pytest.raises(ReplicateError) as raised:
        client.models.get(f"{owner}/py-tune")
    assert raised.value.status == 404


def test_models_search_finds_the_callers_models_by_their_words(client):
    owner = client.accounts.current().username
    client.models.create(
        owner,
        "py-needle",
        visibility="private",
        hardware="cpu",
        description="finds needles in haystacks",
        github_url="https://github.com/acme/py-needle",
    )
    page = client.models.search("needles haystacks")
    assert [f"{m.owner}/{m.name}" for m in page.results] == [f"{owner}/py-needle"]
    assert page.results[0].github_url == "https://github.com/acme/py-needle"
    assert [m.name for m in client.models.search("echo").results][0] == "echo", "the exact name first"
    client.models.delete(f"{owner}/py-needle")


def test_collections_list_and_get_show_the_operators_collection(client):
    assert "demo" in [c.slug for c in client.collections.list().results]
    demo = client.collections.get("demo")
    assert (demo.slug, demo.name) == ("demo", "Demo models")
    assert [f"{m.owner}/{m.name}" for m in demo] == ["demo/echo", "demo/sleep"]


def _tuned_model(client, name):
    """A fresh model of the caller's account to train into."""
    owner = client.accounts.current().username
    client.models.create(owner, name, visibility="private", hardware="cpu")
    return f"{owner}/{name}"


def _until_ended(training, limit=60):
    deadline = time.monotonic() + limit
    while training.status in ("starting", "processing"):
        assert time.monotonic() < deadline, f"training {training.id} still {training.status}"
        time.sleep(0.2)
        training.reload()
    return training


def test_a_training_makes_a_version_that_runs_by_id_and_by_name(client):
    destination = _tuned_model(client, "py-tuned")
    base = client.models.get("acme/tune").latest_version
    assert "TrainingInput" in base.openapi_schema["components"]["schemas"]
    training = client.trainings.create(
        model="acme/tune", version=base.id, input={"suffix": "py", "strength": 2}, destination=destination
    )
    assert training.status == "starting" and training.destination == destination
    assert client.trainings.get(training.id).id == training.id
    training = _until_ended(training)
    assert training.status == "succeeded", training.error
    assert training.destination == destination
    trained = training.output["version"]
    assert trained.startswith(f"{destination}:")
    assert client.run(trained, input={"prompt": "hi"}) == "hi py py"
    assert client.run(destination, input={"prompt": "by name"}) == "by name py py"
    assert client.run("acme/tune", input={"prompt": "base"}) == "base", "the base model is unchanged"
    latest = client.models.get(destination).latest_version
    assert latest.id == trained.split(":")[1]
    assert training.id in [t.id for t in client.trainings.list().results]
    model = client.models.get(destination)
    assert model.versions.delete(latest.id) is True
    assert [v.id for v in model.versions.list()] == []
    assert client.models.get(destination).latest_version is None


def test_a_training_is_canceled_and_another_accounts_are_not_found(client):
    destination = _tuned_model(client, "py-canceled")
    version = client.models.get("acme/tune").latest_version.id
    training = client.trainings.create(
        model="acme/tune", version=version, input={"suffix": "x", "seconds": 60}, destination=destination
    )
    training.cancel()
    assert training.status == "canceled"
    other = replicate.Client(api_token=OTHER_KEY, base_url=f"{BASE_URL}/replicate")
    with pytest.raises(ReplicateError) as raised:
        other.trainings.get(training.id)
    assert raised.value.status == 404
    with pytest.raises(ReplicateError) as raised:
        other.trainings.create(model="acme/tune", version=version, input={"suffix": "x"}, destination=destination)
    assert raised.value.status == 404
    with pytest.raises(ReplicateError) as raised:
        client.trainings.create(model="acme/tune", version=version, input={"strength": 9}, destination=destination)
    assert raised.value.status == 400


def test_run_by_owner_name_version(client):
    version = client.models.get("demo/echo").latest_version.id
    assert client.run(f"demo/echo:{version}", input={"prompt": "pinned"}) == "pinned"


def test_predictions_create_by_version(client):
    version = client.models.get("demo/echo").latest_version.id
    prediction = client.predictions.create(version=version, input={"prompt": "v"}, wait=True)
    assert (prediction.status, prediction.output, prediction.version) == ("succeeded", "v", version)


def test_pagination_of_predictions_and_models(client):
    for i in range(21):  # more than one page of the default 20
        client.models.predictions.create(model="demo/echo", input={"prompt": f"p{i}"})
    first = client.predictions.list()
    assert first.next and first.next.startswith(f"{BASE_URL}/replicate/v1/")
    pages = list(paginate(client.predictions.list))
    ids = [p.id for page in pages for p in page]
    assert len(ids) == len(set(ids)) >= 21
    models = [m.id for page in paginate(client.models.list) for m in page]
    assert {"demo/echo", "demo/sleep", "demo/fail"} <= set(models)


class _Receiver(http.server.BaseHTTPRequestHandler):
    deliveries: "queue.Queue[tuple[dict, str]]" = queue.Queue()

    def do_POST(self):  # noqa: N802 (the handler's name is http.server's)
        body = self.rfile.read(int(self.headers["content-length"])).decode()
        self.deliveries.put(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_replicate_shaped_webhook_validates_with_the_clients_own_check(client):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hook = f"http://127.0.0.1:{server.server_port}/hook"
        prediction = client.models.predictions.create(
            model="demo/fail", input={"message": "boom"}, webhook=hook, webhook_events_filter=["completed"]
        )
        headers, body = _Receiver.deliveries.get(timeout=30)
        secret = client.webhooks.default.secret()
        assert secret.key.startswith("whsec_")
        # A receiver's setup code reads it with the key that creates predictions (read/write),
        # as on Replicate.
        made = httpx.post(f"{BASE_URL}/v1/account/api-keys", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, json={})
        assert made.status_code == 201, made.text
        assert made.json()["scopes"] == ["read", "write"]
        everyday = replicate.Client(api_token=made.json()["key"], base_url=f"{BASE_URL}/replicate")
        assert everyday.webhooks.default.secret().key == secret.key
        # Returns None when valid; raises InvalidSignatureError (or another WebhookValidationError) otherwise.
        client.webhooks.validate(headers=headers, body=body, secret=secret, tolerance=300)
        tampered = body.replace('"boom"', '"bang"')
        with pytest.raises(replicate.webhook.InvalidSignatureError):
            client.webhooks.validate(headers=headers, body=tampered, secret=secret, tolerance=300)
        payload = json.loads(body)
        assert (payload["id"], payload["status"], payload["error"]) == (prediction.id, "failed", "boom")
        replicate.prediction.Prediction(**payload)  # the client's own model parses it
    finally:
        server.shutdown()


def _bytes(size):
    return bytes((i * 7) % 251 for i in range(size))


def test_files_are_created_read_listed_and_deleted(client, tmp_path):
    data = _bytes(300 * 1024)
    path = tmp_path / "photo.png"
    path.write_bytes(data)
    created = client.files.create(path, metadata={"purpose": "test"})
    assert created.name == "photo.png"
    assert created.content_type == "image/png"
    assert created.size == len(data)
    assert created.checksums["sha256"] == hashlib.sha256(data).hexdigest()
    assert created.metadata == {"purpose": "test"}
    assert created.urls["get"] == f"{BASE_URL}/replicate/v1/files/{created.id}"

    assert client.files.get(created.id).checksums == created.checksums
    assert created.id in [f.id for f in client.files.list()]
    downloaded = client._client.get(created.urls["get"] + "/download", follow_redirects=True)
    assert downloaded.content == data
    anonymous = httpx.get(created.urls["download"])
    if FILES_STORE == "s3":
        # The bytes come from the object store, not through the api.
        assert anonymous.status_code == 307
        location = anonymous.headers["location"]
        assert not location.startswith(BASE_URL)
        anonymous = httpx.get(location)
    assert anonymous.status_code == 200 and anonymous.content == data
    ranged = httpx.get(created.urls["download"], headers={"Range": "bytes=10-19"}, follow_redirects=True)
    assert ranged.status_code == 206 and ranged.content == data[10:20]

    assert client.files.delete(created.id) is True
    with pytest.raises(ReplicateError) as raised:
        client.files.get(created.id)
    assert raised.value.status == 404


def test_another_accounts_file_is_404_and_cannot_be_an_input(client, tmp_path):
    path = tmp_path / "private.bin"
    path.write_bytes(_bytes(1000))
    created = client.files.create(path)
    other = replicate.Client(api_token=OTHER_KEY, base_url=f"{BASE_URL}/replicate")
    with pytest.raises(ReplicateError) as raised:
        other.files.get(created.id)
    assert raised.value.status == 404
    assert created.id not in [f.id for f in other.files.list()]
    with pytest.raises(ReplicateError) as raised:
        other.run("demo/checksum", input={"file": created.urls["get"]})
    assert raised.value.status == 400


def test_a_file_over_the_limit_is_refused_with_413_and_not_listed(client, tmp_path):
    path = tmp_path / "too-big.bin"
    path.write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    before = {f.id for f in client.files.list()}
    with pytest.raises(ReplicateError) as raised:
        client.files.create(path)
    assert raised.value.status == 413
    assert {f.id for f in client.files.list()} == before


def test_run_with_an_open_file_uploads_it_and_the_model_sees_its_exact_bytes(client, tmp_path):
    data = _bytes(300 * 1024)
    path = tmp_path / "input.bin"
    path.write_bytes(data)
    with open(path, "rb") as f:
        output = client.run("demo/checksum", input={"file": f})
    assert output["sha256"] == hashlib.sha256(data).hexdigest()
    assert output["size"] == len(data)
    # The upload the client made is an ordinary file of the account.
    assert any(f.name == "input.bin" for f in client.files.list())


def test_run_with_a_file_as_base64_sends_a_data_uri_the_model_reads(client, tmp_path):
    data = _bytes(300 * 1024)
    path = tmp_path / "inline.bin"
    path.write_bytes(data)
    with open(path, "rb") as f:
        output = client.run("demo/checksum", input={"file": f}, file_encoding_strategy="base64")
    assert output["sha256"] == hashlib.sha256(data).hexdigest()


def test_a_cog_model_with_a_path_input_sees_the_exact_bytes_by_upload_and_by_base64(client, tmp_path):
    data = _bytes(300 * 1024)
    path = tmp_path / "for-cog.bin"
    path.write_bytes(data)
    expected = f"{hashlib.sha256(data).hexdigest()} {len(data)}"
    with open(path, "rb") as f:
        assert client.run("acme/hash", input={"file": f}) == expected
    with open(path, "rb") as f:
        assert client.run("acme/hash", input={"file": f}, file_encoding_strategy="base64") == expected


def test_accounts_current_and_hardware_list_answer(client):
    account = client.accounts.current()
    assert account.type == "organization"
    assert account.username == account.name and account.username
    hardware = client.hardware.list()
    assert "cpu" in [h.sku for h in hardware], "the local runner's pool"


def test_a_deployment_is_created_used_updated_to_release_2_and_deleted(client):
    owner = client.accounts.current().username
    version = client.models.get("demo/versioned").latest_version.id
    name = f"py-{os.getpid()}"
    created = client.deployments.create(
        name=name, model="demo/versioned", version=version, hardware="cpu", min_instances=0, max_instances=1
    )
    assert (created.owner, created.name, created.current_release.number) == (owner, name, 1)
    assert created.current_release.configuration.hardware == "cpu"
    assert client.deployments.get(f"{owner}/{name}").current_release.version == version
    assert name in [d.name for d in client.deployments.list().results]

    prediction = client.deployments.predictions.create(f"{owner}/{name}", input={"seconds": 0})
    prediction.wait()
    assert prediction.status == "succeeded"
    assert prediction.output == f"version {version}"

    updated = client.deployments.update(owner, name, max_instances=2)
    assert updated.current_release.number == 2
    assert updated.current_release.configuration.max_instances == 2

    other = replicate.Client(api_token=OTHER_KEY, base_url=f"{BASE_URL}/replicate")
    with pytest.raises(ReplicateError) as raised:
        other.deployments.get(f"{owner}/{name}")
    assert raised.value.status == 404, "another account's deployment does not exist for it"

    assert client.deployments.delete(owner, name) is True
    with pytest.raises(ReplicateError) as gone:
        client.deployments.get(f"{owner}/{name}")
    assert gone.value.status == 404


def test_a_waiting_prediction_carries_its_queue_place_and_the_client_still_reads_it(client):
    # The local runner has 4 slots: the fifth of five long sleeps waits.
    created = [client.predictions.create(model="demo/sleep", input={"seconds": 30, "quiet": True}) for _ in range(5)]
    try:
        waiting = client.predictions.get(created[-1].id)
        assert waiting.status == "starting"
        raw = client._client.get(f"{BASE_URL}/replicate/v1/predictions/{created[-1].id}").json()
        assert raw["queue"]["position"] >= 1, raw
    finally:
        for p in created:
            p.cancel()
