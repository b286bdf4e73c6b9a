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
        runtime = SimpleNamespace(environment=SimpleNamespace(stats=stats), flush_locust_stats=lambda: None)
        loop = gevent.spawn(LoadRuntime._keep_locust_stats, runtime, recorder)
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


_FEED_CODE = """
import csv, io, json, random, time
from types import SimpleNamespace
from locust.event import EventHook
from locust.stats import RequestStats, StatsCSV
from loadkit.load.generator import locust_stats

rng = random.Random(7)
requests = []
for i in range(2000):
    name = "infer" if i % 3 else "other"
    error = None if i % 17 else ValueError("HTTP 503" if i % 2 else "timed out")
    requests.append(("HTTP", name, rng.uniform(0.05, 900.0), i % 5, error))

# Locust's own way: one events.request per request, into its runner's listener.
by_request = RequestStats(use_response_times_cache=True)
for method, name, ms, length, error in requests:
    by_request.log_request(method, name, ms, length)
    if error is not None:
        by_request.log_error(method, name, error)

# loadkit's: the same requests through the feed, flushed in a few batches.
by_feed = RequestStats(use_response_times_cache=True)
env = SimpleNamespace(stats=by_feed, events=SimpleNamespace(request=EventHook()))
feed = locust_stats.LocustStatsFeed(env)
for i, request in enumerate(requests):
    feed.request(*request)
    if i % 300 == 299:
        feed.flush()
feed.flush()

def rows(stats):
    out = io.StringIO()
    writer = csv.writer(out)
    report = StatsCSV(SimpleNamespace(stats=stats), [0.5, 0.99])
    report.requests_csv(writer)
    table = list(csv.reader(io.StringIO(out.getvalue())))
    # Requests/s and Failures/s (columns 9, 10) depend on when a request was logged, the
    # average on the order of a float sum; every other column must be equal.
    table = [r[:5] + [r[5][:8]] + r[6:9] + r[11:] for r in table]
    out = io.StringIO()
    report.failures_csv(csv.writer(out))
    # First/last seen: stamped to the second, both present; the same second is not promised.
    failures = list(csv.reader(io.StringIO(out.getvalue())))
    return table + [r[:4] + [bool(v) for v in r[4:]] for r in failures]

def entry(e):
    return [e.num_requests, e.num_failures, round(e.total_response_time, 6),
            e.min_response_time, e.max_response_time, dict(e.response_times),
            e.total_content_length]

print(json.dumps({
    "per_request": feed.per_request,
    "csv": [rows(by_request), rows(by_feed)],
    "total": [entry(by_request.total), entry(by_feed.total)],
    "infer": [entry(by_request.get("infer", "HTTP")), entry(by_feed.get("infer", "HTTP"))],
    "errors": [sorted((k, e.occurrences) for k, e in s.errors.items()) for s in (by_request, by_feed)],
}, default=str))

# A plugin listening to events.request gets every request, as before.
fired = []
hook = EventHook()
hook.add_listener(lambda **kw: fired.append(kw["response_time"]))
plugin = locust_stats.LocustStatsFeed(SimpleNamespace(stats=RequestStats(), events=SimpleNamespace(request=hook)))
plugin.request("HTTP", "infer", 1.5, 0, None)
print(json.dumps({"plugin": plugin.per_request, "fired": fired}))
"""


def test_the_feed_gives_locust_the_same_statistics_and_csv_as_one_event_per_request():
    # In a child: real Locust statistics and its CSV writer.
    done = subprocess.run(
        [sys.executable, "-c", _FEED_CODE], capture_output=True, text=True, timeout=60, check=True
    )
    lines = done.stdout.strip().splitlines()
    got, plugin = json.loads(lines[-2]), json.loads(lines[-1])
    assert got["per_request"] is False
    assert got["total"][0][0] == 2000
    assert got["total"][0][1] > 0  # some failures among them
    for key in ("csv", "total", "infer", "errors"):
        assert got[key][0] == got[key][1], key
    assert plugin == {"plugin": True, "fired": [1.5]}
