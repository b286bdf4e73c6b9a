"""`loadkit run --scrape FAMILY=URL`: the server's exporters scraped during the run.

An in-process HTTP server on 127.0.0.1 serves exposition text in the style of
node-exporter, dcgm-exporter and cAdvisor; the test changes what it serves between
scrapes, so rows, rates from successive scrapes, places and a failing scrape are
checked without a real exporter (tests/integration/test_scrape.py has a real
node-exporter).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loadkit.cli import main
from loadkit.errors import UsageError
from loadkit.rundir.schema import (
    LOCATION_LOOPBACK,
    LOCATION_OTHER_HOST,
    PLACE_CLIENT,
    PLACE_SERVER,
    Source,
    TargetLocation,
)
from loadkit.telemetry import supervisor
from loadkit.telemetry.base import SamplerOptions, SourcePlace, SourceUnavailable
from loadkit.telemetry.scrape import ScrapeSampler, ScrapeTarget, parse_scrape, parse_scrapes
from loadkit.telemetry.supervisor import SamplerSet, plan_sources, sampling_rates

S = 1_000_000_000
REMOTE = TargetLocation(False, LOCATION_OTHER_HOST, "198.18.0.2", "198.18.0.2")
LOCAL = TargetLocation(True, LOCATION_LOOPBACK, "gpu-box", "127.0.0.1")


def node_text(idle: tuple[float, float], iowait: float, psi_s: float, load1: float) -> str:
    lines = [
        "# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.",
        "# TYPE node_cpu_seconds_total counter",
    ]
    for cpu, idle_s in enumerate(idle):
        lines.append(f'node_cpu_seconds_total{{cpu="{cpu}",mode="idle"}} {idle_s}')
        lines.append(f'node_cpu_seconds_total{{cpu="{cpu}",mode="iowait"}} {iowait}')
        lines.append(f'node_cpu_seconds_total{{cpu="{cpu}",mode="user"}} 1234.5')
    lines += [
        "# TYPE node_pressure_cpu_waiting_seconds_total counter",
        f"node_pressure_cpu_waiting_seconds_total {psi_s}",
        "# TYPE node_load1 gauge",
        f"node_load1 {load1}",
        "# TYPE node_memory_MemAvailable_bytes gauge",
        "node_memory_MemAvailable_bytes 8.589934592e+09",
    ]
    return "\n".join(lines) + "\n"


DCGM_TEXT = """\
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-a",Hostname="gpu-host"} 1095
DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-b",Hostname="gpu-host"} 1980
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",Hostname="gpu-host"} 88
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b",Hostname="gpu-host"} 61
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",Hostname="gpu-host"} 412.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b",Hostname="gpu-host"} 230.0
# TYPE DCGM_FI_DEV_CLOCK_THROTTLE_REASONS gauge
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0",UUID="GPU-a",Hostname="gpu-host"} 72
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="1",UUID="GPU-b",Hostname="gpu-host"} 0
"""


def cadvisor_text(usage_s: float) -> str:
    lines = ["# TYPE container_cpu_cfs_periods_total counter"]
    for container, periods in (("triton", 500), ("sidecar", 40)):
        labels = f'namespace="serving",pod="triton-0",container="{container}"'
        lines.append(f"container_cpu_cfs_periods_total{{{labels}}} {periods}")
    lines.append("# TYPE container_cpu_usage_seconds_total counter")
    for cpu in ("cpu00", "cpu01"):
        labels = f'namespace="serving",pod="triton-0",container="triton",cpu="{cpu}"'
        lines.append(f"container_cpu_usage_seconds_total{{{labels}}} {usage_s}")
    return "\n".join(lines) + "\n"


class Exporter:
    """Serves whatever `text` holds at /metrics; `status` other than 200 fails the scrape."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.status = 200
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                body = exporter.text.encode()
                self.send_response(exporter.status if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def node() -> Iterator[Exporter]:
    exporter = Exporter(node_text((100.0, 200.0), 5.0, 10.0, 1.5))
    yield exporter
    exporter.close()


def _sampler(*targets: ScrapeTarget) -> ScrapeSampler:
    sampler = ScrapeSampler(targets[0].series, targets, 1.0)
    sampler.open()
    return sampler


def test_node_exporter_rows_with_cpu_from_two_scrapes_and_raw_counters(node: Exporter) -> None:
    sampler = _sampler(ScrapeTarget("node", node.url))
    try:
        first = sampler.sample(10 * S)
        # GIVEN one second later: cpu0 idle 0.25 s (75 % busy), cpu1 idle 1.0 s (0 % busy)
        node.text = node_text((100.25, 201.0), 5.0, 10.4, 2.5)
        second = sampler.sample(11 * S)
    finally:
        sampler.close()
    # THEN every row is the host's, from node-exporter, with load and memory at once
    assert len(first) == 1 and first[0]["scraped_from"] == "node"
    assert first[0]["load1"] == 1.5 and first[0]["mem_available_bytes"] == 8589934592
    # and the PSI counter raw (µs), as the import writes it: the analysis takes its rate
    assert second[0]["psi_cpu_some_total_us"] == pytest.approx(10.4e6)
    # and CPU per core from the increase of idle + iowait between the two scrapes
    assert second[0]["t_ns"] == 11 * S
    assert second[0]["cpu_per_core_pct"] == pytest.approx([75.0, 0.0])
    assert second[0]["cores"] == 2 and second[0]["cpu_pct"] == pytest.approx(37.5)


def test_a_counter_that_goes_down_gives_no_rate_for_that_interval(node: Exporter) -> None:
    sampler = _sampler(ScrapeTarget("node", node.url))
    try:
        sampler.sample(10 * S)
        node.text = node_text((1.0, 1.0), 0.0, 0.1, 1.0)  # node-exporter's host rebooted
        rows = sampler.sample(11 * S)
        node.text = node_text((1.5, 1.5), 0.0, 0.2, 1.0)
        after = sampler.sample(12 * S)
    finally:
        sampler.close()
    assert rows[0]["cpu_per_core_pct"] == [None, None]
    assert after[0]["cpu_per_core_pct"] == pytest.approx([50.0, 50.0])


def test_dcgm_rows_one_per_gpu_with_its_index_host_and_reasons() -> None:
    dcgm = Exporter(DCGM_TEXT)
    try:
        sampler = _sampler(ScrapeTarget("dcgm", dcgm.url))
        rows = sampler.sample(5 * S)
        sampler.close()
    finally:
        dcgm.close()
    assert [(r["gpu"], r["host"], r["sm_clock_mhz"], r["temp_c"]) for r in rows] == [
        (0, "gpu-host", 1095, 88),
        (1, "gpu-host", 1980, 61),
    ]
    assert rows[0]["power_w"] == 412.5 and rows[0]["clocks_event_reasons"] == 72
    assert rows[0]["reason_hw_thermal"] is True and rows[0]["reason_hw_slowdown"] is True
    assert rows[1]["reason_hw_thermal"] is False


def test_cadvisor_keeps_the_matched_container_and_its_cpu_rate() -> None:
    cadvisor = Exporter(cadvisor_text(10.0))
    try:
        matched = parse_scrape(f'cadvisor={cadvisor.url}{{container="triton"}}')
        sampler = _sampler(matched)
        sampler.sample(1 * S)
        cadvisor.text = cadvisor_text(10.5)  # each of 2 CPUs 0.5 s in 2 s: 50 % of a core
        rows = sampler.sample(3 * S)
        sampler.close()
    finally:
        cadvisor.close()
    assert rows[0]["cgroup_nr_periods"] == 500
    assert rows[0]["server_cpu_pct"] == pytest.approx(50.0)
    assert sampler.drain_warnings() == []


def test_several_containers_unmatched_keep_one_and_say_so_once() -> None:
    cadvisor = Exporter(cadvisor_text(10.0))
    try:
        sampler = _sampler(ScrapeTarget("cadvisor", cadvisor.url))
        for t in range(3):
            sampler.sample(t * S)
        sampler.close()
    finally:
        cadvisor.close()
    warnings = sampler.drain_warnings()
    assert len(warnings) == 1
    assert 'recorded {namespace="serving",pod="triton-0",container="sidecar"}' in warnings[0]
    assert 'not {namespace="serving",pod="triton-0",container="triton"}' in warnings[0]
    assert "narrow with --scrape cadvisor=URL{" in warnings[0]


def test_a_failing_scrape_warns_once_and_the_sampling_goes_on(node: Exporter) -> None:
    dcgm = Exporter(DCGM_TEXT)
    sampler = _sampler(ScrapeTarget("node", node.url))
    try:
        assert sampler.sample(1 * S)
        node.status = 503
        # WHEN node-exporter fails three scrapes in a row
        assert [sampler.sample(t * S) for t in (2, 3, 4)] == [[], [], []]
        warnings = sampler.drain_warnings()
        # THEN one line says so, and the sampler answers again when it does
        assert len(warnings) == 1
        assert "not answering" in warnings[0] and "HTTP 503" in warnings[0]
        node.status = 200
        assert sampler.sample(5 * S)[0]["load1"] == 1.5
        assert sampler.drain_warnings() == []
    finally:
        sampler.close()
        dcgm.close()


def test_an_exporter_that_does_not_answer_at_the_start_is_a_missing_source() -> None:
    gone = Exporter("")
    url = gone.url
    gone.close()
    with pytest.raises(SourceUnavailable, match="node http://127.0.0.1:.* not readable"):
        _sampler(ScrapeTarget("node", url))


def test_an_exporter_of_another_family_is_a_missing_source(node: Exporter) -> None:
    with pytest.raises(SourceUnavailable, match="has none of the dcgm metrics"):
        _sampler(ScrapeTarget("dcgm", node.url))


def test_of_two_exporters_one_missing_is_a_warning_and_the_other_is_recorded(
    node: Exporter,
) -> None:
    sampler = ScrapeSampler(
        "host", [ScrapeTarget("node", node.url), ScrapeTarget("cadvisor", node.url)], 1.0
    )
    sampler.open()
    rows = sampler.sample(1 * S)
    sampler.close()
    assert rows[0]["scraped_from"] == "node"
    [warning] = sampler.drain_warnings()
    assert "none of the cadvisor metrics" in warning and "retrying" in warning


# --- the flag ------------------------------------------------------------------------
def test_the_flag_takes_family_equals_url() -> None:
    assert parse_scrape("node=gpu-host:9100") == ScrapeTarget(
        "node", "http://gpu-host:9100/metrics"
    )
    target = parse_scrape('cadvisor=http://n:8080/metrics/cadvisor{container="triton",pod="t-0"}')
    assert target.url == "http://n:8080/metrics/cadvisor"
    assert target.match == {"container": "triton", "pod": "t-0"}


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("nod=http://h:9100/metrics", "unknown exporter family 'nod'"),
        ("http://h:9100/metrics", "not FAMILY=URL"),
        ("triton=http://h:8002/metrics", "unknown exporter family 'triton'"),
        ("node=ftp://h:9100/metrics", "scheme 'ftp'"),
        ("node=http://h:99999/metrics", "port"),
        ("cadvisor=http://h:8080/metrics{container=triton}", 'name="value"'),
    ],
)
def test_a_bad_family_or_url_is_a_usage_error(flag: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        parse_scrapes([flag])
    if "family" in message or "FAMILY" in message:
        assert "dcgm (gpu), triton-gpu (gpu), node (host), cadvisor (host)" in str(
            caught.value.hint
        )


def test_a_family_twice_or_two_gpu_exporters_are_refused() -> None:
    with pytest.raises(UsageError, match="node given twice"):
        parse_scrapes(["node=h:9100", "node=g:9100"])
    with pytest.raises(UsageError, match="one GPU exporter"):
        parse_scrapes(["dcgm=h:9400", "triton-gpu=h:8002"])


def test_loadkit_run_refuses_a_bad_scrape_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "burst_2x", "--target", "http://127.0.0.1:1", "--scrape", "gpu=h:9400"])
    assert code == 2
    err = capsys.readouterr().err
    assert "unknown exporter family 'gpu'" in err and "dcgm (gpu)" in err


# --- the plan: which file, which place -----------------------------------------------
def _plans(tmp_path: Path, target: TargetLocation | None, **options: Any) -> dict[str, Any]:
    opts = SamplerOptions(run_dir=tmp_path, target=target, **options)
    return dict(plan_sources(opts, sampling_rates(None)))


def test_a_scraped_series_holds_its_name_and_this_machines_copy_is_local(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("loadkit.telemetry.base.this_hostname", lambda: "loadgen-1")
    scrapes = parse_scrapes(["node=http://198.18.0.2:9100", "dcgm=http://198.18.0.2:9400"])
    plans = _plans(tmp_path, REMOTE, gpu="auto", extra={"scrape": scrapes})
    # THEN the server's exporters write `host` and `gpu`, the server's, named after its host
    for series, family in (("host", "node"), ("gpu", "dcgm")):
        spec = plans[series].spec
        assert spec is not None and spec.kind == "scrape" and spec.interval_s == 1.0
        assert [t["family"] for t in spec.options["targets"]] == [family]
        url = f"http://198.18.0.2:{9100 if family == 'node' else 9400}/metrics"
        assert plans[series].place == SourcePlace(PLACE_SERVER, "198.18.0.2", {}, {family: url})
    # and this machine's host sampler writes `host-local`, a client series
    local = plans["host-local"]
    assert local.spec is not None and local.spec.source == "host-local"
    assert local.spec.kind == "host"
    assert local.place is not None and local.place.place == PLACE_CLIENT
    # and no local GPU: and no warning that there is none (the server's comes from dcgm)
    assert "gpu-local" not in plans


def test_the_manifest_lists_the_scraped_series_as_the_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor, "_spawn_sampler", lambda spec, run_dir: _Process())
    scrapes = parse_scrapes(["node=http://scraper:s3cret@198.18.0.2:9100/metrics"])
    with SamplerSet.start(tmp_path, gpu="auto", target_location=REMOTE, scrape=scrapes) as samplers:
        info = samplers.manifest_info()
    by_name = {s["name"]: s for s in info["sources"]}
    assert by_name["host"]["file"] == "telemetry/host.jsonl"
    assert (by_name["host"]["place"], by_name["host"]["host"]) == (PLACE_SERVER, "198.18.0.2")
    # AND where the series was measured: the exporter's URL, its credentials stripped
    assert by_name["host"]["scraped_from"] == {"node": "http://198.18.0.2:9100/metrics"}
    assert Source.from_dict(by_name["host"]).scraped_from == {
        "node": "http://198.18.0.2:9100/metrics"
    }
    assert "scraped_from" not in by_name["host-local"]  # sampled here, not scraped
    assert by_name["host-local"]["file"] == "telemetry/host-local.jsonl"
    assert by_name["host-local"]["place"] == PLACE_CLIENT
    # the GPU of this load machine is still said to be not sampled (no GPU exporter given)
    assert by_name["gpu"]["file"] is None
    assert info["gpu"] == {"kind": "none", "devices": []}


def test_tritons_gpu_metrics_feed_the_gpu_series_of_a_remote_target(tmp_path: Path) -> None:
    metrics = "http://198.18.0.2:8002/metrics"
    plans = _plans(tmp_path, REMOTE, gpu="auto", metrics_url=metrics)
    spec = plans["gpu"].spec
    assert spec is not None and spec.kind == "scrape"
    assert spec.options["targets"] == [
        {"family": "triton-gpu", "url": metrics, "match": {}, "implicit": True, "token_file": None}
    ]
    assert plans["gpu"].place == SourcePlace(
        PLACE_SERVER, "198.18.0.2", {}, {"triton-gpu": metrics}
    )
    # not for a local target (NVML reads the server's GPU), nor beside a GPU exporter
    assert _plans(tmp_path, LOCAL, gpu="none", metrics_url=metrics)["gpu"].spec is None
    dcgm = parse_scrapes(["dcgm=198.18.0.2:9400"])
    plans = _plans(tmp_path, REMOTE, gpu="auto", metrics_url=metrics, extra={"scrape": dcgm})
    gpu_spec = plans["gpu"].spec
    assert gpu_spec is not None and gpu_spec.options["targets"][0]["family"] == "dcgm"


def test_tritons_endpoint_without_gpu_metrics_is_a_missing_gpu_source(node: Exporter) -> None:
    target = ScrapeTarget("triton-gpu", node.url, implicit=True)
    with pytest.raises(SourceUnavailable, match="has no nv_gpu_\\* metrics"):
        _sampler(target)


class _Process:
    """A sampler process that is never started (unit tests start no processes)."""

    pid = 1
    stdout = None

    def poll(self) -> int:
        return 0

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_this_machines_copy_keeps_its_process_part() -> None:
    from loadkit.rundir.schema import Source

    raw = {"name": "host-local", "file": "telemetry/host-local.jsonl", "place": "client"}
    source = Source.from_dict({**raw, "parts": {"process": "server"}})
    assert source.place_of("server_cpu_pct") == PLACE_SERVER
    assert source.place_of("cpu_pct") == PLACE_CLIENT


def test_a_cores_busy_share_stays_within_0_and_100_when_the_exporter_reads_late() -> None:
    from loadkit.telemetry.prometheus.families import NODE, parse_exposition, rows_from_scrapes

    # GIVEN two scrapes 1 s apart by our clock, where the exporter read its counters
    # 1.016 s apart: core 0 idle all along gains 1.016 s of idle, core 1 0.5 s
    _, first = rows_from_scrapes(
        NODE, parse_exposition(node_text((100.0, 100.0), 0.0, 0, 0)), S, None
    )
    rows, _ = rows_from_scrapes(
        NODE, parse_exposition(node_text((101.016, 100.5), 0.0, 0, 0)), 2 * S, first
    )
    (row,) = rows.values()
    # THEN the idle core reads 0 % busy, not -1.6 %, and the other its 50 %
    assert row["cpu_per_core_pct"] == pytest.approx([0.0, 50.0])
