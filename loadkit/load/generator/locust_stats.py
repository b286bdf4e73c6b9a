"""Locust's own statistics: fed in aggregate, and kept bounded on long runs.

loadkit's recorder is the exact, per-request record; Locust's `RequestStats`
only keeps its web UI, console table and `--csv` files right. Firing
`events.request` once per request (Locust's stats then log each one, for the
entry and the total) cost 3 % of the open model's process at 2,000/s, so
`LocustStatsFeed` collects the requests and adds them to Locust's entries
every `FLUSH_EVERY_S`: the same counts, failures, response-time buckets,
totals, min/max and content length, with the per-second counts of the
flush's second. `events.request` carries one request per call, so there is no
aggregate to fire it with: the feed writes the entries as Locust's own
`StatsEntry.log` would. When anything besides Locust's runner listens to
`events.request` (a plugin), every request is fired as before instead.

Locust counts requests per second of wall time in a dict per statistics entry
(`num_reqs_per_sec`, `num_fail_per_sec`) and appends a chart point to
`stats.history` every 5 s; neither is ever trimmed. In a 1 h soak at 1,000 req/s
the generator's RSS grew 2.1 MiB/h, and tracemalloc put about 1.4 MiB/h of it in
those structures: a load generator that grows looks like a server that leaks.
Locust reads only the last ~12 s of the per-second counts (its current RPS), and
loadkit's own recording is the exact one, so older seconds are dropped here.
Locust offers no setting for this, hence the few lines below.
"""

from __future__ import annotations

import time
from typing import Any

TRIM_EVERY_S = 60.0
KEEP_S = 60  # seconds of per-second counts kept (Locust's current RPS reads the last 12)
HISTORY_POINTS = 720  # chart points kept: the last hour at Locust's 5 s
FLUSH_EVERY_S = 0.1  # how far Locust's statistics may lag loadkit's


class _Pending:
    """One (name, method)'s requests since the last flush."""

    __slots__ = ("times_ms", "length", "errors")

    def __init__(self) -> None:
        self.times_ms: list[float] = []
        self.length = 0
        self.errors: dict[str, list[Any]] = {}  # StatsError key -> [error, count, first, last]


class LocustStatsFeed:
    """loadkit's requests into Locust's `RequestStats`, in aggregate (see the module's text)."""

    def __init__(self, environment: Any):
        self.environment = environment
        self._pending: dict[tuple[str, str], _Pending] = {}
        hook = environment.events.request
        # Locust's runner's own listener is the one in locust.runners; any other wants each request.
        self.per_request = any(
            getattr(h, "__module__", "") != "locust.runners" for h in hook._handlers
        )

    def request(
        self, method: str, name: str, response_time_ms: float, length: int, error: Any = None
    ) -> None:
        """One request, as `events.request` would carry it."""
        if self.per_request:
            self.environment.events.request.fire(
                request_type=method,
                name=name,
                response_time=response_time_ms,
                response_length=length,
                exception=error,
                context={},
            )
            return
        pending = self._pending.get((name, method))
        if pending is None:
            pending = self._pending[(name, method)] = _Pending()
        pending.times_ms.append(response_time_ms)
        pending.length += length
        if error is not None:
            from locust.stats import StatsError

            key = StatsError.create_key(method, name, error)
            seen = pending.errors.get(key)
            now = time.time()
            if seen is None:
                pending.errors[key] = [error, 1, now, now]
            else:
                seen[1] += 1
                seen[3] = now

    def flush(self, now_s: float | None = None) -> int:
        """Add the requests collected so far to Locust's stats; returns how many."""
        stats = getattr(self.environment, "stats", None)
        if not self._pending or stats is None:
            return 0
        from locust import stats as locust_stats
        from locust.stats import StatsError

        pending, self._pending = self._pending, {}
        now = time.time() if now_s is None else now_s
        added = 0
        for (name, method), batch in pending.items():
            times = batch.times_ms
            buckets: dict[int, int] = {}
            bucket = locust_stats.bucket_response_time  # module-level: Locust lets users replace it
            for t in times:
                b = bucket(t)
                buckets[b] = buckets.get(b, 0) + 1
            failures = sum(seen[1] for seen in batch.errors.values())
            summary = (len(times), sum(times), min(times), max(times), buckets, batch.length)
            for entry in (stats.total, stats.entries[(name, method)]):
                _log(entry, now, summary, failures)
            for key, (error, count, first, last) in batch.errors.items():
                known = stats.errors.get(key)
                if known is None:
                    known = stats.errors[key] = StatsError(method, name, error)
                known.occurrences += count  # and what StatsError.occurred() stamps
                if known.first_seen is None:
                    known.first_seen = first
                known.last_seen = last
            added += len(times)
        return added


def _log(
    entry: Any,
    now: float,
    summary: tuple[int, float, float, float, dict[int, int], int],
    fails: int,
) -> None:
    """`StatsEntry.log` (and `log_error`'s counts) for many requests at once."""
    count, total_ms, low, high, buckets, length = summary
    t = int(now)
    last = entry.last_request_timestamp
    if entry.use_response_times_cache and last and t > int(last):
        entry._cache_response_times(t - 1)  # what log() does when a new second starts
    entry.num_requests += count
    entry.num_reqs_per_sec[t] += count
    entry.last_request_timestamp = now
    entry.total_response_time += total_ms
    entry.min_response_time = (
        low if entry.min_response_time is None else min(entry.min_response_time, low)
    )
    entry.max_response_time = max(entry.max_response_time, high)
    for b, n in buckets.items():
        entry.response_times[b] += n
    entry.total_content_length += length
    if fails:
        entry.num_failures += fails
        entry.num_fail_per_sec[t] += fails


def trim(
    stats: Any, now_s: float, keep_s: int = KEEP_S, history_points: int = HISTORY_POINTS
) -> int:
    """Drop per-second counts older than `keep_s` and chart points past `history_points`.

    `stats` is a `locust.stats.RequestStats`; returns how many entries were dropped.
    """
    cutoff = int(now_s) - keep_s
    dropped = 0
    for entry in (stats.total, *stats.entries.values()):
        for per_second in (entry.num_reqs_per_sec, entry.num_fail_per_sec):
            old = [t for t in per_second if t < cutoff]
            for t in old:
                del per_second[t]
            dropped += len(old)
    excess = len(stats.history) - history_points
    if excess > 0:
        del stats.history[:excess]
        dropped += excess
    return dropped
