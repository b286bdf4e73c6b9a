"""Each cause tests what makes it that cause: sub-window stalls, symptoms without their trigger."""

from __future__ import annotations

import numpy as np
import pytest

from loadkit.analysis.align import make_grid
from loadkit.analysis.causes import REGISTRY
from loadkit.analysis.gaps import CompletionGaps, gaps_from_samples
from loadkit.testing.synthetic import FaultWindow, RunSpec, completion_gaps

W = FaultWindow
S = 1_000_000_000


def _periodic(first: float, length: float, period: float = 9.0, n: int = 7) -> tuple[W, ...]:
    return tuple(W(first + k * period, first + k * period + length) for k in range(n))


@pytest.mark.parametrize(
    ("length", "phase"),
    # each straddles a window edge: it starts `phase` s into a window and runs past its end
    [(0.2, 0.9), (0.5, 0.7), (0.9, 0.6)],
)
def test_a_stall_shorter_than_a_window_is_found_across_window_edges(analyze_spec, length, phase):
    # GIVEN SIGSTOPs of the server of 0.2-0.9 s, every 9 s, each across two windows
    spec = RunSpec(duration_s=80, rate_rps=200, stalls=_periodic(12 + phase, length))
    a = analyze_spec(spec, f"stall-{length}")
    # THEN the process stall is the first finding, from gaps of about that length
    assert a.findings, a.headline
    top = a.findings[0]
    assert top.cause == "process_stall", [(f.cause, f.confidence) for f in a.findings]
    assert top.confidence in ("strong", "moderate")
    longest = next(e.value for e in top.evidence if e.name == "stall_longest_in_episodes")
    assert longest is not None and length * 0.9 <= longest <= length + 0.1
    # ... and no other cause is named above weak beside it
    assert all(f.confidence == "weak" for f in a.findings[1:]), a.findings[1:]


def test_a_gap_shorter_than_the_threshold_is_not_a_stall():
    # GIVEN a 0.12 s gap; the threshold is max(0.2 s, 5x service time)
    grid = make_grid(0, 10 * S, 1.0)
    gaps = CompletionGaps(np.array([[3_950_000_000, 4_070_000_000]]), "test")
    # THEN it is dropped at 0.2 s, and its seconds are shared by the windows it straddles
    assert len(gaps.longer_than(0.2).spans_ns) == 0
    per = gaps.per_window(grid)
    assert per[3] == pytest.approx(0.05) and per[4] == pytest.approx(0.07)
    assert gaps.longest_per_window(grid)[3] == pytest.approx(0.12)


def test_gaps_from_samples_only_when_every_request_is_sampled():
    import pandas as pd

    sent = np.array([0.0, 0.1, 0.15, 0.9, 0.95]) * S
    done = np.array([0.02, 0.12, 1.6, 1.6, 1.62]) * S
    frame = pd.DataFrame({"sent_ns": sent.astype(np.int64), "done_ns": done.astype(np.int64)})
    gaps = gaps_from_samples(frame, {0: 2, 1: 3})
    # THEN the span from the last completion (0.12 s) to 1.6 s, requests in flight throughout
    assert gaps is not None and gaps.spans_ns.tolist() == [[int(0.15 * S), int(1.6 * S)]]
    # ... and none when the load counters say more completed than were sampled
    assert gaps_from_samples(frame, {0: 2, 1: 30}) is None
    # the synthetic writer agrees with the recorder's rule
    assert completion_gaps(sent / S, done / S) == [(0.15, 1.6)]


def test_slow_compute_at_flat_arrivals_is_not_an_arrival_burst(analyze_spec):
    # GIVEN compute per batch x2.5 every 9 s (no clock, CPU or cgroup signal), flat arrivals
    slow = tuple(W(12 + 9 * k, 15 + 9 * k, 2.5) for k in range(7))
    spec = RunSpec(duration_s=80, rate_rps=400, model_slowdowns=slow)
    a = analyze_spec(spec, "slow-model")
    causes = {f.cause for f in a.findings}
    # THEN no arrival burst (arrivals never rose), no stall, no clock cause
    assert "arrival_burst" not in causes, a.findings
    assert "process_stall" not in causes
    assert not causes & {"gpu_clock_thermal", "gpu_clock_power", "gpu_clock_other"}
    # ... but a specific finding: the compute grew, and nothing else moved
    top = a.findings[0]
    assert top.cause == "unexplained_compute_slowdown", [
        (f.cause, f.confidence) for f in a.findings
    ]
    assert top.confidence in ("strong", "moderate")
    assert "compute per batch x2" in top.summary and "no change in GPU clock" in top.summary
    assert top.action
    # ... and every P99 episode says the server's compute is what grew
    p99 = a.episodes_for("p99")
    assert p99 and all(e.grew == "server_compute" for e in p99), [e.grew for e in p99]


def test_arrival_burst_without_capacity_says_so_and_stays_weak(analyze_spec):
    from loadkit.testing.synthetic import Burst

    bursts = tuple(Burst(12 + 10 * k, 15 + 10 * k, 4.0) for k in range(6))
    spec = RunSpec(duration_s=80, rate_rps=300, bursts=bursts, sources=("host",), max_batch_size=4)
    a = analyze_spec(spec, "burst-no-stats")
    burst = [f for f in a.findings if f.cause == "arrival_burst"]
    # THEN without Triton statistics the capacity is unknown: said, and never above weak
    for f in burst:
        assert f.confidence == "weak"
        assert "capacity unknown" in f.summary


def test_throttling_without_latency_effect_is_not_named(analyze_spec):
    # GIVEN throttled periods all run long that slow nothing, and no spikes
    spec = RunSpec(duration_s=60, rate_rps=200, cgroup_quotas=(W(0, 60, 0.0),))
    a = analyze_spec(spec, "harmless-quota")
    assert "cgroup_throttling" not in {f.cause for f in a.findings}


def test_every_cause_is_one_registry_entry_with_what_the_report_needs():
    ids = [c.id for c in REGISTRY]
    assert len(ids) == len(set(ids))
    for cause in REGISTRY:
        assert cause.title and cause.action and callable(cause.signature)
        assert cause.kind in ("episodic", "standing", "either", "unexplained")
        assert (cause.component is not None) == (cause.kind == "unexplained")


def test_where_the_time_goes_names_the_part_that_grew(analyze_spec):
    # GIVEN the client host saturated every 9 s (requests sent and handled late)
    sat = tuple(W(12 + 9 * k, 15 + 9 * k, 15.0) for k in range(7))
    a = analyze_spec(RunSpec(duration_s=80, rate_rps=300, cpu_saturations=sat), "client-cpu")
    # THEN the breakdown has the four parts from Triton's statistics ...
    assert a.breakdown is not None and a.breakdown.source == "triton statistics"
    names = [c.name for c in a.breakdown.components]
    assert names == ["generator_lag", "client_network", "server_queue", "server_compute"]
    assert all(len(c.ms) == len(a.windows.t_ns) for c in a.breakdown.components)
    # ... and the episodes grew outside the server (generator or client + network)
    p99 = a.episodes_for("p99")
    assert p99 and all(e.grew in ("generator_lag", "client_network") for e in p99)


def test_a_stall_grows_the_server_side_and_without_server_statistics_says_so(analyze_spec):
    stalls = _periodic(12.4, 0.6)
    with_stats = analyze_spec(RunSpec(duration_s=80, rate_rps=200, stalls=stalls), "stall-split")
    p99 = with_stats.episodes_for("p99")
    assert p99 and all(e.grew in ("server_queue", "server_compute") for e in p99)
    # GIVEN no Triton statistics: the server side and the network are one part
    spec = RunSpec(duration_s=80, rate_rps=200, stalls=stalls, sources=("host",))
    a = analyze_spec(spec, "stall-client-only")
    assert a.breakdown is not None and a.breakdown.source == "client only"
    assert [c.name for c in a.breakdown.components] == ["generator_lag", "server_side"]
    assert all(e.grew == "server_side" for e in a.episodes_for("p99"))


def _signals(n: int = 12):
    from loadkit.analysis.causes.base import Signals

    return Signals(
        window_s=1.0,
        starts_ns=np.arange(n, dtype=np.int64) * S,
        p99_ms=np.full(n, 6.0),
        service_p50_ms=np.full(n, 4.0),
        completed=np.full(n, 150.0),
        offered_rps=np.full(n, 150.0),
        throughput_rps=np.full(n, 150.0),
        in_flight=np.ones(n),
        gpu=None,
        host=None,
        triton=None,
        samples=None,
        max_batch_size=32,
        max_queue_delay_ms=0.5,
        burst_mask=np.zeros(n, dtype=bool),
    )


def test_a_hot_gpu_that_keeps_its_clock_is_not_thermal_throttling():
    from loadkit.analysis.causes import gpu_clock_thermal
    from loadkit.analysis.telemetry import GpuSeries

    n = 12
    sig = _signals(n)
    full = np.full(n, 1980.0)
    sig.gpu = GpuSeries(
        sm_clock_mhz=full,
        sm_clock_max_mhz=full,
        clock_ratio_busy=np.ones(n),
        temp_c=np.full(n, 92.0),  # hot all the time ...
        power_w=np.full(n, 300.0),
        power_limit_w=np.full(n, 700.0),
        util_pct=np.full(n, 60.0),
        mem_used_bytes=np.full(n, 1e9),
        mem_total_bytes=8e10,
        thermal_reason=np.ones(n),  # ... with the thermal bit set, but the clock holds
        power_reason=np.zeros(n),
        has_reasons=True,
    )
    s = gpu_clock_thermal.signature(sig, np.ones(n, dtype=bool))
    assert s.holds is not None and np.nansum(s.holds) == 0


def test_busy_cores_while_arrivals_burst_are_the_burst_not_a_noisy_neighbour():
    from loadkit.analysis.causes import cpu_saturation
    from tests.unit.analysis.test_attribution_overlaps import _host

    n = 12
    sig = _signals(n)
    host = _host(n, 0.0, None)
    host.has_per_core = True
    host.busy_core_frac = np.zeros(n)
    host.busy_core_frac[[4, 5, 8]] = 1.0
    sig.host = host
    sig.offered_rps[4:6] = 600.0  # the server works through a burst: its cores are busy
    s = cpu_saturation.signature(sig, np.array([True] * 4 + [False] * 2 + [True] * 6))
    assert s.holds is not None and np.nonzero(s.holds > 0)[0].tolist() == [8]


def test_a_gap_while_the_cpu_is_taken_is_cpu_starvation_not_a_stall():
    from loadkit.analysis.causes import process_stall
    from tests.unit.analysis.test_attribution_overlaps import _host

    n = 12
    sig = _signals(n)
    # GIVEN gaps of 0.6 s in windows 3 and 8; the cores are saturated only in window 8
    sig.gaps = CompletionGaps(
        np.array([[3 * S + S // 5, 3 * S + 4 * S // 5], [8 * S + S // 5, 8 * S + 4 * S // 5]]),
        "test",
    )
    host = _host(n, 0.0, None)
    host.has_per_core = True
    host.busy_core_frac = np.zeros(n)
    host.busy_core_frac[8] = 1.0
    sig.host = host
    s = process_stall.signature(sig, np.ones(n, dtype=bool))
    # THEN only the gap on an otherwise idle CPU is a stall
    assert s.holds is not None and np.nonzero(s.holds > 0)[0].tolist() == [3]
    # ... and on a host busy all run long, the CPU does not explain either gap
    host.busy_core_frac = np.ones(n)
    s = process_stall.signature(sig, np.ones(n, dtype=bool))
    assert s.holds is not None and np.nonzero(s.holds > 0)[0].tolist() == [3, 8]


def test_the_report_shows_where_the_time_went_per_episode(analyze_spec):
    from loadkit.report.context import _episode

    slow = tuple(W(12 + 9 * k, 15 + 9 * k, 2.5) for k in range(7))
    a = analyze_spec(RunSpec(duration_s=80, rate_rps=400, model_slowdowns=slow), "slow-model")
    row = _episode(a.episodes_for("p99")[0])
    assert row["grew"].startswith("server compute +")
