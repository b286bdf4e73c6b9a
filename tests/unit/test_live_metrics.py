"""The live snapshot as Prometheus metrics, the progress line, and the Grafana dashboard file."""

from __future__ import annotations

import io
import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadkit.errors import UsageError
from loadkit.load.generator.recorder import LatencyRecorder
from loadkit.load.live import LiveRunReader
from loadkit.load.metrics_endpoint import MetricsEndpoint
from loadkit.load.progress import ProgressPrinter, progress_line

S = 1_000_000_000
MS = 1_000_000
T0 = 1_764_449_000 * S
REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "docs" / "grafana" / "loadkit-live.json"


class FakeClock:
    def __init__(self, t_ns: int):
        self.t_ns = t_ns

    def __call__(self) -> int:
        return self.t_ns


def _snapshot(tmp_path: Path, seconds: int = 12):
    rec = LatencyRecorder(tmp_path, "local", clock_ns=FakeClock(T0))
    for second in range(seconds):
        for i in range(10):
            t = T0 + second * S + i * 100 * MS
            rec.offered("infer", t, dispatch_lag_ns=2 * MS if second == 5 else 0)
            rec.started("infer", t + MS, intended_ns=t)
            ok = i != 0 or second != 11
            rec.completed(
                "infer",
                intended_ns=t,
                sent_ns=t + MS,
                done_ns=t + (i + 1) * 5 * MS,
                ok=ok,
                error_kind=None if ok else "timeout",
            )
        rec.tick(T0 + (second + 1) * S + 1)
    return LiveRunReader(tmp_path).snapshot(12.0, 60.0)


def test_snapshot_covers_the_last_ten_complete_seconds(tmp_path: Path) -> None:
    s = _snapshot(tmp_path)
    assert s.window_s == 10 and s.window_start_ns == T0 + 2 * S and s.window_end_ns == T0 + 12 * S
    assert s.offered_per_s == 10.0 and s.achieved_per_s == 10.0
    assert s.corrected_s["p50"] == pytest.approx(0.03, rel=0.01)  # one 5 ms request failed
    assert s.corrected_s["p999"] == pytest.approx(0.05, rel=0.01)
    assert s.service_s["p999"] == pytest.approx(0.049, rel=0.01)
    assert s.errors_total == 1 and s.error_kinds_total == {"timeout": 1}
    assert s.dispatch_lag_max_s == pytest.approx(0.002)


def test_endpoint_serves_the_snapshot_in_prometheus_text_format(tmp_path: Path) -> None:
    s = _snapshot(tmp_path)
    endpoint = MetricsEndpoint("127.0.0.1", 0, {"run_id": "r1", "scenario": "soak"})
    try:
        endpoint.publish(s)
        with urllib.request.urlopen(endpoint.url, timeout=5) as response:
            text = response.read().decode()
    finally:
        endpoint.close()
    samples = {
        (x.name, tuple(sorted(x.labels.items()))): x.value
        for family in text_string_to_metric_families(text)
        for x in family.samples
    }
    key = ("loadkit_request_latency_seconds", (("kind", "corrected"), ("quantile", "0.99")))
    assert samples[key] == s.corrected_s["p99"]
    assert samples[("loadkit_offered_requests_per_second", ())] == 10.0
    assert samples[("loadkit_requests_offered_total", ())] == 120.0
    assert samples[("loadkit_request_errors_total", (("kind", "timeout"),))] == 1.0
    assert samples[("loadkit_requests_completed_total", (("outcome", "ok"),))] == 119.0
    assert samples[("loadkit_window_end_timestamp_seconds", ())] == (T0 + 12 * S) / 1e9
    assert samples[("loadkit_run_info", (("run_id", "r1"), ("scenario", "soak")))] == 1.0
    # every loadkit_* name the Grafana dashboard queries is served
    served = {x.name for f in text_string_to_metric_families(text) for x in f.samples}
    served |= {  # a family without samples yet (no phase began): its name
        f.name + ("_total" if f.type == "counter" else "")
        for f in text_string_to_metric_families(text)
    }
    wanted = {n for n in dashboard_metric_names() if n.startswith("loadkit_")}
    assert wanted and wanted <= served, sorted(wanted - served)


def test_a_busy_port_is_one_usage_error() -> None:
    first = MetricsEndpoint("127.0.0.1", 0)
    try:
        with pytest.raises(UsageError, match="cannot listen"):
            MetricsEndpoint("127.0.0.1", first.port)
    finally:
        first.close()


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_progress_is_one_redrawn_line_on_a_terminal_and_a_line_every_n_s_in_a_log(
    tmp_path: Path,
) -> None:
    s = _snapshot(tmp_path)
    line = progress_line(s)
    assert "p99 " in line and "(last 10 s)" in line and "offered 10/s" in line
    tty = _Stream(tty=True)
    printer = ProgressPrinter(tty)
    for _ in range(3):
        printer.show(s)
    printer.finish()
    assert tty.getvalue().count("\r") == 3 and tty.getvalue().count("\n") == 1
    log = _Stream(tty=False)
    printer = ProgressPrinter(log, plain_every_s=5.0)
    from dataclasses import replace

    for t in range(0, 12):
        printer.show(replace(s, elapsed_s=float(t)))
    assert log.getvalue().splitlines() == [
        progress_line(replace(s, elapsed_s=float(t))) for t in (0, 5, 10)
    ]
    assert "\r" not in log.getvalue()


def dashboard_metric_names() -> set[str]:
    """Every metric name the dashboard's queries use (loadkit_*, nv_*, DCGM_*)."""
    data = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in data["panels"] for t in p.get("targets", [])] + [
        v["definition"] for v in data["templating"]["list"]
    ]
    names: set[str] = set()
    for expr in exprs:
        names |= set(re.findall(r"\b(?:loadkit_|nv_|DCGM_)[A-Za-z0-9_]+", expr))
    return names


def test_dashboard_is_valid_json_with_queries_for_each_panel() -> None:
    data = json.loads(DASHBOARD.read_text())
    panels = [p for p in data["panels"] if p["type"] != "row"]
    assert panels and all(p["targets"] and all(t["expr"] for t in p["targets"]) for p in panels)
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    names = dashboard_metric_names()
    assert any(n.startswith("loadkit_") for n in names)
    assert any(n.startswith("nv_") for n in names) and any(n.startswith("DCGM_") for n in names)
