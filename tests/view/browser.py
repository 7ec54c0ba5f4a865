"""A real headless Chromium (Debian's `chromium` + `chromium-driver`) driven by selenium, fully offline."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def find_browser() -> tuple[str, str]:
    """The browser and driver binaries; a missing one FAILS the test with the install line (never skips)."""
    browser = shutil.which("chromium") or CHROMIUM
    driver = shutil.which("chromedriver") or CHROMEDRIVER
    if not (shutil.which(browser) and shutil.which(driver)):
        raise AssertionError("the viewer tests need Chromium: apt-get install -y chromium chromium-driver")
    return browser, driver


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[webdriver.Chrome]:
    browser, driver_path = find_browser()
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--disable-extensions", "--no-first-run"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: selenium never runs selenium-manager, which would try to download a driver.
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def js_errors(driver: webdriver.Chrome) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
