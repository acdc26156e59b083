"""The web console in headless Chromium: what a person does with it, end to end."""

import os
import time

from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By

from conftest import ADMIN_KEY, BASE_URL, Api, sign_in, wait_for


def text_of(driver, element_id):
    """The element's text, empty while the page is being replaced (after a form post or the
    reload at the end of a stream), so waits poll through navigation. Chromium reports an
    element replaced mid-read as stale, missing, or (DevTools) "does not belong to the
    document": all are the base WebDriverException."""
    try:
        return driver.find_element(By.ID, element_id).text
    except WebDriverException:
        return ""


def key_row_text(driver, name):
    """The text of the keys table's row of key `name`, empty while the page changes."""
    try:
        return driver.find_element(By.XPATH, f"//table[@id='keys']//tr[td[contains(., '{name}')]]").text
    except WebDriverException:
        return ""


def open_prediction(driver, prediction_id):
    driver.get(f"{BASE_URL}/predictions/{prediction_id}")
    wait_for(driver, lambda d: d.find_elements(By.ID, "status"))


def fetch(driver, path, method, body=None, content_type=None):
    """A same-origin fetch from the page, with the browser's cookies; returns the status."""
    return driver.execute_async_script(
        """
        const [path, method, body, contentType, done] = arguments;
        const headers = contentType ? {"Content-Type": contentType} : {};
        fetch(path, {method, body, headers, credentials: "include", redirect: "manual"})
          .then(r => done(r.status)).catch(e => done(String(e)));
        """,
        path, method, body, content_type,
    )


def test_signing_in_returns_to_the_page_asked_for(fresh_browser):
    fresh_browser.get(BASE_URL + "/models")
    wait_for(fresh_browser, lambda d: "/login" in d.current_url)
    assert "next=/models" in fresh_browser.current_url
    fresh_browser.find_element(By.NAME, "api_key").send_keys("psk_wrong")
    fresh_browser.find_element(By.ID, "sign-in").click()
    wait_for(fresh_browser, lambda d: d.find_elements(By.ID, "login-error"))
    fresh_browser.find_element(By.NAME, "api_key").send_keys(ADMIN_KEY)
    fresh_browser.find_element(By.ID, "sign-in").click()
    wait_for(fresh_browser, lambda d: d.current_url == BASE_URL + "/models")
    assert "demo/sleep" in fresh_browser.find_element(By.ID, "models").text


def test_the_session_cookie_is_http_only_lax_and_path_wide(browser):
    cookie = browser.get_cookie("console_session")
    assert cookie is not None
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Lax"
    assert cookie["path"] == "/"
    assert cookie["secure"] is False, "plain http here; Secure only under an https PUBLIC_BASE_URL"
    assert ADMIN_KEY not in cookie["value"]
    assert browser.execute_script("return document.cookie") == "", "not readable by scripts"


def test_the_list_shows_the_newest_predictions(browser, api):
    created = api.create("demo/echo", {"prompt": "listed"})
    browser.get(BASE_URL + "/")
    table = wait_for(browser, lambda d: d.find_element(By.ID, "predictions"))
    assert created["id"] in table.text
    assert "demo/echo" in table.text


def test_text_and_image_outputs_are_rendered(browser, api):
    echo = api.wait_terminal(api.create("demo/echo", {"prompt": "hello console"})["id"])
    open_prediction(browser, echo["id"])
    assert "hello console" in text_of(browser, "output")
    assert text_of(browser, "status") == "succeeded"

    image = api.wait_terminal(api.create("demo/text-to-image", {"prompt": "a red square"})["id"])
    open_prediction(browser, image["id"])
    img = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#output img"))
    wait_for(browser, lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) > 0)
    if os.environ.get("SCREENSHOT_DIR"):
        browser.save_screenshot(os.path.join(os.environ["SCREENSHOT_DIR"], "console-prediction.png"))


def test_lists_of_images_objects_and_token_streams_are_rendered(browser, api):
    images = api.wait_terminal(api.create("demo/text-to-images", {"prompt": "a fox", "num_outputs": 3, "size": 16})["id"])
    open_prediction(browser, images["id"])
    shown = wait_for(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#output img")) == 3 and d.find_elements(By.CSS_SELECTOR, "#output img"))
    for img in shown:
        wait_for(browser, lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) > 0)

    annotated = api.wait_terminal(api.create("demo/annotate", {"prompt": "red fox"})["id"])
    open_prediction(browser, annotated["id"])
    caption = browser.find_element(By.CSS_SELECTOR, "#output dd[data-field='caption']").text.strip()
    assert caption == "a picture of red fox"
    img = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#output dd[data-field='image'] img"))
    wait_for(browser, lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) > 0)
    assert "1.0" in browser.find_element(By.CSS_SELECTOR, "#output dd[data-field='scores']").text

    tokens = api.wait_terminal(api.create("acme/tokens", {"text": "one two three", "delay": 0})["id"])
    open_prediction(browser, tokens["id"])
    assert text_of(browser, "output") == "one two three"


def test_status_and_logs_update_live_without_a_reload(browser, api):
    created = api.create("demo/sleep", {"seconds": 3})
    open_prediction(browser, created["id"])
    browser.execute_script("window.__same_page = true")
    wait_for(browser, lambda d: text_of(d, "status") == "processing")
    wait_for(browser, lambda d: "slept 1" in text_of(d, "logs"))
    assert browser.execute_script("return window.__same_page === true"), "updated in place, not reloaded"
    wait_for(browser, lambda d: text_of(d, "status") == "succeeded", seconds=20)
    wait_for(browser, lambda d: "slept 3 s" in text_of(d, "output"))


def test_a_running_prediction_is_canceled_from_its_page(browser, api):
    created = api.create("demo/sleep", {"seconds": 60})
    open_prediction(browser, created["id"])
    browser.find_element(By.ID, "cancel").click()
    wait_for(browser, lambda d: text_of(d, "status") == "canceled")
    assert api.get(created["id"])["status"] == "canceled"
    assert not browser.find_elements(By.ID, "cancel"), "no Cancel button once ended"


def test_the_run_form_shows_a_bad_fields_error_then_runs(browser):
    browser.get(BASE_URL + "/models/demo/sleep")
    seconds = wait_for(browser, lambda d: d.find_element(By.ID, "input-seconds"))
    seconds.clear()
    seconds.send_keys("301")
    browser.find_element(By.ID, "run").click()
    error = wait_for(browser, lambda d: d.find_element(By.ID, "error-seconds"))
    assert "300" in error.text
    seconds = browser.find_element(By.ID, "input-seconds")
    seconds.clear()
    seconds.send_keys("0.2")
    browser.find_element(By.ID, "run").click()
    wait_for(browser, lambda d: "/predictions/" in d.current_url)
    wait_for(browser, lambda d: text_of(d, "status") == "succeeded", seconds=20)


def test_a_key_is_created_shown_once_deactivated_and_then_refused(browser):
    browser.get(BASE_URL + "/keys")
    name = f"browser-{time.time_ns()}"
    wait_for(browser, lambda d: d.find_element(By.ID, "key-name")).send_keys(name)
    browser.find_element(By.ID, "key-rpm").send_keys("120")
    browser.find_element(By.ID, "create-key-button").click()
    value = wait_for(browser, lambda d: d.find_element(By.ID, "new-key-value")).text
    assert value.startswith("psk_")
    assert Api(value).call("GET", "/v1/predictions?limit=1")[0] == 200
    row = browser.find_element(By.XPATH, f"//table[@id='keys']//tr[td[contains(., '{name}')]]")
    assert "120" in row.text
    row.find_element(By.CSS_SELECTOR, "button.deactivate").click()
    wait_for(browser, lambda d: "inactive" in key_row_text(d, name))
    assert Api(value).call("GET", "/v1/predictions?limit=1")[0] == 401
    browser.get(BASE_URL + "/keys")
    assert not browser.find_elements(By.ID, "new-key-value"), "the key is shown once"


def test_the_secret_is_masked_revealed_and_rotated(browser, api):
    browser.get(BASE_URL + "/secret")
    masked = wait_for(browser, lambda d: d.find_element(By.ID, "secret-masked")).text
    assert "*" in masked
    browser.find_element(By.ID, "reveal").click()
    before = wait_for(browser, lambda d: d.find_element(By.ID, "secret-value")).text
    assert before == api.call("GET", "/v1/account/webhooks/secret")[1]["key"]
    browser.get(BASE_URL + "/secret")
    hours = wait_for(browser, lambda d: d.find_element(By.ID, "transition-hours"))
    hours.clear()
    hours.send_keys("1")
    browser.find_element(By.ID, "rotate").click()
    after = wait_for(browser, lambda d: d.find_element(By.ID, "secret-value")).text
    assert after != before
    assert after == api.call("GET", "/v1/account/webhooks/secret")[1]["key"]


def test_the_cookie_alone_cannot_write_through_the_api(browser, api):
    created = api.create("demo/sleep", {"seconds": 30})
    browser.get(BASE_URL + "/")
    assert fetch(browser, f"/v1/predictions/{created['id']}/cancel", "POST") == 401
    assert api.get(created["id"])["status"] in ("starting", "processing")
    api.call("POST", f"/v1/predictions/{created['id']}/cancel")


def test_a_console_post_without_its_csrf_token_is_refused(browser, api):
    created = api.create("demo/sleep", {"seconds": 30})
    browser.get(BASE_URL + "/")
    status = fetch(browser, f"/predictions/{created['id']}/cancel", "POST", "", "application/x-www-form-urlencoded")
    assert status == 403
    assert api.get(created["id"])["status"] in ("starting", "processing")
    api.call("POST", f"/v1/predictions/{created['id']}/cancel")


def test_the_run_form_uploads_a_file_and_the_files_page_lists_and_deletes_it(browser, tmp_path):
    import hashlib

    # A real PNG (1x1, red), so the prediction page can show it inline.
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
        "0000000c4944415478da63f8cfc000000301010018dd8db00000000049454e44ae426082"
    )
    path = tmp_path / "red.png"
    path.write_bytes(png)
    browser.get(BASE_URL + "/models/demo/checksum")
    picker = wait_for(browser, lambda d: d.find_element(By.ID, "input-file"))
    assert picker.get_attribute("type") == "file"
    picker.send_keys(str(path))
    browser.find_element(By.ID, "run").click()
    wait_for(browser, lambda d: "/predictions/" in d.current_url)
    wait_for(browser, lambda d: text_of(d, "status") == "succeeded", seconds=20)
    # The page reloads once the stream says done, to show the final output: its fields.
    field = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#output dd[data-field='sha256']"))
    assert field.text.strip() == hashlib.sha256(png).hexdigest()
    image = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#input-files img"))
    wait_for(browser, lambda d: d.execute_script("return arguments[0].naturalWidth", image) > 0)

    browser.get(BASE_URL + "/files")
    row = wait_for(browser, lambda d: d.find_element(By.XPATH, "//table[@id='files']//tr[td[contains(., 'red.png')]]"))
    file_id = row.get_attribute("data-file-id")
    row.find_element(By.CSS_SELECTOR, "button.delete-file").click()
    wait_for(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, f"tr[data-file-id='{file_id}']"))


def test_a_waiting_prediction_shows_its_queue_position_until_it_starts(browser, api):
    # The runner of the client suites has 4 slots: the fifth long sleep waits for one.
    running = [api.create("demo/sleep", {"seconds": 4})["id"] for _ in range(4)]
    waiting = api.create("demo/sleep", {"seconds": 0.1})["id"]
    try:
        open_prediction(browser, waiting)
        position = wait_for(browser, lambda d: d.find_element(By.ID, "queue-position"))
        assert int(position.text) >= 1
        wait_for(browser, lambda d: not d.find_elements(By.ID, "queue"), seconds=30)
        wait_for(browser, lambda d: text_of(d, "status") in ("processing", "succeeded"), seconds=30)
    finally:
        for prediction_id in running:
            api.call("POST", f"/v1/predictions/{prediction_id}/cancel")


def deployment_row_text(driver, name):
    """The text of the deployments table's row of `name`, empty while the page changes."""
    try:
        return driver.find_element(By.XPATH, f"//table[@id='deployments']//tr[@data-deployment='{name}']").text
    except WebDriverException:
        return ""


def test_a_deployment_is_created_released_again_and_deleted_from_the_deployments_page(browser, api):
    version = api.call("GET", "/v1/models/demo/versioned")[1]["latest_version"]["id"]
    name = f"browser-{time.time_ns()}"
    browser.get(BASE_URL + "/deployments")
    wait_for(browser, lambda d: d.find_element(By.ID, "deployment-name")).send_keys(name)
    browser.find_element(By.ID, "deployment-model").send_keys("demo/versioned")
    browser.find_element(By.ID, "deployment-version").send_keys(version)
    maximum = browser.find_element(By.ID, "deployment-max")
    maximum.clear()
    maximum.send_keys("2")
    browser.find_element(By.ID, "create-deployment-button").click()
    wait_for(browser, lambda d: "at release 1" in text_of(d, "deployment-notice"))
    row = browser.find_element(By.XPATH, f"//tr[@data-deployment='{name}']")
    assert row.find_element(By.CSS_SELECTOR, "td.release").text == "1"
    owner = api.call("GET", "/v1/account")[1]["username"]
    assert api.call("GET", f"/v1/deployments/{owner}/{name}")[1]["current_release"]["configuration"]["max_instances"] == 2

    row.find_element(By.TAG_NAME, "summary").click()
    form = row.find_element(By.CSS_SELECTOR, "form.release-form")
    form.find_element(By.NAME, "max_instances").send_keys("3")
    form.find_element(By.CSS_SELECTOR, "button.release-button").click()
    wait_for(browser, lambda d: "at release 2" in text_of(d, "deployment-notice"))
    assert "0 to 3" in deployment_row_text(browser, name)
    assert api.call("GET", f"/v1/deployments/{owner}/{name}")[1]["current_release"]["number"] == 2

    browser.find_element(By.XPATH, f"//tr[@data-deployment='{name}']//button[contains(@class, 'delete-deployment')]").click()
    wait_for(browser, lambda d: deployment_row_text(d, name) == "" and d.find_elements(By.ID, "create-deployment"))
    assert api.call("GET", f"/v1/deployments/{owner}/{name}")[0] == 404


def test_a_bad_deployment_shows_every_field_error(browser):
    browser.get(BASE_URL + "/deployments")
    wait_for(browser, lambda d: d.find_element(By.ID, "deployment-name")).send_keys("Bad Name")
    browser.find_element(By.ID, "create-deployment-button").click()
    error = wait_for(browser, lambda d: text_of(d, "deployment-error"))
    assert "name:" in error and "model:" in error and "version:" in error


def test_the_model_page_lists_its_versions_and_which_is_live(browser):
    browser.get(BASE_URL + "/models/demo/versioned")
    rows = wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#versions tbody tr"))
    assert any("latest" in r.text and "live" in r.text for r in rows), [r.text for r in rows]


def test_a_training_is_started_from_the_form_followed_live_and_its_version_run(browser, api):
    status, account = api.call("GET", "/v1/account")
    assert status == 200, account
    destination = f"{account['username']}/browser-tuned"
    status, body = api.call("POST", "/v1/models", {"owner": account["username"], "name": "browser-tuned",
                                                    "visibility": "private", "hardware": "cpu"})
    assert status == 201, body
    browser.get(BASE_URL + "/models/acme/tune")
    strength = wait_for(browser, lambda d: d.find_element(By.ID, "train-input-strength"))
    fields = [e.get_attribute("id") for e in browser.find_elements(By.CSS_SELECTOR, "#train-form [id^=train-field-]")]
    assert fields == ["train-field-suffix", "train-field-strength", "train-field-seconds"], "in x-order"
    strength.clear()
    strength.send_keys("9")
    browser.find_element(By.ID, "train").click()
    error = wait_for(browser, lambda d: d.find_element(By.ID, "train-error-strength"))
    assert "5" in error.text
    browser.find_element(By.ID, "train-input-suffix").send_keys("web")
    strength = browser.find_element(By.ID, "train-input-strength")
    strength.clear()
    strength.send_keys("1")
    browser.find_element(By.ID, "train").click()
    wait_for(browser, lambda d: "/trainings/" in d.current_url)
    # The stream says "done", then the page reloads once with the output.
    trained = wait_for(browser, lambda d: text_of(d, "trained-version"), seconds=30)
    assert text_of(browser, "status") == "succeeded"
    assert "training on 'web'" in text_of(browser, "logs")
    assert trained.startswith(destination + ":"), trained
    browser.get(BASE_URL + "/trainings")
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#trainings tbody tr"))
    browser.get(f"{BASE_URL}/models/{destination}")
    rows = wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#versions tbody tr"))
    assert "acme/tune:" in rows[0].text and "latest" in rows[0].text, rows[0].text
    browser.find_element(By.ID, "input-prompt").send_keys("hello")
    browser.find_element(By.ID, "run").click()
    wait_for(browser, lambda d: "/predictions/" in d.current_url)
    wait_for(browser, lambda d: text_of(d, "status") == "succeeded", seconds=20)
    assert text_of(browser, "output") == "hello web"


def test_the_usage_page_shows_the_budget_as_a_bar_and_a_banner_once_it_is_spent(browser, api):
    # No price is set here, so nothing costs anything: a budget of 0.00 is spent at once. The
    # account's own budget is dropped again after, so the other tests may create.
    try:
        status, account = api.call("PATCH", "/v1/account", {"monthly_budget": "0.00"})
        assert status == 200 and account["monthly_budget"] == "0.00", account
        browser.get(BASE_URL + "/usage")
        assert text_of(browser, "monthly-budget") == "$0.00"
        assert text_of(browser, "spent-this-month") == "$0.00"
        assert browser.find_element(By.ID, "budget-bar").get_attribute("value") == "100"
        assert "is spent" in text_of(browser, "budget-banner")
        status, problem = api.call("POST", "/v1/models/demo/echo/predictions", {"input": {"prompt": "over"}})
        assert status == 402 and problem["code"] == "BUDGET_EXHAUSTED", problem
    finally:
        status, account = api.call("PATCH", "/v1/account", {"monthly_budget": None})
        assert status == 200 and account["monthly_budget"] is None, account
    browser.get(BASE_URL + "/usage")
    assert not browser.find_elements(By.ID, "budget-banner")


def test_the_usage_page_charts_the_days_by_model_and_offers_the_csv(browser, api):
    api.wait_terminal(api.create("demo/echo", {"prompt": "counted"})["id"])

    def charted(driver):
        driver.get(BASE_URL + "/usage")
        return driver.find_elements(By.CSS_SELECTOR, "#usage-chart rect.usage-bar") and "demo/echo" in text_of(driver, "usage")

    wait_for(browser, charted)
    assert "demo/echo" in browser.find_element(By.CSS_SELECTOR, "figcaption").text
    link = browser.find_element(By.ID, "usage-csv").get_attribute("href")
    csv = browser.execute_async_script(
        "const [url, done] = arguments; fetch(url, {credentials: 'include'}).then(r => r.text()).then(done);", link
    )
    assert csv.startswith("bucket_start,bucket_end,model,succeeded,failed,canceled,predict_time,total_time,cost")
    assert ",demo/echo," in csv
