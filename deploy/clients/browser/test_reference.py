"""The API reference at /docs in headless Chromium: Redoc renders the api's own /openapi.json,
with nothing refused by the page's Content-Security-Policy."""

from selenium.webdriver.common.by import By

from conftest import BASE_URL, wait_for


def test_the_reference_renders_the_create_prediction_operation(fresh_browser):
    fresh_browser.get(BASE_URL + "/docs")
    operation = wait_for(
        fresh_browser, lambda d: d.find_elements(By.ID, "operation/createPrediction"), seconds=30
    )[0]
    assert "/v1/models/{owner}/{model}/predictions" in operation.text
    # The request body's fields are rendered from the document, not only the operation's name.
    assert "webhook_events_filter" in operation.text
    refused = [entry["message"] for entry in fresh_browser.get_log("browser")
               if "Content Security Policy" in entry["message"] or entry["level"] == "SEVERE"]
    assert refused == [], refused
