"""Locust's per-second counts and chart history stay bounded on a long run.

Locust itself is imported only in a child process: importing it monkey-patches
the interpreter (gevent), which would change every test after this one.
"""

import json
import subprocess
import sys
import textwrap
from collections import defaultdict
from types import SimpleNamespace

from loadkit.load.generator import locust_stats


def _entry(start_s: int, every_fail: int = 0) -> SimpleNamespace:
    reqs: defaultdict[int, int] = defaultdict(int)
    fails: defaultdict[int, int] = defaultdict(int)
    for t in range(start_s, start_s + 3600):
        reqs[t] += 1000
        if every_fail and t % every_fail == 0:
            fails[t] += 1
    return SimpleNamespace(num_reqs_per_sec=reqs, num_fail_per_sec=fails)


def test_an_hour_of_per_second_counts_is_cut_to_the_last_minute_and_the_newest_are_kept():
    start = 1_700_000_000
    total, named = _entry(start), _entry(start, every_fail=7)
    history = [{"time": str(t)} for t in range(start, start + 3600, 5)]
    stats = SimpleNamespace(total=total, entries={("infer", "POST"): named}, history=list(history))
    fails_old = len([t for t in named.num_fail_per_sec if t < start + 3540])

    dropped = locust_stats.trim(stats, now_s=start + 3600, keep_s=60, history_points=100)

    assert sorted(total.num_reqs_per_sec) == list(range(start + 3540, start + 3600))
    assert sorted(named.num_reqs_per_sec) == list(range(start + 3540, start + 3600))
    assert set(named.num_reqs_per_sec.values()) == {1000}  # the kept seconds are untouched
    assert named.num_fail_per_sec and min(named.num_fail_per_sec) >= start + 3540
    assert stats.history == history[-100:]
    assert dropped == 2 * 3540 + fails_old + (len(history) - 100)
    # nothing left to drop until time moves on
    assert locust_stats.trim(stats, now_s=start + 3600, keep_s=60, history_points=100) == 0


def test_locust_reads_the_same_current_rates_after_the_trim():
    # In a child: real Locust statistics, an hour of requests, then the trim.
    code = textwrap.dedent(
        """
        import json, time
        from locust.stats import RequestStats
        from loadkit.load.generator import locust_stats

        stats = RequestStats(use_response_times_cache=True)
        now = int(time.time())
        start = now - 3600
        stats.total.start_time = start
        for t in range(start, now):
            stats.total.num_reqs_per_sec[t] += 1000
            stats.get("infer", "POST").num_reqs_per_sec[t] += 1000
            stats.get("infer", "POST").num_fail_per_sec[t] += t % 3
        stats.total.last_request_timestamp = now
        entry = stats.get("infer", "POST")
        before = [stats.total.current_rps, entry.current_rps, entry.current_fail_per_sec]
        locust_stats.trim(stats, now_s=now)
        after = [stats.total.current_rps, entry.current_rps, entry.current_fail_per_sec]
        print(json.dumps({"before": before, "after": after, "kept": len(entry.num_reqs_per_sec)}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["before"] == got["after"]
    assert got["before"][0] == 1000
    assert got["kept"] == locust_stats.KEEP_S


def test_the_runtime_trims_locust_stats_while_its_recorder_is_open():
    # In a child, for the same reason: the runtime's loop on real Locust statistics.
    code = textwrap.dedent(
        """
        import time
        from types import SimpleNamespace
        import gevent
        from locust.stats import RequestStats
        from loadkit.load.generator import locust_stats
        from loadkit.load.generator.runtime import LoadRuntime

        locust_stats.TRIM_EVERY_S = 0.01
        stats = RequestStats(use_response_times_cache=True)
        now = int(time.time())
        for t in range(now - 3600, now):
            stats.total.num_reqs_per_sec[t] += 1
        recorder = SimpleNamespace(closed=False)
        runtime = SimpleNamespace(environment=SimpleNamespace(stats=stats))
        loop = gevent.spawn(LoadRuntime._bound_locust_stats, runtime, recorder)
        gevent.sleep(0.1)
        recorder.closed = True
        loop.join(timeout=1)
        print(loop.dead, len(stats.total.num_reqs_per_sec))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    dead, kept = done.stdout.split()[-2:]
    assert dead == "True"
    assert int(kept) <= locust_stats.KEEP_S + 1
