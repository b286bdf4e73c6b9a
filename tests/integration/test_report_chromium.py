"""Open the HTML report in headless Chromium: no console errors, verdict visible, screenshot.

Chromium is driven through the DevTools protocol (websocket-client), which
reports page exceptions, console errors and browser-side errors (a CSP
violation, an image that fails to decode) as events, instead of grepping logs.
Set LOADKIT_SCREENSHOT_DIR to keep the screenshots (CI artifacts).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "report"))
from analysis_builder import HOSTILE, make_analysis, make_run  # noqa: E402

from loadkit.report import html  # noqa: E402

websocket = pytest.importorskip("websocket", reason="websocket-client is not installed")

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
STARTUP_TIMEOUT_S = 30.0
PAGE_TIMEOUT_S = 30.0
VIEWPORT = {"width": 1280, "height": 1000}


class DevToolsPage:
    """A minimal DevTools protocol client for one page target: commands and events."""

    def __init__(self, ws_url: str) -> None:
        self._ws = websocket.create_connection(ws_url, timeout=PAGE_TIMEOUT_S, suppress_origin=True)
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        msg_id = self._next_id
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method} failed: {msg['error']}")
                return dict(msg.get("result", {}))
            if "method" in msg:
                self.events.append(msg)

    def wait_for(self, event: str, timeout_s: float = PAGE_TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        for seen in self.events:
            if seen["method"] == event:
                return seen
        while time.monotonic() < deadline:
            msg = json.loads(self._ws.recv())
            if "method" in msg:
                self.events.append(msg)
                if msg["method"] == event:
                    return msg
        raise TimeoutError(f"no {event} within {timeout_s} s")

    def close(self) -> None:
        self._ws.close()


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[int]:
    """A headless Chromium on 127.0.0.1 with an ephemeral DevTools port; stopped by PID."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (CI installs it: apt-get install -y chromium)")
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    proc = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--disable-extensions",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "chromium.log", "wb"),  # noqa: SIM115
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        port = None
        while time.monotonic() < deadline and proc.poll() is None:
            if port_file.exists():
                first = port_file.read_text().split("\n")[0].strip()
                if first.isdigit():
                    port = int(first)
                    break
            time.sleep(0.05)
        if port is None:
            log = (tmp_path / "chromium.log").read_text(errors="replace")[-2000:]
            pytest.fail(f"chromium did not open its DevTools port (exit {proc.poll()}):\n{log}")
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _page_target(port: int) -> str:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
            targets = json.load(resp)
        pages = [t for t in targets if t.get("type") == "page"]
        if pages:
            return str(pages[0]["webSocketDebuggerUrl"])
        if time.monotonic() > deadline:
            raise TimeoutError("chromium has no page target")
        time.sleep(0.1)


PAGE_CHECK = """(() => {
  const v = document.getElementById('verdict');
  const badge = document.getElementById('verdict-badge');
  if (!v || !badge) return {found: false};
  const r = v.getBoundingClientRect();
  const s = getComputedStyle(v);
  return {
    found: true,
    text: v.innerText,
    badge: badge.innerText,
    badgeColour: getComputedStyle(badge).backgroundColor,
    top: r.top, bottom: r.bottom, width: r.width, height: r.height,
    visible: s.display !== 'none' && s.visibility === 'visible' && Number(s.opacity) > 0.5,
    viewportHeight: window.innerHeight,
    images: Array.from(document.images).map(i => ({complete: i.complete, width: i.naturalWidth})),
    findings: document.querySelectorAll('article.card').length,
    hostileElements: document.querySelectorAll('img[onerror], script').length,
    bodyText: document.body.innerText,
  };
})()"""


def _problems(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        method, p = e["method"], e.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = p.get("exceptionDetails", {})
            what = details.get("exception", {}).get("description") or ""
            out.append(f"exception: {details.get('text')} {what}".strip())
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append(f"console.{p.get('type')}: {p.get('args')}")
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append(f"log error: {p['entry'].get('text')} ({p['entry'].get('url', '')})")
    return out


def _open_and_check(port: int, page_path: Path, shot_name: str) -> tuple[dict[str, Any], bytes]:
    page = DevToolsPage(_page_target(port))
    try:
        for domain in ("Runtime", "Log", "Page"):
            page.send(f"{domain}.enable")
        page.send(
            "Emulation.setDeviceMetricsOverride",
            width=VIEWPORT["width"],
            height=VIEWPORT["height"],
            deviceScaleFactor=1,
            mobile=False,
        )
        page.send("Page.navigate", url=page_path.resolve().as_uri())
        page.wait_for("Page.loadEventFired")
        state = page.send("Runtime.evaluate", expression=PAGE_CHECK, returnByValue=True)
        result = state["result"]["value"]
        shot = base64.b64decode(page.send("Page.captureScreenshot", format="png")["data"])
        # Late console messages (none expected) arrive as events before this reply.
        page.send("Runtime.evaluate", expression="1")
        problems = _problems(page.events)
    finally:
        page.close()
    keep = os.environ.get("LOADKIT_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / shot_name).write_bytes(shot)
    assert not problems, "browser reported errors:\n" + "\n".join(problems)
    return result, shot


def test_report_opens_without_errors_and_shows_the_verdict(chromium: int, tmp_path: Path):
    run = make_run(tmp_path / "20251129-205000-burst")
    page_path = tmp_path / "report.html"
    page_path.write_text(html.render(run, make_analysis(n=600)), encoding="utf-8")
    (tmp_path / "report.png").unlink(missing_ok=True)

    state, shot = _open_and_check(chromium, page_path, "report.png")
    (tmp_path / "report.png").write_bytes(shot)

    assert state["found"], "no verdict element in the page"
    assert state["visible"] and state["width"] > 600 and state["height"] > 30
    assert 0 <= state["top"] and state["bottom"] <= state["viewportHeight"], (
        "verdict not above the fold"
    )
    assert "FAIL" in state["badge"] and "did not meet its SLO" in state["text"]
    assert state["badgeColour"] == "rgb(180, 35, 24)"  # --fail
    assert state["images"] and all(i["complete"] and i["width"] > 0 for i in state["images"])
    assert state["findings"] == 1
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000


def test_hostile_report_runs_no_script_in_the_browser(chromium: int, tmp_path: Path):
    run = make_run(tmp_path / "hostile", hostile=HOSTILE)
    page_path = tmp_path / "hostile.html"
    page_path.write_text(html.render(run, make_analysis(n=60, hostile=HOSTILE)), encoding="utf-8")
    state, _ = _open_and_check(chromium, page_path, "hostile.png")
    # The string is shown to the reader as text, and made no element.
    assert state["hostileElements"] == 0
    assert HOSTILE in state["bodyText"]


def test_report_of_an_analyzed_synthetic_run(chromium: int, tmp_path: Path):
    """Recorded-format run -> real analysis -> `loadkit report` -> browser."""
    from loadkit.cli import main
    from loadkit.testing.synthetic import demo_spec, write_run

    path = write_run(demo_spec(), tmp_path, run_id="demo")
    assert main(["report", str(path)]) == 0
    state, _ = _open_and_check(chromium, path / "report.html", "synthetic.png")
    assert state["visible"] and state["bottom"] <= state["viewportHeight"]
    assert state["badge"].endswith(("PASS", "FAIL"))
    assert state["images"] and all(i["complete"] and i["width"] > 0 for i in state["images"])
