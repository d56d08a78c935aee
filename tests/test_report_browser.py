"""The HTML support matrix in a real headless browser: Debian's chromium + chromium-driver, driven
by selenium, against the page served on 127.0.0.1. It must load without console errors, and its
grid must show the statuses of the fixture catalog.

Without chromium these tests skip with the fix; CI (BUILDER_REQUIRE_BROWSER=1, set by
scripts/test.sh) fails instead, and .ci/docker-up.sh installs the packages.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builder.report.html import render_html
from tests.test_report import EXPECTED, KNOWN_GOOD, RUNS_ON, fixture_report

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
NO_BROWSER = "no headless browser: apt-get install chromium chromium-driver (bash .ci/docker-up.sh does)"
FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-default-apps",
)  # fmt: skip


@pytest.fixture(scope="module")
def page_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("report")
    (root / "index.html").write_text(render_html(fixture_report()), encoding="utf-8")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    server.shutdown()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists() and shutil.which("chromedriver")):
        if os.environ.get("BUILDER_REQUIRE_BROWSER") == "1":
            pytest.fail(NO_BROWSER)
        pytest.skip(NO_BROWSER)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def test_the_page_loads_without_console_errors(browser: Any, page_url: str) -> None:
    browser.get(page_url)
    assert browser.title == "Support matrix"
    logs = browser.get_log("browser")
    errors = [entry for entry in logs if entry.get("level") == "SEVERE"]
    assert errors == [], errors


def test_the_grid_shows_the_fixture_statuses(browser: Any, page_url: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(page_url)
    shown = {
        chip.get_attribute("data-id"): chip.get_attribute("data-status")
        for chip in browser.find_elements(By.CSS_SELECTOR, "#grid td .chip")
        if chip.get_attribute("data-status") != "skipped"
    }
    assert shown == EXPECTED
    cell = browser.find_element(By.CSS_SELECTOR, '#grid td[data-base="cuda12.4-ubuntu22.04"][data-stack="torch"]')
    assert "torch 2.5.1 py3.11" in cell.text
    known = cell.find_element(By.CSS_SELECTOR, '.chip[data-status="known-good"]')
    assert known.value_of_css_property("background-color") in (
        "rgba(26, 127, 55, 1)",
        "rgb(26, 127, 55)",
    )  # the known-good colour, rendered
    skipped = browser.find_elements(By.CSS_SELECTOR, '#grid .chip[data-status="skipped"]')
    assert skipped and all(chip.get_attribute("title").startswith("skipped: excluded by") for chip in skipped)
    counts = browser.find_element(By.ID, "counts").text
    assert "1 known-good (published, passed)" in counts and "1 failed" in counts


def test_the_images_table_shows_what_a_known_good_image_runs_on(browser: Any, page_url: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(page_url)
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#images thead th")]
    assert "runs on" in headers
    column = headers.index("runs on")
    cells = browser.find_elements(By.CSS_SELECTOR, f'#images tr[data-id="{KNOWN_GOOD}"] td')
    assert cells[column].text == RUNS_ON  # the rendered text, with its ">=" shown as such
    others = browser.find_elements(By.CSS_SELECTOR, f'#images tbody tr:not([data-id="{KNOWN_GOOD}"]) td.runs-on')
    assert others and all(cell.text == "" for cell in others), "only a known-good image says what it runs on"
