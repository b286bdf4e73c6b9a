"""Keep Locust's own statistics bounded on long runs.

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

from typing import Any

TRIM_EVERY_S = 60.0
KEEP_S = 60  # seconds of per-second counts kept (Locust's current RPS reads the last 12)
HISTORY_POINTS = 720  # chart points kept: the last hour at Locust's 5 s


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
