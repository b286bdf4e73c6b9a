"""`--serve-metrics`: scraped during a real run (two Locust workers, the real Triton), then
checked against the run's final interval histograms and load rows for the same windows."""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadkit.load.orchestrator import run_scenario
from loadkit.rundir import load_run, new_histogram, read_interval_log
from loadkit.target.server import EmbeddedTriton

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SECOND = 1_000_000_000
QUANTILES = {"0.5": 50.0, "0.95": 95.0, "0.99": 99.0, "0.999": 99.9}
exposed: set[str] = set()  # every metric name loadkit's endpoint served in this module


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("triton_metrics") / "triton.log"
    with EmbeddedTriton(log_path=log) as t:
        yield t


def _text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def metric_names(text: str) -> set[str]:
    """Every series name an exposition offers (a counter without samples yet: its `_total`)."""
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {sample.name for sample in family.samples}
        names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = _text(url)
    exposed.update(metric_names(text))
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_scraped_percentiles_and_rates_match_the_final_interval_histograms(
    triton: Any, tmp_path: Path
) -> None:
    scrapes: list[dict[Any, float]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def scraper(run_dir: Path) -> None:
        try:
            url = None
            while url is None and not done.is_set():
                url = load_run(run_dir).manifest.get("metrics_endpoint")
                time.sleep(0.1)
            while not done.is_set():
                try:
                    sample = scrape(str(url))
                except OSError:
                    if load_run(run_dir).status != "running":
                        break  # the run ended and closed its endpoint
                    raise
                if sample.get(("loadkit_window_seconds", ())) == 10.0:
                    scrapes.append(sample)
                time.sleep(0.7)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads: list[threading.Thread] = []

    def before_start(writer: Any) -> None:
        thread = threading.Thread(target=scraper, args=(writer.path,), daemon=True)
        thread.start()
        threads.append(thread)

    # GIVEN 18 s of 100/s split over two Locust workers, with the endpoint on a free port
    try:
        run_dir = run_scenario(
            REPO / "scenarios" / "soak.py",
            triton.http_url,
            out_dir=tmp_path,
            workers=2,
            params={"rate": 100.0, "duration_s": 18.0},
            serve_metrics=("127.0.0.1", 0),
            before_start=before_start,
        )
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=10)
    assert not errors, errors
    assert len(scrapes) >= 3, "too few scrapes with a full 10 s window"

    # THEN every scrape's numbers are the final files' numbers over the window it names
    run = load_run(run_dir)
    assert run.status == "complete"
    hlogs = sorted((run_dir / "latency").glob("*.hlog"))
    assert len(hlogs) == 2  # both workers recorded
    intervals = [i for path in hlogs for i in read_interval_log(path)]
    load = run.load_intervals
    checked_phase = False
    events = run.events
    phase = events[events["kind"] == "phase"].set_index("name")["t_ns"]
    load_start, load_end = int(phase["load-start"]), int(phase["load-end"])
    steady = 0
    for sample in scrapes:
        start = round(sample[("loadkit_window_start_timestamp_seconds", ())] * 1e9)
        end = round(sample[("loadkit_window_end_timestamp_seconds", ())] * 1e9)
        assert end - start == 10 * SECOND
        for kind in ("corrected", "service"):
            merged = new_histogram()
            for i in intervals:
                if i.kind == kind and start <= i.start_ns < end:
                    merged.add(i.histogram)
            for label, q in QUANTILES.items():
                scraped = sample[
                    ("loadkit_request_latency_seconds", (("kind", kind), ("quantile", label)))
                ]
                assert scraped == merged.get_value_at_percentile(q) / 1e6, (kind, label)
        rows = load[(load["t_ns"] >= start) & (load["t_ns"] < end)]
        assert len(set(rows["process"])) == 2  # both workers' rows are in the window
        offered = sample[("loadkit_offered_requests_per_second", ())]
        achieved = sample[("loadkit_achieved_requests_per_second", ())]
        assert offered == pytest.approx(int(rows["offered"].sum()) / 10.0)
        assert achieved == pytest.approx(int((rows["ok"] + rows["errors"]).sum()) / 10.0)
        if load_start <= start and end <= load_end:  # a window of steady load: the rate
            assert offered == pytest.approx(100.0, abs=1.0)
            steady += 1
        lag = sample[("loadkit_dispatch_lag_max_seconds", ())]
        assert lag == pytest.approx(float(rows["dispatch_lag_max_ms"].max()) / 1e3)
        last = load[load["t_ns"] == end - SECOND]
        in_flight = sample[("loadkit_requests_in_flight", ())]
        assert in_flight == int(last.groupby("process")["in_flight"].first().sum())
        # counters are totals so far: never above the final ones
        upto = load[load["t_ns"] < end]
        assert sample[("loadkit_requests_offered_total", ())] >= int(upto["offered"].sum())
        assert sample[("loadkit_requests_offered_total", ())] <= int(load["offered"].sum())
        assert sample[("loadkit_arrivals_dropped_total", ())] == int(upto["dropped"].sum()) == 0
        phases = [dict(k[1])["phase"] for k in sample if k[0] == "loadkit_scenario_phase_info"]
        assert len(phases) <= 1
        if phases:
            # the phase that began last before the scrape: soak has no others
            assert phases[0] in ("load-start", "load-end")
            checked_phase |= phases[0] == "load-start"
    assert checked_phase and steady >= 1
    info = [k for k in scrapes[0] if k[0] == "loadkit_run_info"]
    assert dict(info[0][1])["run_id"] == run.run_id
    print(
        f"\n{len(scrapes)} scrapes matched; last corrected p99 "
        f"{scrapes[-1][('loadkit_request_latency_seconds', (('kind', 'corrected'), ('quantile', '0.99')))] * 1e3:.1f} ms"
    )


def test_dashboard_queries_name_only_metrics_that_exist(triton: Any) -> None:
    """Run after the scrape test: loadkit's names from its real scrapes, nv_* from Triton's."""
    from tests.unit.test_live_metrics import dashboard_metric_names

    assert exposed, "run the scrape test first (same module)"
    names = dashboard_metric_names()
    # Triton's counters have no _total suffix: its names as the exposition writes them
    triton_names = set(re.findall(r"^(nv_[A-Za-z0-9_]+)", _text(triton.metrics_url), re.M))
    # dcgm-exporter's format sample (it holds deliberately torn lines: names by the line start)
    sample = (REPO / "tests" / "data" / "import" / "dcgm_exporter.txt").read_text()
    dcgm = set(re.findall(r"^(DCGM_[A-Za-z0-9_]+)", sample, flags=re.MULTILINE))
    missing = sorted(
        n for n in names if n not in (exposed if n.startswith("loadkit_") else triton_names | dcgm)
    )
    assert not missing, f"dashboard queries unknown metrics: {missing}"
    print(f"\ndashboard: {len(names)} metric names, all served")
