"""The API reference at /docs in headless Chromium: Redoc renders the api's own /openapi.json,
and the page's Content-Security-Policy refuses nothing it needs."""

from selenium.webdriver.common.by import By

from conftest import BASE_URL, wait_for

# The one address outside this service that the Redoc bundle names: the logo of its side-menu
# footer. The policy refuses it on purpose (the page fetches nothing from the internet) and
# Redoc then hides the image.
REFUSED_ON_PURPOSE = "https://cdn.redoc.ly/redoc/logo-mini.svg"


def test_the_reference_renders_the_create_prediction_operation(fresh_browser):
    fresh_browser.get(BASE_URL + "/docs")
    operation = wait_for(
        fresh_browser, lambda d: d.find_elements(By.ID, "operation/createPrediction"), seconds=30
    )[0]
    assert "/v1/models/{owner}/{name}/predictions" in operation.text
    # The request body's fields are rendered from the document, not only the operation's name.
    assert "webhook_events_filter" in operation.text
    messages = [entry["message"] for entry in fresh_browser.get_log("browser")]
    refused = [m for m in messages if "Content Security Policy" in m and REFUSED_ON_PURPOSE not in m]
    assert refused == [], refused
    errors = [m for m in messages if "Content Security Policy" not in m and "favicon.ico" not in m
              and ("Uncaught" in m or "Failed to load" in m)]
    assert errors == [], errors
