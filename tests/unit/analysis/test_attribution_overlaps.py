"""Signatures the diagnosis benchmark exercised: run-long churn, stalls inside other faults,
backlog draining after a stall, and which source counts new connections."""

import numpy as np

from loadkit.analysis.telemetry import HostSeries, RequestSampleSeries, new_connections_per_s
from loadkit.testing.synthetic import FaultWindow, RunSpec, periodic_clock_drops

W = FaultWindow


def test_run_long_churn_is_a_standing_condition(analyze_spec):
    # GIVEN every request opens a new connection, the whole run (keep-alive off)
    a = analyze_spec(RunSpec(rate_rps=200, churns=(W(0, 90, 1.0),)), "churn-all-run")
    # THEN churn is found as a standing condition (no baseline to contrast episodes with)
    (churn,) = [f for f in a.findings if f.cause == "connection_churn"]
    assert churn.confidence == "strong"
    assert churn.episodes == () and churn.coincidence >= 0.8
    ev = {e.name: e.value for e in churn.evidence}
    assert ev["new_connection_share_run"] > 0.9
    assert "keep-alive is off" in churn.summary


def test_occasional_new_connections_are_not_churn(analyze_spec):
    # GIVEN the model slowing down x2 for 3 s every 12 s, and in those same seconds 2.5 % of
    # the requests opening a new connection (about 10/s at 400 req/s: over the 5/s floor
    # and four times the baseline, each first request slowed by its handshake), under the
    # 5 % of requests that churn needs; 200 sampled requests a second resolve that share
    spans = (10, 22, 34, 46)
    spec = RunSpec(
        duration_s=56,
        rate_rps=400,
        model_slowdowns=tuple(W(t, t + 3, 2.0) for t in spans),
        churns=tuple(W(t, t + 3, 0.025) for t in spans),
        request_samples_per_s=200,
    )
    a = analyze_spec(spec, "occasional-connections")
    rate = np.array(a.telemetry.new_connections_per_s, dtype=float)
    in_spans = np.isin(
        np.floor(a.windows.t_s).astype(int), [t + k for t in spans for k in range(3)]
    )
    assert np.nanmean(rate[in_spans]) >= 5.0 > np.nanmedian(rate[~in_spans]), rate
    # THEN the spikes are the slowdown's, and the occasional new connections in them are
    # not named churn
    causes = [f.cause for f in a.findings]
    assert causes[:1] == ["unexplained_compute_slowdown"], causes
    assert "connection_churn" not in causes, causes


def test_stalls_during_thermal_throttling_are_both_found_and_not_a_burst(analyze_spec):
    # GIVEN thermal throttling every 12 s and a SIGSTOP-like stall inside some of the throttles
    spec = RunSpec(
        rate_rps=250,
        clock_drops=periodic_clock_drops(12, 4, first_s=10, until_s=90, factor=1.8),
        stalls=(W(11.2, 13.0), W(35.2, 37.0), W(59.2, 61.0), W(83.2, 85.0)),
    )
    a = analyze_spec(spec, "thermal-and-stall")
    causes = [f.cause for f in a.findings]
    # THEN both causes are findings, and the backlog drained after each stall
    # (full batches at the usual arrival rate) is not called an arrival burst
    assert "gpu_clock_thermal" in causes and "process_stall" in causes, causes
    assert "arrival_burst" not in causes


def test_a_stall_masked_by_a_quota_is_found_on_the_episodes_the_quota_leaves(analyze_spec):
    # GIVEN a quota that throttles the server for 3 s every 10 s (seven episodes) and two
    # short stops between its windows: the stall's signature holds in 2 of 9 episodes,
    # under the 30 % any cause needs when rated on every episode
    quotas = tuple(W(t, t + 3, 3.0) for t in (10, 20, 30, 40, 50, 60, 70))
    spec = RunSpec(rate_rps=250, cgroup_quotas=quotas, stalls=(W(35, 35.5), W(76, 76.5)))
    a = analyze_spec(spec, "stall-masked-by-quota")
    # THEN the quota is first, and the stall is found on the episodes it leaves over: a
    # weak lead there (two episodes of nine), said to be rated on those
    causes = [f.cause for f in a.findings]
    assert causes[:2] == ["cgroup_throttling", "process_stall"], causes
    stall = a.findings[1]
    assert stall.confidence == "weak" and len(stall.episodes) == 2
    assert set(stall.episodes).isdisjoint(a.findings[0].episodes)
    assert "2/2 spike episodes no other cause explains" in stall.summary
    # ... and without the stops, the quota's leftovers name no stall
    alone = analyze_spec(RunSpec(rate_rps=250, cgroup_quotas=quotas), "quota-alone")
    assert "process_stall" not in [f.cause for f in alone.findings]


def _host(n: int, host_wide: float, server: float | None) -> HostSeries:
    nan = np.full(n, np.nan)
    return HostSeries(
        cpu_core_max_pct=nan,
        cpu_mean_pct=nan,
        busy_core_frac=nan,
        idle_cores=nan,
        psi_some_avg10=nan,
        cgroup_throttled_pct=nan,
        cgroup_throttled_ms_per_s=nan,
        server_rss_bytes=nan,
        tcp_new_connections_per_s=np.full(n, host_wide),
        server_new_connections_per_s=np.full(n, np.nan if server is None else server),
        has_per_core=False,
        has_cgroup=False,
        has_tcp=True,
        has_server_tcp=server is not None,
        counter_resets=0,
    )


def test_new_connections_prefer_the_requests_then_the_servers_ports_over_host_wide_opens():
    n, throughput = 4, np.full(4, 100.0)
    samples = RequestSampleSeries(np.full(n, 0.02), 9.0, 4.0, 400)
    # GIVEN other processes open 300 connections/s on the host
    rate, source = new_connections_per_s(_host(n, 300.0, 3.0), samples, throughput)
    assert source == "request samples" and np.allclose(rate, 2.0)
    rate, source = new_connections_per_s(_host(n, 300.0, 3.0), None, throughput)
    assert source.startswith("connections to the server") and np.allclose(rate, 3.0)
    rate, source = new_connections_per_s(_host(n, 300.0, None), None, throughput)
    assert source.startswith("host TCP") and np.allclose(rate, 300.0)
    assert new_connections_per_s(None, None, throughput) == (None, "")


# Windows 8-13 of a real benchmark run (thermal+stall, seed 1): a SIGSTOP at 10.3 s
# for 2 s. Triton's statistics charge the stopped time to the requests caught in
# it, so the window holding the stop already shows a long queue; the catch-up
# window drains the backlog in big batches at the usual arrival rate (its compute
# unknown: the statistics poll itself was held up by the stop).
NAN = float("nan")
STALL_COMPLETED = [150, 150, 150, 150, 22, 0, 360, 151, 150, 150, 150, 150]
STALL_QUEUE_MS = [0.6, 0.6, 0.6, 0.6, 13.5, 33.1, 22.7, 0.6, 0.6, 0.6, 0.6, 0.6]
STALL_BATCH = [1.0, 1.0, 1.0, 1.0, 1.5, 7.7, 26.0, 1.0, 1.0, 1.0, 1.0, 1.0]
STALL_COMPUTE_MS = [2.7, 2.7, 2.7, 2.7, 12.4, 24.1, NAN, 2.6, 2.7, 2.7, 2.7, 2.7]


def _stall_signals():
    from loadkit.analysis.attribution import Signals
    from loadkit.analysis.telemetry import TritonSeries

    n = len(STALL_COMPLETED)
    arr = lambda v: np.array(v, dtype=float)  # noqa: E731
    triton = TritonSeries(
        model="ranker",
        executions_per_s=arr(STALL_COMPLETED) / arr(STALL_BATCH),
        inferences_per_s=arr(STALL_COMPLETED),
        batch_size_mean=arr(STALL_BATCH),
        batch_size_max=arr(STALL_BATCH),
        batch_size_req_weighted=arr(STALL_BATCH),
        queue_ms_per_request=arr(STALL_QUEUE_MS),
        batch_compute_ms=arr(STALL_COMPUTE_MS),
        compute_ms_per_request=arr(STALL_COMPUTE_MS) / arr(STALL_BATCH),
        batch_sizes=None,
        counter_resets=0,
    )
    return Signals(
        window_s=1.0,
        starts_ns=np.arange(n, dtype=np.int64) * 1_000_000_000,
        p99_ms=np.full(n, 6.0),
        service_p50_ms=np.full(n, 4.0),
        completed=arr(STALL_COMPLETED),
        offered_rps=np.full(n, 150.0),
        throughput_rps=arr(STALL_COMPLETED),
        in_flight=np.zeros(n),
        sources={"triton_stats": triton},
        samples=None,
        max_batch_size=32,
        max_queue_delay_ms=0.5,
        burst_mask=np.zeros(n, dtype=bool),
    )


def test_stall_queue_is_checked_before_the_stop_began_not_in_its_first_window():
    from loadkit.analysis.causes.process_stall import signature as process_stall_signature

    sig = _stall_signals()
    baseline = np.array([True] * 4 + [False] * 4 + [True] * 4)
    s = process_stall_signature(sig, baseline)
    assert s.holds is not None
    assert np.nonzero(s.holds > 0)[0].tolist() == [5]


def test_full_batches_draining_a_backlog_at_the_usual_arrival_rate_are_not_a_burst():
    from loadkit.analysis.causes.arrival_burst import signature as arrival_burst_signature

    sig = _stall_signals()
    baseline = np.array([True] * 4 + [False] * 4 + [True] * 4)
    s = arrival_burst_signature(sig, baseline)
    assert s.holds is not None and np.nansum(s.holds) == 0
    # ... while the same full batches with arrivals up 3x are one
    sig.offered_rps[6] = 450.0
    s = arrival_burst_signature(sig, baseline)
    assert s.holds is not None and np.nonzero(s.holds > 0)[0].tolist() == [6]


def test_a_binding_cgroup_quota_on_a_busy_host_is_the_quota_not_the_host():
    from loadkit.analysis.causes.cgroup_throttling import (
        signature as cgroup_throttling_signature,
    )
    from loadkit.analysis.causes.cpu_saturation import signature as cpu_saturation_signature

    sig = _stall_signals()
    n = sig.n
    # GIVEN other work keeps every core busy all run, and the server's cgroup
    # uses up its quota in every period of windows 4-6
    host = _host(n, 0.0, None)
    host.has_per_core = True
    host.has_cgroup = True
    host.busy_core_frac = np.ones(n)
    host.idle_cores = np.zeros(n)
    host.cgroup_throttled_pct = np.zeros(n)
    host.cgroup_throttled_pct[4:7] = 100.0
    sig.host = host
    baseline = np.array([True] * 4 + [False] * 4 + [True] * 4)
    # THEN throttling holds there although no core is idle ...
    cg = cgroup_throttling_signature(sig, baseline)
    assert cg.holds is not None and np.nonzero(cg.holds > 0)[0].tolist() == [4, 5, 6]
    # ... and the busy host is not blamed for the windows the quota explains
    cpu = cpu_saturation_signature(sig, baseline)
    assert cpu.holds is not None and not np.any(cpu.holds[4:7] > 0)
