"""Plain `locust -f scenarios/soak.py` with its real web UI: the loadkit tab shows corrected percentiles.

Real Locust (its web UI on an ephemeral port on 127.0.0.1, `--autostart`),
the real Triton; the page, the UI's own `/stats/requests` poll and
`/loadkit/stats` are fetched while the scenario runs, and the numbers are
checked against the run directory's final interval histograms.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from loadkit.rundir import load_run, new_histogram, read_interval_log
from loadkit.target.server import EmbeddedTriton

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("triton_webui") / "triton.log"
    with EmbeddedTriton(log_path=log) as t:
        yield t


def _free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def test_web_ui_tab_and_api_show_loadkit_corrected_percentiles(triton: Any, tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADKIT_")}
    env["LOADKIT_PARAMS"] = json.dumps({"rate": 50.0, "duration_s": 16.0})
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(REPO / "scenarios" / "soak.py"),
        "--host",
        triton.http_url,
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
        "--autostart",
        "--autoquit",
        "1",
        "--loglevel",
        "WARNING",
    ]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    base = f"http://127.0.0.1:{port}"
    page = ""
    polled: list[dict[str, Any]] = []
    api: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if not page:
                    page = _get(base + "/")
                stats = json.loads(_get(base + "/stats/requests"))
                ours = json.loads(_get(base + "/loadkit/stats"))
            except OSError:
                time.sleep(0.3)
                continue
            snapshot = ours["snapshot"]
            if snapshot and snapshot["window_s"] >= 5 and snapshot["corrected_s"]["p99"]:
                polled.append(stats)
                api.append(ours)
                if len(api) >= 3:
                    break
            time.sleep(1.0)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, out[-3000:]
    assert api, f"no loadkit numbers while the scenario ran\n{out[-3000:]}"

    # THEN the page declares the loadkit tab and table through Locust's extension points
    assert '"extended_tabs": [{"key": "loadkit", "title": "loadkit"}]' in page or (
        '"extended_tabs"' in page and '"loadkit"' in page
    )
    assert '"extended_tables"' in page and "P99 ms" in page
    # and the UI's own stats poll carries the tab's rows: corrected first, service second
    extended = {e["key"]: e["data"] for e in polled[-1]["extended_stats"]}
    rows = extended["loadkit"]
    assert [r["kind"] for r in rows] == ["corrected", "service"]
    assert rows[0]["p99_ms"] > 0 and rows[0]["p99_ms"] >= rows[1]["p99_ms"] * 0.999

    # AND those are the run directory's numbers for the window they name
    runs = [p for p in (tmp_path / "reports").iterdir() if (p / "manifest.json").exists()]
    assert len(runs) == 1
    run = load_run(runs[0])
    assert run.status == "complete"
    intervals = [
        i for path in (runs[0] / "latency").glob("*.hlog") for i in read_interval_log(path)
    ]
    for ours in api:
        s = ours["snapshot"]
        start, end = s["window_start_ns"], s["window_end_ns"]
        for kind in ("corrected", "service"):
            merged = new_histogram()
            for i in intervals:
                if i.kind == kind and start <= i.start_ns < end:
                    merged.add(i.histogram)
            for key, q in (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9)):
                assert s[f"{kind}_s"][key] == merged.get_value_at_percentile(q) / 1e6, (kind, key)
        row = ours["rows"][0]
        assert row["p99_ms"] == round(s["corrected_s"]["p99"] * 1000, 3)
    print(
        f"\nweb UI: corrected p99 {api[-1]['rows'][0]['p99_ms']} ms over {api[-1]['snapshot']['window_s']} s"
    )
