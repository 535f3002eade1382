"""The web page of ``simmodel serve`` in a real headless browser (Debian's Chromium driven by Selenium).

The server runs for real (uvicorn on a free loopback port, in a thread); the page loads the ready scenarios,
runs the quickstart shorthand it opens with (8 requests of 512 → 128 at once), and its TTFT p50 card must show
the API's own answer for that call, rounded as the card shows it. ``.ci/run`` installs Chromium and its driver
where they are missing.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")
selenium = pytest.importorskip("selenium")
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                                reason="no chromium / chromedriver here (.ci/run installs them)")


@pytest.fixture(scope="module")
def server():
    import uvicorn

    from simmodel.serve.app import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning")
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    for _ in range(200):
        if running.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    running.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,2000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


def test_the_page_runs_the_quickstart_shorthand_and_shows_the_api_s_answer(server, browser):
    import httpx
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#scenario option[value=quickstart]"))
    browser.find_element(By.ID, "run").click()
    card = wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, ".card[data-key=ttft_ms_p50] .value")))
    shown = card.text
    api = httpx.post(server + "/api/scenarios", json={"scenario": "quickstart", "num_requests": 8,
                                                       "prompt_tokens": 512, "output_tokens": 128,
                                                       "arrival_rate_rps": 0}, timeout=60).json()
    assert shown == f"{api['aggregate']['ttft_ms_p50']:.2f}"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#requests tbody tr")) == 8
    assert len(browser.find_elements(By.CSS_SELECTOR, "#charts .chart")) == 6
    browser.find_element(By.CSS_SELECTOR, "#requests th[data-col=ttft_ms]").click()  # (sorts by TTFT)
    assert "▲" in browser.find_element(By.CSS_SELECTOR, "#requests th[data-col=ttft_ms]").text
