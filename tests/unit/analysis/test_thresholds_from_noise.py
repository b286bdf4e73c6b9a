"""A cause fires where its signal clears the run's own baseline spread, not a fixed bar (issue 42, item 5).

Each rule twice: a weak fault over a quiet baseline fires where the old fixed
constant did not, and the same size of signal inside a noisy baseline's spread
does not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loadkit.analysis import analyze_run
from loadkit.analysis.causes import cgroup_throttling, connection_churn, cpu_saturation
from loadkit.analysis.causes.base import CGROUP_THROTTLED_FLOOR_PCT, WAIT_FLOOR_MS_PER_S
from loadkit.analysis.gaps import CompletionGaps
from loadkit.analysis.model import SeriesPlace
from loadkit.analysis.telemetry import ModelActivity, RequestSampleSeries
from loadkit.rundir import load_run
from loadkit.testing.synthetic import RunSpec, write_run
from tests.unit.analysis.test_attribution_overlaps import _host
from tests.unit.analysis.test_causes import _signals, _triton
from tests.unit.analysis.test_residual_evidence import SLOW, _raise_run_delay

S = 1_000_000_000
N = 20
FAULT = [6, 7, 13, 14]  # the fault's windows
BASE = np.ones(N, dtype=bool)
BASE[FAULT] = False


def _fires(signature) -> list[int]:
    assert signature.holds is not None, signature.not_assessable
    return np.nonzero(np.nan_to_num(signature.holds) > 0)[0].tolist()


def _noisy(low: float, high: float) -> np.ndarray:
    """A baseline that swings between `low` and `high` window to window."""
    return np.where(np.arange(N) % 2 == 0, low, high).astype(float)


# --- cgroup throttling: throttled share of CFS periods ----------------------------------


def _quota(pct: np.ndarray):
    sig = _signals(N)
    host = _host(N, 0.0, None)
    host.has_cgroup = True
    host.cgroup_throttled_pct = pct
    sig.host = host
    return sig


def test_a_quota_just_below_the_need_throttling_a_few_periods_is_cgroup_throttling():
    # GIVEN a cgroup that never throttled in the baseline, and a quota just below the need
    # that throttles 4 % of the periods in the fault's windows (the old bar was 10 %)
    pct = np.zeros(N)
    pct[FAULT] = 4.0
    # THEN its windows hold
    assert _fires(cgroup_throttling.signature(_quota(pct), BASE)) == FAULT
    # ... but a throttle under the floor is no binding quota
    pct[FAULT] = CGROUP_THROTTLED_FLOOR_PCT / 2
    assert _fires(cgroup_throttling.signature(_quota(pct), BASE)) == []


def test_throttling_inside_a_noisy_baselines_spread_is_not_cgroup_throttling():
    # GIVEN a quota that throttles 0-8 % of the periods window to window all run long, and
    # 8 % in the "fault" windows: the same size of signal, inside the run's own spread
    pct = _noisy(0.0, 8.0)
    pct[FAULT] = 8.0
    assert _fires(cgroup_throttling.signature(_quota(pct), BASE)) == []
    # ... while a throttle well beyond that spread holds
    pct[FAULT] = 40.0
    assert _fires(cgroup_throttling.signature(_quota(pct), BASE)) == FAULT


def test_cpu_saturation_leaves_a_weak_quotas_windows_to_cgroup_throttling():
    # GIVEN the server waiting 4x its usual time for a CPU in the fault's windows, and its
    # cgroup throttled in 4 % of the periods (never in baseline) in two of them
    pct = np.zeros(N)
    pct[FAULT[:2]] = 4.0
    sig = _quota(pct)
    _waiting(sig, np.full(N, 40.0), FAULT, 160.0)
    # THEN CPU saturation holds only where the quota did not bind
    assert _fires(cpu_saturation.signature(sig, BASE)) == FAULT[2:]


# --- CPU saturation: the server's run delay ----------------------------------------------


def _waiting(sig, delay: np.ndarray, where: list[int], value: float, busy: float = 1 / 16):
    """The server's run delay `delay`, `value` in `where`; `busy` of the 16 cores full."""
    if sig.host is None:
        sig.host = _host(N, 0.0, None)
    sig.host.has_per_core = True
    sig.host.busy_core_frac = np.full(N, busy)
    delay = delay.copy()
    delay[where] = value
    sig.host.server_run_delay_ms_per_s = delay
    return sig


def test_a_neighbour_on_one_core_of_sixteen_is_judged_by_the_servers_run_delay():
    # GIVEN a 16-core server with one core full all run (never 75 % of them), its threads
    # waiting 40 ms/s (+-10 %) for a CPU, and a neighbour at its own priority that makes
    # them wait 1.8x that in the fault's windows
    rng = np.random.default_rng(3)
    delay = 40.0 * rng.uniform(0.9, 1.1, N)
    sig = _waiting(_signals(N), delay, FAULT, 72.0)
    s = cpu_saturation.signature(sig, BASE)
    # THEN CPU saturation holds there, with no core count to show for it
    assert _fires(s) == FAULT
    assert s.evidence is not None
    text = cpu_saturation.summary(s.evidence(~BASE, BASE), "4/4 spike episodes", None)
    assert "waited 72 ms per second for a CPU" in text, text


def test_a_run_delay_alone_that_rose_less_than_threefold_is_at_most_weak():
    # GIVEN the server's threads waiting 1.8x their usual 40 ms/s in the fault's windows,
    # no core newly pinned: a noisy signal on a shared host (a clean run reached 1.9x)
    rng = np.random.default_rng(3)
    delay = 40.0 * rng.uniform(0.9, 1.1, N)
    s = cpu_saturation.signature(_waiting(_signals(N), delay, FAULT, 72.0), BASE)
    # THEN it holds there, but its finding can be no more than weak
    assert _fires(s) == FAULT and s.max_confidence == "weak"
    # ... while 5x the usual wait, or a core newly pinned beside 1.8x, stands for itself
    s = cpu_saturation.signature(_waiting(_signals(N), delay, FAULT, 200.0), BASE)
    assert _fires(s) == FAULT and s.max_confidence is None
    sig = _waiting(_signals(N), delay, FAULT, 72.0, busy=0.0)
    sig.host.busy_core_frac[FAULT] = 1 / 16
    s = cpu_saturation.signature(sig, BASE)
    assert _fires(s) == FAULT and s.max_confidence is None


def test_a_run_delay_inside_a_noisy_baselines_spread_is_not_cpu_saturation():
    # GIVEN the server's threads waiting 20-100 ms/s window to window all run long (other
    # work comes and goes), and 100 ms/s in the "fault" windows: inside the spread
    sig = _waiting(_signals(N), _noisy(20.0, 100.0), FAULT, 100.0)
    assert _fires(cpu_saturation.signature(sig, BASE)) == []
    # ... and a near-idle wait that triples stays under the floor (it did not matter)
    quiet = np.full(N, WAIT_FLOOR_MS_PER_S / 5)
    sig = _waiting(_signals(N), quiet, FAULT, 3 * WAIT_FLOOR_MS_PER_S / 5)
    assert _fires(cpu_saturation.signature(sig, BASE)) == []


def test_a_stops_catch_up_is_a_stall_not_a_neighbour():
    # GIVEN a 0.4 s completion gap in window 6 (the server stopped: not runnable, no wait)
    # and its catch-up in window 7 waiting 1.6x the usual; a neighbour in windows 13-14
    sig = _waiting(_signals(N), np.full(N, 40.0), [7], 64.0)
    sig.host.server_run_delay_ms_per_s[[13, 14]] = 120.0
    sig.gaps = CompletionGaps(np.array([[6 * S + S // 2, 6 * S + 9 * S // 10]]), "test")
    # THEN only the neighbour's windows are CPU saturation
    assert _fires(cpu_saturation.signature(sig, BASE)) == [13, 14]


def test_another_models_burst_on_the_same_server_is_not_a_neighbours_cpu():
    # GIVEN the server's threads waiting 3x their usual time in the fault's windows, and
    # in two of them another model on the same server working (its threads are the
    # server's: model contention's, not a neighbour's)
    sig = _waiting(_signals(N), np.full(N, 40.0), FAULT, 120.0)
    sig.triton = _triton(N)
    busy = np.zeros(N)
    busy[FAULT[:2]] = 400.0
    sig.triton.others = {"doc_ranker": ModelActivity(busy / 2, busy / 8, busy)}
    # THEN CPU saturation holds only where no other model rose
    assert _fires(cpu_saturation.signature(sig, BASE)) == FAULT[2:]


def test_a_neighbour_on_some_cores_in_every_spike_is_named_first(tmp_path):
    # GIVEN the model's compute slowing in six windows while the server's threads wait 5x
    # their usual 20 ms/s for a CPU in them, the host's cores as busy as ever (a neighbour
    # on one core slows the server's threads, and uses 60 % of that core)
    spec = RunSpec(rate_rps=200, model_slowdowns=SLOW, run_delay_ms_per_s=20.0)
    run_dir = write_run(spec, tmp_path)
    _raise_run_delay(Path(run_dir), SLOW, 80.0, neighbour_core_pct=60.0)
    a = analyze_run(load_run(run_dir))
    # THEN CPU saturation is named first, above weak, in every episode, by the run delay
    top = a.findings[0]
    assert top.cause == "cpu_saturation", [(f.cause, f.confidence) for f in a.findings]
    assert top.confidence in ("moderate", "strong") and len(top.episodes) == 6, top
    assert "the server's threads waited" in top.summary, top.summary


def _others(sig, others: np.ndarray, generator: np.ndarray | None = None):
    """The machine's CPU: the server's 0.5 core, `others` for the rest (in cores)."""
    sig.host.server_cpu_cores = np.full(N, 0.5)
    sig.host.cpu_cores_used = 0.5 + others + (0.0 if generator is None else generator)
    sig.generator_cpu_cores = generator
    return sig


def test_a_server_waiting_on_its_own_threads_is_not_cpu_saturation():
    # GIVEN the server's threads waiting 4x their usual 40 ms/s in the fault's windows while
    # the CPU used by everything else on its machine stays within its spread (a proxy that
    # releases requests in bunches, the server's own large copies)
    others = _noisy(0.28, 0.32)
    sig = _others(_waiting(_signals(N), np.full(N, 40.0), FAULT, 160.0), others)
    # THEN no neighbour took the CPU: it is not CPU saturation
    assert _fires(cpu_saturation.signature(sig, BASE)) == []
    # ... while a neighbour that takes one more core in those windows is
    others[FAULT] += 1.0
    sig = _others(_waiting(_signals(N), np.full(N, 40.0), FAULT, 160.0), others)
    s = cpu_saturation.signature(sig, BASE)
    assert _fires(s) == FAULT
    assert s.evidence is not None
    text = cpu_saturation.summary(s.evidence(~BASE, BASE), "4/4 spike episodes", None)
    assert "Other work on the server's machine used 1.30 cores vs 0.30" in text, text


def test_loadkits_own_generator_on_the_servers_machine_is_not_a_neighbour():
    # GIVEN the run delay 4x in the fault's windows, where loadkit's own generator, on the
    # server's machine, used one more core (large payloads to encode)
    generator = np.full(N, 0.2)
    generator[FAULT] = 1.2
    sig = _others(_waiting(_signals(N), np.full(N, 40.0), FAULT, 160.0), np.full(N, 0.3), generator)
    # THEN that core is loadkit's, not a neighbour's
    assert _fires(cpu_saturation.signature(sig, BASE)) == []
    # ... but on a server's machine that loadkit does not run on, that core is someone else's
    sig.places = (SeriesPlace("host", "server", "gpu-1", loadkit_host=False),)
    assert _fires(cpu_saturation.signature(sig, BASE)) == FAULT


# --- connection churn: new connections per second ---------------------------------------


def _churn(new_share: np.ndarray):
    sig = _signals(N)
    sig.throughput_rps = np.full(N, 100.0)
    sig.samples = RequestSampleSeries(new_share, 30.0, 5.0, 4000, first_vs_neighbours=3.0)
    return sig


def test_churn_over_a_client_that_reconnects_steadily_is_judged_by_its_spread():
    # GIVEN a client that opens 3 connections/s all run long, and 7/s in the fault's windows
    # (the old bar: 4x + 1 = 13/s)
    share = np.full(N, 0.03)
    share[FAULT] = 0.07
    assert _fires(connection_churn.signature(_churn(share), BASE)) == FAULT


def test_churn_inside_a_noisy_baselines_spread_is_not_connection_churn():
    # GIVEN a client that opens 0-8 connections/s window to window, and 8/s in the "fault"
    # windows: inside the spread
    share = _noisy(0.0, 0.08)
    share[FAULT] = 0.08
    assert _fires(connection_churn.signature(_churn(share), BASE)) == []
