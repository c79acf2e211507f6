"""The memory console in a real browser: Debian's headless Chromium driven by Selenium through
/usr/bin/chromedriver (Selenium Manager offline: nothing is downloaded), against the five
services as processes. The tests walk the flows a person would: sign in with a link, see what is
remembered and why, edit their own memory with the keyboard, delete an inferred one, export,
erase (with a confirmation); an operator signs in by pasting a token, finds a user and their runs.

Every page visited is checked by axe-core (WCAG 2.1 A/AA: labels, contrast, names, landmarks)
and photographed (desktop and 375 px wide) into .local/console/, or into docs/console/ with
MEMWRIGHT_CONSOLE_SHOTS=docs/console. Page weight and time to first render are read from the
Navigation and Paint Timing APIs and written beside them to measurements.json: recorded, never
asserted (a shared, noisy machine).

Skipped, with the reason, only when Chromium cannot be installed (deploy/tools/install-chromium.sh,
run by `make tools`)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from memwright.auth import mint
from memwright.settings import AuthSettings
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from tests.conftest import JWT_SECRET
from tests.e2e.conftest import Pipeline
from tests.e2e.helpers import eventually, new_user, signal

ROOT = Path(__file__).resolve().parents[2]
# screenshots and timings go to .local/console/ (not tracked); MEMWRIGHT_CONSOLE_SHOTS=docs/console
# refreshes the ones docs/console.md shows
SHOTS = ROOT / os.environ.get("MEMWRIGHT_CONSOLE_SHOTS", ".local/console")
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
INSTALL = ROOT / "deploy" / "tools" / "install-chromium.sh"
WCAG = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
AUTH = AuthSettings(jwt_secret=JWT_SECRET)
EVIL = "I work night shifts <script>alert('owned')</script><img src=x onerror=alert(2)>"


def _axe_path() -> Path | None:
    found = sorted((ROOT / ".local" / "tools").glob("axe-core-*/axe.min.js"))
    return found[-1] if found else None


def _installed() -> Path:
    """axe.min.js, after installing what is missing; skip (with why) only when that fails."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists() and _axe_path()):
        done = subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            pytest.skip(f"Chromium could not be installed ({INSTALL.name}): {done.stderr.strip()[-300:]}")
    axe = _axe_path()
    assert axe is not None, f"{INSTALL.name} ran but left no axe.min.js under .local/tools"
    return axe


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    axe = _installed()
    downloads = tmp_path_factory.mktemp("downloads")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never download a browser or a driver
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--hide-scrollbars", "--lang=en-US"):
        options.add_argument(arg)
    options.add_argument("--window-size=1100,900")
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads)})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    driver.axe_source = axe.read_text()  # type: ignore[attr-defined]
    driver.downloads = downloads  # type: ignore[attr-defined]
    try:
        yield driver
    finally:
        driver.quit()


class People:
    """Two users with memories from real messages, curated by the real pipeline."""

    def __init__(self, ada: str, bo: str, own_id: str, evil_id: str) -> None:
        self.ada, self.bo, self.own_id, self.evil_id = ada, bo, own_id, evil_id


@pytest.fixture(scope="module")
async def people(pipeline: Pipeline, e2e_pool: asyncpg.Pool) -> People:
    ada, bo = f"ada-{new_user()}", f"bo-{new_user()}"
    signals = [
        signal(ada, "Always answer in metric units.", "ada-trip", f"{ada}-1"),
        signal(ada, "How far is Lyon from Paris?", "ada-trip", f"{ada}-2"),
        signal(ada, "I'm a vegetarian, so which restaurants near the station would work?", "ada-trip", f"{ada}-3"),
        signal(ada, "Never use emoji in your replies.", "ada-code", f"{ada}-4"),
        signal(bo, "Always cite your sources.", "bo-research", f"{bo}-1"),
    ]
    async with aiohttp.ClientSession() as http:
        async with http.post(pipeline.ingest + "/v1/signals", json={"signals": signals}, headers=pipeline.auth()) as r:
            assert r.status == 202, await r.text()
        ids = []
        for text in ("My name is Ada", EVIL):
            async with http.post(
                f"{pipeline.api}/v1/users/{ada}/memories", json={"text": text, "kind": "fact"}, headers=_bearer(ada)
            ) as r:
                assert r.status == 201, await r.text()
                ids.append((await r.json())["id"])

    async def curated() -> bool:
        counts = await e2e_pool.fetch(
            "SELECT user_id, count(*) AS n FROM memories WHERE author = 'agent' AND user_id = ANY($1) GROUP BY 1",
            [ada, bo],
        )
        return {r["user_id"]: r["n"] for r in counts} == {ada: 2, bo: 1}

    await eventually(curated, timeout=90, what="the agents to remember two things of ada's and one of bo's")
    return People(ada, bo, ids[0], ids[1])


def _bearer(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint(AUTH, user, ['memories:read', 'memories:write'])}"}


# ---- helpers ---------------------------------------------------------------------------


def _wait_for(driver: WebDriver, css: str) -> Any:
    return WebDriverWait(driver, 15).until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)))


def _h1(driver: WebDriver) -> str:
    return str(_wait_for(driver, "h1").text)


def _accessible(driver: WebDriver, page: str) -> None:
    """axe-core's WCAG 2.1 A/AA rules on the page as it is: no violation."""
    driver.execute_script(driver.axe_source)  # type: ignore[attr-defined]
    violations = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {runOnly: {type: 'tag', values: arguments[0]}})"
        ".then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.map(n => n.target.join(' '))}))), e => done([{id: 'axe-error', help: String(e)}]));",
        WCAG,
    )
    assert violations == [], f"{page}: accessibility violations {json.dumps(violations, indent=1)}"


def _shot(driver: WebDriver, name: str, width: int = 1100) -> None:
    """A PNG of the whole page at `width` CSS pixels (375: a phone), into SHOTS."""
    mobile = width < 600
    metrics = {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": mobile}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {**metrics, "height": min(max(height, 400), 1800)})
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))
    if mobile:  # nothing may stick out sideways on a phone
        overflow = driver.execute_script("return document.documentElement.scrollWidth")
        assert overflow <= width, f"{name}: the page is {overflow} px wide at {width} px"
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def _timing(driver: WebDriver) -> dict[str, Any]:
    """Navigation and Paint Timing of the page just loaded: bytes over the wire and milliseconds
    (once the page has loaded and painted, or after 5 s without a paint: then the paint is None)."""
    painted = "return document.readyState === 'complete' && performance.getEntriesByType('paint').length > 1"
    try:
        WebDriverWait(driver, 5).until(lambda d: d.execute_script(painted))
    except TimeoutException:
        pass
    return dict(
        driver.execute_script(
            "const n = performance.getEntriesByType('navigation')[0];"
            "const fcp = performance.getEntriesByName('first-contentful-paint')[0];"
            "const fp = performance.getEntriesByName('first-paint')[0];"
            "const res = performance.getEntriesByType('resource');"
            "return {html_bytes: n.transferSize, html_decoded_bytes: n.decodedBodySize,"
            " resources: res.map(r => r.name.split('/').pop()),"
            " resource_bytes: res.reduce((s, r) => s + r.transferSize, 0),"
            " resource_decoded_bytes: res.reduce((s, r) => s + r.decodedBodySize, 0),"
            " ttfb_ms: Math.round(n.responseStart - n.startTime),"
            " first_paint_ms: fp ? Math.round(fp.startTime) : null,"
            " first_contentful_paint_ms: fcp ? Math.round(fcp.startTime) : null,"
            " dom_content_loaded_ms: Math.round(n.domContentLoadedEventEnd - n.startTime),"
            " load_ms: Math.round(n.loadEventEnd - n.startTime)};"
        )
    )


def _record(name: str, timing: dict[str, Any]) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / "measurements.json"
    recorded = json.loads(path.read_text()) if path.exists() else {}
    recorded[name] = {**timing, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")


def _no_alert(driver: WebDriver) -> None:
    try:
        text = driver.switch_to.alert.text
    except NoAlertPresentException:
        return
    raise AssertionError(f"a memory ran script in the page (alert {text!r})")


def _sign_in_link(pipeline: Pipeline, user: str) -> str:
    return f"{pipeline.api}/console/sign-in#token={mint(AUTH, user, ['memories:read', 'memories:write'])}"


def _open_sign_in_link(browser: WebDriver, link: str) -> None:
    """Open a sign-in link: the page fills in the token and waits for the person's press."""
    browser.get(link)
    assert "#token" not in browser.current_url  # taken out of the address bar at once
    assert "Press Sign in" in _wait_for(browser, "[role=status]").text
    assert browser.current_url.endswith("/console/sign-in"), "a link must not sign anyone in unasked"
    browser.switch_to.active_element.send_keys(Keys.ENTER)  # the Sign in button has the focus


# ---- the flows -------------------------------------------------------------------------


async def test_a_sign_in_link_opens_what_is_remembered_with_authors_hypotheses_and_budget(
    browser: WebDriver, pipeline: Pipeline, people: People
) -> None:
    browser.delete_all_cookies()
    browser.get(f"{pipeline.api}/console/")
    _wait_for(browser, "#sign-in")
    _record("sign-in page", _timing(browser))
    _accessible(browser, "sign-in")
    _shot(browser, "sign-in")
    _open_sign_in_link(browser, _sign_in_link(pipeline, people.ada))
    WebDriverWait(browser, 15).until(expected_conditions.url_contains(f"/console/users/{people.ada}"))
    assert "#token" not in browser.current_url and "token=" not in browser.current_url
    assert _h1(browser) == f"What memwright remembers about {people.ada}"
    _record("a user's memories", _timing(browser))  # after the redirect; stylesheet and script cached
    cookie = browser.get_cookie("memwright_console")
    assert cookie and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert browser.execute_script("return document.cookie") == "", "scripts must not read the session"

    page = browser.find_element(By.TAG_NAME, "main").text
    assert "Always answer in metric units" in page and "Never use emoji" in page
    assert "My name is Ada" in page and "vegetarian" in page  # own memory and a hypothesis
    assert "Inferred by the agent: 2 of 40" in page and "Written by you: 2 of 100" in page
    assert "seen once, in 1 conversation" in page
    badges = [b.text for b in browser.find_elements(By.CSS_SELECTOR, ".memory .badge")]
    assert sorted(badges) == ["inferred", "inferred", "you", "you"]
    # a memory holding markup is shown as text and runs nothing
    assert "<script>alert('owned')</script>" in page
    assert browser.find_elements(By.CSS_SELECTOR, "main script, main img") == []
    _no_alert(browser)

    _accessible(browser, "a user's memories")
    _shot(browser, "memories")
    _shot(browser, "memories-phone", width=375)


async def test_why_shows_the_exact_messages_behind_an_inferred_memory_and_its_history(
    browser: WebDriver, pipeline: Pipeline, people: People
) -> None:
    browser.get(f"{pipeline.api}/console/users/{people.ada}")
    item = next(e for e in browser.find_elements(By.CSS_SELECTOR, ".memory") if "metric" in e.text)
    item.find_element(By.PARTIAL_LINK_TEXT, "Why, history and changes").click()
    _wait_for(browser, "#h-why")
    _record("a memory and why", _timing(browser))
    why = browser.find_element(By.CSS_SELECTOR, "section[aria-labelledby=h-why] table").text
    assert "Always answer in metric units." in why and "ada-trip" in why and f"{people.ada}-1" in why
    history = browser.find_element(By.CSS_SELECTOR, "section[aria-labelledby=h-history] table").text
    assert "create" in history and "agent" in history
    assert browser.find_elements(By.ID, "edit-text") == [], "an inferred memory has no edit form"
    _accessible(browser, "a memory and why")
    _shot(browser, "why")
    _shot(browser, "why-phone", width=375)
    # the message's status, one click away
    browser.find_element(By.LINK_TEXT, f"{people.ada}-1").click()
    assert "remembered" in _wait_for(browser, ".outcome").text
    _accessible(browser, "a message's status")
    _shot(browser, "message-status")


async def test_own_memories_are_added_and_edited_with_the_keyboard_alone(
    browser: WebDriver, pipeline: Pipeline, people: People, e2e_pool: asyncpg.Pool
) -> None:
    browser.get(f"{pipeline.api}/console/users/{people.ada}")
    _wait_for(browser, "h1")
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    focused = browser.switch_to.active_element
    assert focused.text == "Skip to content", "the first tab stop skips to the content"
    focused.send_keys(Keys.ENTER)
    # tab to the add form: every stop on the way is a link, a button or a field
    for _ in range(40):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        focused = browser.switch_to.active_element
        assert focused.tag_name in ("a", "button", "input", "textarea"), focused.tag_name
        if focused.get_attribute("id") == "new-text":
            break
    else:
        raise AssertionError("the add form was not reached with the tab key")
    focused.send_keys("I prefer window seats")
    focused.send_keys(Keys.TAB)  # to kind: keep "preference"
    browser.switch_to.active_element.send_keys(Keys.TAB)
    button = browser.switch_to.active_element
    assert button.text == "Add memory"
    button.send_keys(Keys.ENTER)
    assert "Your memory was added." in _wait_for(browser, ".notice").text
    assert await e2e_pool.fetchval(
        "SELECT count(*) FROM memories WHERE user_id = $1 AND text = 'I prefer window seats'", people.ada
    )

    browser.get(f"{pipeline.api}/console/users/{people.ada}/memories/{people.own_id}")
    text = _wait_for(browser, "#edit-text")
    text.send_keys(Keys.CONTROL, "a")
    text.send_keys("My name is Ada Lovelace")
    text.send_keys(Keys.TAB)
    browser.switch_to.active_element.send_keys(Keys.TAB)
    assert browser.switch_to.active_element.text == "Save changes"
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    assert "Your memory was changed." in _wait_for(browser, ".notice").text
    assert "My name is Ada Lovelace" in browser.find_element(By.CSS_SELECTOR, ".memory.big").text
    history = browser.find_element(By.CSS_SELECTOR, "section[aria-labelledby=h-history] table").text
    assert "update" in history and "edited in the console" in history
    _accessible(browser, "an own memory")
    _shot(browser, "edit-own")


async def test_an_inferred_memory_is_deleted_and_the_deletion_is_in_its_history(
    browser: WebDriver, pipeline: Pipeline, people: People, e2e_pool: asyncpg.Pool
) -> None:
    browser.get(f"{pipeline.api}/console/users/{people.ada}")
    item = next(e for e in browser.find_elements(By.CSS_SELECTOR, ".memory") if "emoji" in e.text)
    item.find_element(By.PARTIAL_LINK_TEXT, "Why, history and changes").click()
    memory_url = browser.current_url
    _wait_for(browser, "#h-delete")
    browser.find_element(By.XPATH, "//button[text()='Delete this inferred memory']").click()
    assert "will not be written again" in _wait_for(browser, ".notice").text
    assert "emoji" not in browser.find_element(By.TAG_NAME, "main").text
    assert "Inferred by the agent: 1 of 40" in browser.find_element(By.CSS_SELECTOR, ".budget").text
    _shot(browser, "deleted-inferred")
    browser.get(memory_url)
    assert "This memory was deleted" in _wait_for(browser, "main").text
    history = browser.find_element(By.CSS_SELECTOR, "section[aria-labelledby=h-history] table").text
    assert "delete" in history and "deleted in the console" in history
    assert not await e2e_pool.fetchval(
        "SELECT count(*) FROM memories WHERE user_id = $1 AND text ILIKE '%emoji%'", people.ada
    )


async def test_export_downloads_everything_held_about_the_user(
    browser: WebDriver, pipeline: Pipeline, people: People
) -> None:
    browser.get(f"{pipeline.api}/console/users/{people.ada}")
    browser.find_element(By.LINK_TEXT, "Download everything (JSON)").click()
    target = browser.downloads / f"memwright-export-{people.ada}.json"  # type: ignore[attr-defined]

    async def downloaded() -> bool:
        return target.exists()

    await eventually(downloaded, timeout=20, what=f"the export to arrive in {target.parent}")
    document = json.loads(target.read_text())
    texts = json.dumps(document)
    assert "My name is Ada Lovelace" in texts and "Always answer in metric units" in texts
    assert "How far is Lyon from Paris?" in texts  # the messages too, not only the memories


async def test_erasing_everything_asks_for_the_user_id_then_leaves_nothing(
    browser: WebDriver, pipeline: Pipeline, people: People, e2e_pool: asyncpg.Pool
) -> None:
    browser.get(f"{pipeline.api}/console/users/{people.ada}")
    browser.find_element(By.LINK_TEXT, "Erase everything…").click()
    confirm = _wait_for(browser, "#confirm")
    _accessible(browser, "the erase confirmation")
    _shot(browser, "erase-confirm")
    confirm.send_keys("not me")
    confirm.send_keys(Keys.ENTER)
    assert "nothing was erased" in _wait_for(browser, ".error").text
    assert await e2e_pool.fetchval("SELECT count(*) FROM memories WHERE user_id = $1", people.ada) == 4
    browser.back()
    confirm = _wait_for(browser, "#confirm")
    confirm.clear()
    confirm.send_keys(people.ada)
    confirm.send_keys(Keys.ENTER)
    assert "was erased" in _wait_for(browser, ".notice").text
    _shot(browser, "erased")
    assert await e2e_pool.fetchval("SELECT count(*) FROM memories WHERE user_id = $1", people.ada) == 0
    assert await e2e_pool.fetchval("SELECT count(*) FROM messages WHERE user_id = $1", people.ada) == 0


async def test_the_operator_pastes_a_token_finds_a_user_and_reads_their_runs(
    browser: WebDriver, pipeline: Pipeline, people: People
) -> None:
    browser.delete_all_cookies()
    browser.get(f"{pipeline.api}/console/users/{people.bo}")
    assert "sign in first" in _wait_for(browser, ".error").text  # 401 without a session
    operator = mint(AUTH, "service:ops-console", ["admin"])
    browser.find_element(By.ID, "token").send_keys(operator)
    browser.find_element(By.ID, "token").send_keys(Keys.ENTER)
    assert _h1(browser) == "Operator console"
    _record("operator console", _timing(browser))
    tiles = browser.find_element(By.CSS_SELECTOR, "dl.tiles").text
    for label in ("users waiting", "oldest waiting", "outbox depth", "failed runs"):
        assert label in tiles
    find = browser.find_element(By.ID, "q")
    find.send_keys(people.bo[:6])
    find.send_keys(Keys.ENTER)
    browser.find_element(By.LINK_TEXT, people.bo).click()
    assert _h1(browser) == f"Runs of {people.bo}"
    runs = browser.find_element(By.CSS_SELECTOR, "table").text
    assert "committed" in runs and "rules" in runs
    _accessible(browser, "a user's runs")
    _shot(browser, "operator-runs")
    browser.back()
    _wait_for(browser, "dl.tiles")
    _accessible(browser, "the operator console")
    _shot(browser, "operator")
    _shot(browser, "operator-phone", width=375)
    # another user's pages stay closed to a user's session
    browser.delete_all_cookies()
    _open_sign_in_link(browser, _sign_in_link(pipeline, people.bo))
    WebDriverWait(browser, 15).until(expected_conditions.url_contains(f"/console/users/{people.bo}"))
    browser.get(f"{pipeline.api}/console/users/{people.ada}")
    assert "may not see this user's memories" in _wait_for(browser, ".error").text
    browser.get(f"{pipeline.api}/console/ops")
    assert "service token with the admin scope" in _wait_for(browser, ".error").text
