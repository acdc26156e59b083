"""Fixtures of the console's browser suite: headless Debian Chromium driven over WebDriver
(chromedriver), a browser signed in with the admin key, and a small client of the JSON API
to create and inspect predictions beside the browser.

BASE_URL and ADMIN_KEY name the live system (deploy/local/client-tests starts it);
CHROMIUM and CHROMEDRIVER override the browser's paths; SCREENSHOT_DIR, when set, receives
the README's screenshot of a prediction page.
"""

import json
import os
import time
import urllib.error
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BASE_URL = os.environ["BASE_URL"].rstrip("/")
ADMIN_KEY = os.environ["ADMIN_KEY"]


class Api:
    """The JSON API with a bearer key."""

    def __init__(self, key):
        self.key = key

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(BASE_URL + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.key}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def create(self, model, prediction_input):
        status, body = self.call("POST", f"/v1/models/{model}/predictions", {"input": prediction_input})
        assert status == 201, body
        return body

    def get(self, prediction_id):
        status, body = self.call("GET", f"/v1/predictions/{prediction_id}")
        assert status == 200, body
        return body

    def wait_terminal(self, prediction_id, seconds=30):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            prediction = self.get(prediction_id)
            if prediction["status"] in ("succeeded", "failed", "canceled"):
                return prediction
            time.sleep(0.2)
        raise AssertionError(f"{prediction_id} did not end within {seconds} s")


@pytest.fixture(scope="session")
def api():
    return Api(ADMIN_KEY)


def new_driver():
    options = webdriver.ChromeOptions()
    # The browser's console messages (CSP refusals among them) can be read with get_log.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(argument)
    service = Service(executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    return driver


def sign_in(driver, key, path="/"):
    driver.get(BASE_URL + path)
    WebDriverWait(driver, 10).until(lambda d: "/login" in d.current_url)
    driver.find_element(By.NAME, "api_key").send_keys(key)
    driver.find_element(By.ID, "sign-in").click()
    WebDriverWait(driver, 10).until(lambda d: "/login" not in d.current_url)


@pytest.fixture(scope="session")
def browser():
    """One browser for the suite, signed in with the admin key."""
    driver = new_driver()
    sign_in(driver, ADMIN_KEY)
    yield driver
    driver.quit()


@pytest.fixture
def fresh_browser():
    """A browser with no session, for the sign-in tests."""
    driver = new_driver()
    yield driver
    driver.quit()


def wait_for(driver, condition, seconds=15):
    return WebDriverWait(driver, seconds, poll_frequency=0.1).until(condition)
