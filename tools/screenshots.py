"""The screenshots in docs/serve.md and docs/plots.md, taken in headless Chromium (Selenium).

Starts ``simmodel serve`` on a free port, runs the quickstart shorthand on the page and captures it; writes
``simmodel plot`` of a 60-request quickstart run and captures the report. Needs the serve extra, selenium,
Debian's chromium and chromium-driver.

    python tools/screenshots.py
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait

from simmodel.serve.app import create_app

REPO = Path(__file__).resolve().parents[1]
IMAGES = REPO / "docs" / "images"


def browser(width: int, height: int) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    driver = browser(1300, 2400)
    try:
        driver.get(f"http://127.0.0.1:{port}/")
        wait = WebDriverWait(driver, 60)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#scenario option[value=quickstart]"))
        driver.find_element(By.ID, "run").click()
        wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "#charts .chart")))
        time.sleep(1)
        driver.save_screenshot(str(IMAGES / "serve-page.png"))
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            subprocess.run([sys.executable, "-m", "simmodel.cli", "run", "-c", str(REPO / "scenarios" / "quickstart.yaml"),
                            "--set", "traffic.stop.requests=60", "--output-dir", str(run), "--quiet"], check=True)
            subprocess.run([sys.executable, "-m", "simmodel.cli", "plot", str(run)], check=True)
            driver.get((run / "report.html").as_uri())
            time.sleep(2)
            driver.save_screenshot(str(IMAGES / "plot-report.png"))
    finally:
        driver.quit()
        server.should_exit = True
    print(IMAGES / "serve-page.png", IMAGES / "plot-report.png")


if __name__ == "__main__":
    main()
