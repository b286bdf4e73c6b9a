"""`loadkit import --prometheus` against a fake Prometheus HTTP API on 127.0.0.1.

The fake answers `/api/v1/query_range` (and the raw `up[1m]` query) from series the
test defines, steps them like Prometheus does, and records every request, so the
client's chunking, authentication and errors, and the import's handling of counter
resets, gaps, several models and the latency fallbacks are checked without a server.
A real Prometheus is in tests/integration/test_prometheus_import.py.
"""

from __future__ import annotations

import io
import json
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loadkit.analysis.pipeline import analyze_run
from loadkit.cli import build_parser, main
from loadkit.commands import import_ as import_command
from loadkit.commands.analyze import print_summary
from loadkit.errors import TargetError, UsageError
from loadkit.rundir import load_run
from loadkit.telemetry.prometheus.client import MAX_POINTS, PrometheusClient
from loadkit.telemetry.prometheus.window import choose_step

START = 1_764_000_000  # s
# metric name -> labels -> value(t seconds since START) (None: no sample at that step)
Series = dict[str, list[tuple[dict[str, str], Callable[[float], float | None]]]]


class FakePrometheus:
    def __init__(self, series: Series, *, auth: str | None = None) -> None:
        self.series = series
        self.auth = auth
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                url = urllib.parse.urlparse(self.path)
                params = dict(urllib.parse.parse_qsl(url.query))
                fake.requests.append(
                    {"path": url.path, **params, "auth": self.headers.get("Authorization")}
                )
                if fake.auth is not None and self.headers.get("Authorization") != fake.auth:
                    self.send_response(401)
                    self.end_headers()
                    return
                body = fake.answer(url.path, params)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps(body).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def answer(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        if path == "/api/v1/status/buildinfo":
            return {"status": "success", "data": {"version": "fake"}}
        query = params["query"]
        if path == "/api/v1/query":  # up[1m]: raw samples every second
            at = float(params["time"])
            values = [[at - 60 + i, "1"] for i in range(60)]
            return _matrix([({"__name__": "up", "job": "triton"}, values)])
        start, end, step = (float(params[k]) for k in ("start", "end", "step"))
        rates = re.findall(r"rate\((\w+)\{[^}]*\}\[(\d+)s\]\)", query)
        if len(rates) == 2 and " / " in query:  # the mean: rate(duration) / rate(count)
            return self._ratio(rates, start, end, step)
        name = re.match(
            r"[\w(, ]*?\b(nv_\w+|DCGM_\w+|node_\w+|container_\w+|process_\w+|loadkit_\w+|\w+_bucket)",
            query,
        )
        if name is None or name.group(1) not in self.series:
            return _matrix([])
        want = dict(re.findall(r'(\w+)="([^"]*)"', query))
        out = []
        for labels, fn in self.series[name.group(1)]:
            if any(labels.get(k, v) != v for k, v in want.items() if k not in ("quantile",)):
                continue
            if "quantile" in want and labels.get("quantile") != want["quantile"]:
                continue
            values = []
            t = start
            while t <= end + 1e-9:
                value = fn(t - START)
                if value is not None:
                    values.append([round(t, 3), repr(float(value))])
                t += step
            if values:
                out.append(({"__name__": name.group(1), **labels}, values))
        return _matrix(out)

    def _ratio(self, rates: list[tuple[str, str]], start: float, end: float, step: float) -> Any:
        (num, window), (den, _) = rates
        if num not in self.series or den not in self.series:
            return _matrix([])
        w = float(window)
        out = []
        for (labels, f), (_, g) in zip(self.series[num], self.series[den], strict=True):
            values = []
            t = start
            while t <= end + 1e-9:
                a, b = f(t - START), f(t - START - w)
                c, d = g(t - START), g(t - START - w)
                if None not in (a, b, c, d) and c != d:
                    values.append(
                        [round(t, 3), repr((float(a) - float(b)) / (float(c) - float(d)))]
                    )
                t += step
            out.append((dict(labels), values))
        return _matrix(out)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _matrix(series: list[tuple[dict[str, str], list[Any]]]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": m, "values": v} for m, v in series]},
    }


def triton_series(model: str = "ranker", rate: float = 100.0, spike_every: int = 20) -> Series:
    """Counters of a model at `rate` req/s whose mean is 5 ms, 50 ms for 2 s every `spike_every` s."""

    def duration_us(t: float) -> float:
        # In closed form (the seconds before t, 45 ms more in each spike second): any t,
        # the wall clock's included.
        n = int(t)
        spike_seconds = n // spike_every * 2 + min(n % spike_every, 2)
        return rate * 1000 * (5 * n + 45 * spike_seconds)

    labels = {"model": model, "version": "1", "job": "triton"}
    return {
        "nv_inference_request_success": [(labels, lambda t: rate * int(t))],
        "nv_inference_count": [(labels, lambda t: rate * int(t))],
        "nv_inference_exec_count": [(labels, lambda t: rate * int(t) / 4)],
        "nv_inference_request_duration_us": [(labels, duration_us)],
        "nv_inference_queue_duration_us": [(labels, lambda t: 1000.0 * rate * int(t))],
        "nv_inference_compute_infer_duration_us": [(labels, duration_us)],
    }


@pytest.fixture
def fake() -> Iterator[Callable[..., FakePrometheus]]:
    made: list[FakePrometheus] = []

    def make(series: Series, **kw: Any) -> FakePrometheus:
        made.append(FakePrometheus(series, **kw))
        return made[-1]

    yield make
    for server in made:
        server.close()


def _import(url: str, tmp_path: Path, *extra: str, window: str = "200s") -> int:
    return main(
        ["import", "--prometheus", url, "--window", window, "--end", str(START + 200)]
        + ["--step", "1s", "--out", str(tmp_path), "--run-id", "prod", *extra]
    )


def test_long_window_is_asked_in_chunks_under_11000_points(fake: Any) -> None:
    server = fake(triton_series())
    client = PrometheusClient(server.url)
    series = client.query_range(
        "nv_inference_request_success", START * 10**9, (START + 25_000) * 10**9, 1.0
    )
    ranges = [r for r in server.requests if r["path"] == "/api/v1/query_range"]
    assert len(ranges) == 3
    for r in ranges:
        assert (float(r["end"]) - float(r["start"])) / float(r["step"]) + 1 <= MAX_POINTS < 11_000
    [joined] = series
    times = [t for t, _ in joined.points]
    assert len(times) == 25_001 and times == sorted(set(times))  # no step lost or twice


def test_bearer_token_is_sent_and_never_written(fake: Any, tmp_path: Path) -> None:
    server = fake(triton_series(), auth="Bearer s3cret-token")
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    assert _import(server.url, tmp_path, "--prom-token-file", str(token)) == 0
    assert all(r["auth"] == "Bearer s3cret-token" for r in server.requests)
    for path in (tmp_path / "prod").rglob("*"):
        if path.is_file():
            assert "s3cret" not in path.read_text(errors="replace"), path


def test_basic_auth(fake: Any, tmp_path: Path) -> None:
    server = fake(triton_series(), auth="Basic b25jYWxsOnB3")  # oncall:pw
    password = tmp_path / "pw"
    password.write_text("pw")
    rc = _import(
        server.url, tmp_path, "--prom-user", "oncall", "--prom-password-file", str(password)
    )
    assert rc == 0


def test_refused_credentials_are_one_line_exit_3(
    fake: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = fake(triton_series(), auth="Bearer right")
    assert _import(server.url, tmp_path) == 3
    err = capsys.readouterr().err
    assert "refused the request (HTTP 401)" in err and "Traceback" not in err


def test_unreachable_is_exit_3() -> None:
    client = PrometheusClient("http://127.0.0.1:9")
    with pytest.raises(TargetError, match="cannot reach Prometheus"):
        client.query_range("up", 0, 10**9, 1.0)


def test_a_query_that_returns_nothing_names_the_series_exit_2(
    fake: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = fake(triton_series())
    assert _import(server.url, tmp_path, "--selector", '{job="nope"}') == 2
    err = capsys.readouterr().err
    assert 'no nv_inference_request_success{job="nope"}' in err and "Traceback" not in err
    assert _import(fake({}).url, tmp_path / "b") == 2
    assert "nv_inference_request_success{}" in capsys.readouterr().err


def test_only_counters_give_a_mean_labelled_as_a_mean_and_its_period(
    fake: Any, tmp_path: Path
) -> None:
    # GIVEN a Triton without summaries: only the duration/count counters
    server = fake(triton_series(spike_every=20))
    assert _import(server.url, tmp_path) == 0
    run = load_run(tmp_path / "prod")
    assert run.info.kind == "production"
    assert run.info.production is not None
    assert run.info.production["latency_source"] == "triton-mean"
    assert any("MEAN per request" in n for n in run.info.notes)
    # WHEN analyzed
    analysis = analyze_run(run)
    # THEN no percentile is invented; the mean's episodes and period are found as a mean
    assert all(v is None for v in analysis.windows.corrected.p99_ms)
    assert analysis.primary == "mean"
    assert "MEAN spike episodes" in analysis.headline
    period = analysis.periodicity_for("mean")
    assert period is not None and period.period_s == pytest.approx(20.0, rel=0.05)
    checks = {c.cause: c for c in analysis.causes_checked}
    for cause in ("process_stall", "connection_churn"):
        assert checks[cause].status == "not_assessable"
        assert checks[cause].reason.startswith("not assessable from metrics")
    assert any(
        n.startswith("production window from Prometheus") and "1 s step" in n
        for n in analysis.notes
    )
    # AND the report says what the numbers are
    out = tmp_path / "report.md"
    assert main(["report", str(tmp_path / "prod"), "--format", "md", "-o", str(out)]) == 0
    text = out.read_text()
    assert "Production window: ranker (from Prometheus)" in text
    assert "the mean per request from Triton's counters (no percentile is known)" in text
    assert "MEAN spike episodes" in text
    assert "Latency percentiles are corrected for coordinated omission" not in text
    summary = io.StringIO()
    print_summary(analysis, summary)
    line = next(x for x in summary.getvalue().splitlines() if x.startswith("latency"))
    assert line.startswith("latency (the mean per request from Triton's counters")
    assert " mean " in line and "p99" not in line


def test_counter_reset_and_missed_scrapes_are_counted_and_handled(
    fake: Any, tmp_path: Path
) -> None:
    series = triton_series()
    labels = {"model": "ranker", "version": "1", "job": "triton"}
    # Triton restarted at 100 s (counters from 0), and no sample for 5 s at 150 s.
    series["nv_inference_request_success"] = [
        (labels, lambda t: None if 150 <= t < 155 else 100.0 * (t if t < 100 else t - 100))
    ]
    server = fake(series)
    assert _import(server.url, tmp_path) == 0
    run = load_run(tmp_path / "prod")
    assert run.info.production is not None
    triton = next(s for s in run.info.production["series"] if s["family"] == "triton")
    assert triton["counter_resets"] == 1
    assert triton["missing_steps"] >= 5  # the 5 s without a sample, left empty
    analysis = analyze_run(run)
    throughput = [v for v in analysis.windows.throughput_rps if v is not None]
    assert max(throughput) < 150  # the reset is not read as a huge negative or positive rate
    assert any("counter reset" in n for n in analysis.notes)


def test_several_models_the_busiest_is_analyzed_and_said_or_chosen(
    fake: Any, tmp_path: Path
) -> None:
    series = triton_series("ranker", rate=100.0)
    for name, entries in triton_series("retrieval", rate=10.0).items():
        series[name] = series[name] + entries
    server = fake(series)
    assert _import(server.url, tmp_path) == 0
    run = load_run(tmp_path / "prod")
    assert run.info.target is not None and run.info.target.model == "ranker"
    assert any("several Triton models" in n and "retrieval" in n for n in run.info.notes)
    assert _import(server.url, tmp_path / "b", "--model", "retrieval") == 0
    chosen = load_run(tmp_path / "b" / "prod")
    assert chosen.info.target is not None and chosen.info.target.model == "retrieval"
    assert _import(server.url, tmp_path / "c", "--model", "nope") == 2


def test_summaries_are_preferred_to_the_mean(fake: Any, tmp_path: Path) -> None:
    series = triton_series()
    labels = {"model": "ranker", "version": "1", "job": "triton"}
    series["nv_inference_request_summary_us"] = [
        ({**labels, "quantile": q}, lambda t, v=v: v)
        for q, v in (("0.5", 5000.0), ("0.99", 9000.0))
    ]
    server = fake(series)
    assert _import(server.url, tmp_path) == 0
    run = load_run(tmp_path / "prod")
    assert run.info.production is not None
    assert run.info.production["latency_source"] == "triton-summary"
    rows = run.series("production_latency")
    assert rows["p99_ms"].dropna().eq(9.0).all()
    assert "mean_ms" in rows.columns  # beside the quantiles, under its own name
    # The SLO is judged step by step (per-step quantiles make no whole-window P99)
    verdict = analyze_run(run, slo={"p99_ms": 8.0}).verdict
    (p99,) = [c for c in verdict.slos if c.name == "p99"]
    assert p99.observed == 9.0 and p99.passed is False
    assert "above the threshold in" in p99.detail and "steps" in p99.detail
    assert verdict.summary.startswith("FAIL: p99 9ms > 8ms")
    assert analyze_run(run, slo={"p99_ms": 50.0}).verdict.passed
    # AND the summary's latency line names its source and gives the steps' values
    # (it said "latency (corrected): p50 n/a ... p99 n/a" beside "PASS: p99 9ms")
    out = io.StringIO()
    print_summary(analyze_run(run), out)
    line = next(x for x in out.getvalue().splitlines() if x.startswith("latency"))
    assert line.startswith("latency (Triton summary quantiles (each over the last 60 s); per ")
    assert "p50 5.0 ms / 5.0 ms" in line and "p99 9.0 ms / 9.0 ms" in line
    assert "corrected" not in line and "n/a" not in line


def test_bad_input_is_exit_2(fake: Any, tmp_path: Path) -> None:
    assert main(["import", "--prometheus", "ftp://x", "--window", "1h"]) == 2
    assert main(["import", "--prometheus", "http://127.0.0.1:9"]) == 2  # no --window
    assert main(["import"]) == 2


def test_several_gpus_are_all_kept_and_said(fake: Any, tmp_path: Path) -> None:
    series = triton_series()
    gpus = [{"gpu": str(i), "Hostname": "gpu-3", "UUID": f"GPU-{i}"} for i in (0, 1)]
    series["DCGM_FI_DEV_SM_CLOCK"] = [(gpus[0], lambda t: 1980.0), (gpus[1], lambda t: 1110.0)]
    series["DCGM_FI_DEV_GPU_TEMP"] = [(gpus[0], lambda t: 45.0), (gpus[1], lambda t: 88.0)]
    server = fake(series)
    assert _import(server.url, tmp_path) == 0
    run = load_run(tmp_path / "prod")
    gpu = run.series("gpu")
    assert sorted(gpu["gpu"].unique()) == [0, 1]
    assert any("2 GPUs matched (dcgm)" in n for n in run.info.notes)


def test_a_latency_histogram_with_no_data_names_both_forms_exit_2(
    fake: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = fake(triton_series())
    assert _import(server.url, tmp_path, "--latency-histogram", "http_seconds") == 2
    err = capsys.readouterr().err
    assert "http_seconds_bucket" in err and "rate(http_seconds{" in err


def test_several_triton_instances_are_not_mixed(fake: Any, tmp_path: Path) -> None:
    # GIVEN two pods serving the same model, their quantiles 9 ms and 40 ms
    series: Series = {}
    for instance, rate, p99_us in (("pod-a:8002", 100.0, 9000.0), ("pod-b:8002", 30.0, 40000.0)):
        for name, entries in triton_series(rate=rate).items():
            series.setdefault(name, []).extend(
                ({**labels, "instance": instance}, fn) for labels, fn in entries
            )
        series.setdefault("nv_inference_request_summary_us", []).append(
            (
                {"model": "ranker", "version": "1", "job": "triton", "instance": instance,
                 "quantile": "0.99"},
                lambda t, v=p99_us: v,
            )
        )  # fmt: skip
    server = fake(series)
    assert _import(server.url, tmp_path) == 0
    run = load_run(tmp_path / "prod")
    # THEN the busiest pod is analyzed, alone, and the other is named
    assert run.series("production_latency")["p99_ms"].dropna().eq(9.0).all()
    assert set(run.series("triton_stats")["instance"]) == {"pod-a:8002"}
    assert any('instance="pod-b:8002"' in n for n in run.info.notes)


# --- the run's own window, joined into the run: --run DIR --------------------------------
def _load_test(tmp_path: Path) -> Path:
    """A finished 40 s load test at START whose host series is the load machine's (client)."""
    from loadkit.rundir.writer import read_manifest_raw, write_manifest
    from loadkit.testing.synthetic import RunSpec, write_run

    spec = RunSpec(duration_s=40.0, rate_rps=50.0, sources=("host", "triton_stats"))
    run_dir = write_run(spec, tmp_path, "load-test", start_ns=START * 10**9)
    manifest = read_manifest_raw(run_dir)
    manifest["environment"]["target_location"] = {
        "local": False, "how": "address of another host", "host": "gpu-3", "address": "10.0.0.3"
    }  # fmt: skip
    for source in manifest["sources"]:
        server = source["name"] != "host"
        source.update(place="server" if server else "client", host="gpu-3" if server else "lg-1")
    write_manifest(run_dir, manifest)
    return run_dir


def test_the_runs_own_window_of_the_servers_exporters_joins_the_run(
    fake: Any, tmp_path: Path
) -> None:
    # GIVEN Prometheus has the server's DCGM (SM clock halved from 20 s) and node-exporter
    gpu = {"gpu": "0", "Hostname": "gpu-3", "job": "dcgm"}
    node = {"instance": "gpu-3:9100", "job": "node"}
    server = fake(
        {
            "DCGM_FI_DEV_SM_CLOCK": [(gpu, lambda t: 990.0 if t >= 20 else 1980.0)],
            "DCGM_FI_DEV_GPU_TEMP": [(gpu, lambda t: 80.0)],
            "node_load1": [(node, lambda t: 3.5)],
        }
    )
    run_dir = _load_test(tmp_path)
    before = (run_dir / "telemetry" / "host.jsonl").read_text()
    # WHEN the run's window is imported into it
    assert main(["import", "--prometheus", server.url, "--run", str(run_dir), "--step", "1s"]) == 0
    # THEN exactly the run's window was asked for
    ranges = [r for r in server.requests if r["path"] == "/api/v1/query_range"]
    assert {(float(r["start"]), float(r["end"])) for r in ranges} == {(START, START + 40)}
    # AND gpu and host are the server's, from Prometheus; the load machine's host moved aside
    run = load_run(run_dir)
    assert run.place("gpu") == "server" and run.place("host") == "server"
    assert run.place("host-local") == "client"
    assert (run_dir / "telemetry" / "host-local.jsonl").read_text() == before
    gpu_rows = run.series("gpu")
    assert len(gpu_rows) == 41 and set(gpu_rows["imported_from"]) == {"prometheus:dcgm"}
    assert set(run.series("host")["load1"]) == {3.5}
    gpu_source = next(s for s in run.manifest["sources"] if s["name"] == "gpu")
    assert gpu_source["imported_from"]["format"] == "prometheus"
    assert (gpu_source["place"], gpu_source["host"]) == ("server", "gpu-3")
    host_source = next(s for s in run.manifest["sources"] if s["name"] == "host")
    assert host_source["host"] == "gpu-3"  # node-exporter's instance, without its port
    assert any("moved to telemetry/host-local.jsonl" in n for n in run.manifest["notes"])
    # AND the analysis reads them: the server's SM clock per window, as for a local GPU
    clock = [v for v in analyze_run(run).telemetry.gpu_sm_clock_mhz or [] if v is not None]
    assert min(clock) == pytest.approx(990.0) and max(clock) == pytest.approx(1980.0)


def test_a_prometheus_that_scraped_loadkit_agent_gives_the_servers_gpu_and_cgroup(
    fake: Any, tmp_path: Path
) -> None:
    # GIVEN Prometheus scraped `loadkit agent` on the server's host (no other exporter)
    agent = {"instance": "gpu-3:9477", "job": "loadkit-agent"}
    cgroup = {**agent, "cgroup": "/sys/fs/cgroup/cpu/triton"}
    server = fake(
        {
            "loadkit_gpu_sm_clock_mhz": [({**agent, "gpu": "0"}, lambda t: 1410.0)],
            "loadkit_gpu_clocks_event_reasons": [({**agent, "gpu": "0"}, lambda t: 32.0)],
            "loadkit_server_cgroup_periods_total": [(cgroup, lambda t: 10.0 * t)],
            "loadkit_server_cgroup_throttled_periods_total": [(cgroup, lambda t: 2.0 * t)],
            "loadkit_server_cgroup_version": [(cgroup, lambda t: 1.0)],
            "loadkit_server_run_delay_seconds_total": [(agent, lambda t: 0.01 * t)],
        }
    )
    run_dir = _load_test(tmp_path)
    assert main(["import", "--prometheus", server.url, "--run", str(run_dir), "--step", "1s"]) == 0
    run = load_run(run_dir)
    # THEN the gpu and host series are the agent's, per GPU and with the server's cgroup
    gpu = run.series("gpu")
    assert set(gpu["imported_from"]) == {"prometheus:agent-gpu"} and set(gpu["gpu"]) == {0}
    assert set(gpu["sm_clock_mhz"]) == {1410.0} and gpu["reason_sw_thermal"].all()
    host = run.series("host")
    assert set(host["cgroup_path"]) == {"/sys/fs/cgroup/cpu/triton"}
    assert host["cgroup_nr_throttled"].is_monotonic_increasing
    assert host["server_run_delay_ns"].iloc[-1] == pytest.approx(0.01 * 40 * 1e9)
    # AND the counts that only two scrapes give (new connections) were not asked for
    queries = " ".join(r.get("query", "") for r in server.requests)
    assert "loadkit_host_cpu_seconds_total" in queries
    assert "loadkit_host_tcp_opens_total" not in queries
    assert "loadkit_server_connections_total" not in queries


def test_joining_asks_for_no_window_and_a_finished_run(fake: Any, tmp_path: Path) -> None:
    server = fake({})
    run_dir = _load_test(tmp_path)
    args = build_parser().parse_args(
        ["import", "--prometheus", server.url, "--run", str(run_dir), "--window", "1h"]
    )
    with pytest.raises(UsageError, match="the run's own window"):
        import_command.run(args)
    # a Prometheus without the server's exporters: one line, nothing written
    assert main(["import", "--prometheus", server.url, "--run", str(run_dir)]) == 2
    assert not (run_dir / "telemetry" / "gpu.jsonl").exists()


def test_without_step_the_window_is_pulled_at_the_scrape_interval(
    fake: Any, tmp_path: Path
) -> None:
    # GIVEN a Prometheus that scraped Triton every second (the fake's `up` samples)
    server = fake(triton_series(spike_every=20))
    # WHEN a window is imported with no --step
    assert (
        main(
            ["import", "--prometheus", server.url, "--window", "200s", "--end", str(START + 200)]
            + ["--out", str(tmp_path), "--run-id", "prod"]
        )
        == 0
    )
    run = load_run(tmp_path / "prod")
    # THEN its step is the scrape interval (not a fixed 5 s), and the analysis says why
    assert run.info.production is not None
    assert run.info.production["step_s"] == 1.0
    assert run.info.production["step_reason"] == "the scrape interval"
    analysis = analyze_run(run)
    assert analysis.window_s == 1.0
    assert any("at a 1 s step (the scrape interval; " in n for n in analysis.notes)


def test_the_step_follows_the_scrape_interval_coarsened_only_for_memory() -> None:
    hours = 3600.0
    assert choose_step(None, 1.0, 3 * 60) == (1.0, "the scrape interval")
    assert choose_step(None, 15.2, 6 * hours) == (15.0, "the scrape interval")
    assert choose_step(2.0, 1.0, 6 * hours) == (2.0, "--step")
    # 6 h at 1 s fits; 24 h at 1 s is coarsened to 4 s, and says so
    assert choose_step(None, 1.0, 6 * hours)[0] == 1.0
    step, why = choose_step(None, 1.0, 24 * hours)
    assert step == 4.0 and why.startswith("the scrape interval, coarsened")
    assert choose_step(None, None, hours) == (5.0, "the scrape interval unknown: no `up` samples")


def test_a_cause_that_needs_per_request_data_does_not_rank_a_production_finding(
    fake: Any, tmp_path: Path
) -> None:
    # GIVEN a production window whose model slows for 2 s every 20 s, on a host whose TCP
    # opens jump in the same seconds (other clients' connections: what node-exporter sees)
    series = triton_series(spike_every=20)
    node = {"job": "node", "instance": "gpu-3:9100"}

    def opens(t: float) -> float:
        return sum(400.0 if int(s) % 20 in (0, 1) else 5.0 for s in range(int(t)))

    series["node_netstat_Tcp_ActiveOpens"] = [(node, opens)]
    series["node_netstat_Tcp_PassiveOpens"] = [(node, opens)]
    server = fake(series)
    assert _import(server.url, tmp_path, "--selector", 'node={job="node"}') == 0
    # WHEN it is analyzed
    analysis = analyze_run(load_run(tmp_path / "prod"))
    # THEN connection churn, which needs per-request connection reuse, is not assessed at all
    # (not scored on the host's counters and then dropped), and the compute slowdown is
    # neither ranked after it nor lowered for it
    checks = {c.cause: c for c in analysis.causes_checked}
    assert checks["connection_churn"].status == "not_assessable"
    assert analysis.findings, (analysis.headline, checks)  # scored and dropped: nothing left
    top = analysis.findings[0]
    assert top.cause == "unexplained_compute_slowdown", analysis.headline
    assert "Ranked after" not in top.summary, top.summary
    assert top.confidence in ("strong", "moderate"), top
