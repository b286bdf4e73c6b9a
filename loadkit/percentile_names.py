"""The latency percentiles loadkit knows, and how each is spelled: the one owner.

Keys in files, analysis.json and code are `p50` ... `p999`; users may write
`p99.9` wherever a percentile is read from them (`--slo`, `--abort-on`,
capacity's `--slo`); people read `P99.9` in reports and `p99.9` in one-line
summaries. Recording and analysis both import this module, so it depends on
nothing.
"""

from __future__ import annotations

# key -> percentile (0-100), in ascending order
PERCENTILES: dict[str, float] = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}

# The percentiles kept for every 1 s window (live, per-window analysis, Prometheus endpoint).
WINDOW: tuple[str, ...] = ("p50", "p95", "p99", "p999")

# What a user may write, as one regular-expression alternative (longest first).
PATTERN = r"p99\.9|p999|p99|p95|p90|p50"

# The spellings a user may write, for error messages.
ACCEPTED = "p50, p90, p95, p99, p99.9"


def key(text: str) -> str | None:
    """`P99.9`, `p999` -> `p999`; None when `text` is no percentile loadkit knows."""
    name = text.strip().lower()
    name = "p999" if name == "p99.9" else name
    return name if name in PERCENTILES else None


def percentile(name: str) -> float:
    """`p999` (or `p99.9`) -> 99.9."""
    found = key(name)
    if found is None:
        raise KeyError(name)
    return PERCENTILES[found]


def quantile(name: str) -> float:
    """`p999` -> 0.999 (Prometheus' `quantile` label, `histogram_quantile`)."""
    return round(percentile(name) / 100.0, 6)


def spoken(name: str) -> str:
    """`p999` -> `p99.9`, for one-line summaries."""
    return f"p{percentile(name):g}"


def label(name: str) -> str:
    """`p999` -> `P99.9`, for report headings; other names (`errors`) unchanged."""
    return spoken(name).upper() if key(name) else name
