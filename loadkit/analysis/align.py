"""Put every series of a run on one window grid: gauges averaged, counters turned into rates.

Counters are recomputed from raw cumulative values (docs/run-format.md): a
value lower than the one before is a reset (process or cgroup restarted), and
the new value counts as the increase since the reset. A gap longer than
`MAX_GAP_INTERVALS` sampling intervals leaves its windows empty (NaN) instead
of smearing one big difference over them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

NS = 1_000_000_000
MAX_GAP_INTERVALS = 3.0


@dataclass(frozen=True)
class WindowGrid:
    """Windows `[start_ns + i*window_ns, start_ns + (i+1)*window_ns)` for i in range(n)."""

    start_ns: int
    window_ns: int
    n: int

    @property
    def window_s(self) -> float:
        return self.window_ns / NS

    @property
    def starts_ns(self) -> np.ndarray:
        return self.start_ns + np.arange(self.n, dtype=np.int64) * self.window_ns

    @property
    def starts_s(self) -> np.ndarray:
        return np.arange(self.n, dtype=float) * self.window_s

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.n * self.window_ns

    def index(self, t_ns: np.ndarray | pd.Series) -> np.ndarray:
        """Window index of each timestamp; -1 outside the grid."""
        t = np.asarray(t_ns, dtype=np.int64)
        idx = (t - self.start_ns) // self.window_ns
        return np.where((idx >= 0) & (idx < self.n), idx, -1).astype(np.int64)

    def index_of(self, t_ns: int) -> int:
        return int(self.index(np.array([t_ns]))[0])

    def coarsen(self, factor: int) -> WindowGrid:
        return WindowGrid(self.start_ns, self.window_ns * factor, -(-self.n // factor))


def make_grid(start_ns: int, end_ns: int, window_s: float) -> WindowGrid:
    """A grid from `start_ns` covering `end_ns` (the last window may be partial)."""
    window_ns = int(round(window_s * NS))
    n = max(1, -(-(end_ns - start_ns) // window_ns))
    return WindowGrid(int(start_ns), window_ns, int(n))


def numeric(frame: pd.DataFrame, column: str) -> np.ndarray | None:
    """A column as float (None -> NaN); None when the column is absent or all missing."""
    if column not in frame.columns:
        return None
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    return None if np.all(np.isnan(values)) else values


def per_core_table(cells: Iterable[object]) -> tuple[np.ndarray, np.ndarray]:
    """Per-core lists (host.jsonl's `cpu_per_core_pct`) as a rows x cores table; and row lengths.

    A cell that is not a list counts as no cores; a value that is not a finite
    number (None, a string) is NaN; rows shorter than the widest (a core
    went offline) are NaN-padded. Rows of one length (the usual case) are
    converted by numpy at once: per row in Python, a 24 h host series at 5 Hz
    took a minute.
    """
    rows = [c if isinstance(c, list | tuple) else () for c in cells]
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    cores = int(lengths.max()) if len(rows) else 0
    if cores and np.all(lengths == cores):
        try:
            table = np.array(rows, dtype=float)
        except (TypeError, ValueError):  # a string among the numbers: value by value below
            pass
        else:
            table[~np.isfinite(table)] = np.nan
            return table, lengths
    table = np.full((len(rows), cores), np.nan)
    for i, row in enumerate(rows):
        for j, v in enumerate(row):
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                table[i, j] = float(v)
    return table, lengths


def reduce_on_grid(
    grid: WindowGrid,
    t_ns: np.ndarray,
    values: np.ndarray,
    how: str = "mean",
) -> np.ndarray:
    """Reduce samples into their windows ("mean", "max", "min", "sum"); NaN where none."""
    out = np.full(grid.n, np.nan)
    idx = grid.index(t_ns)
    keep = (idx >= 0) & ~np.isnan(values)
    if not keep.any():
        return out
    s = pd.Series(values[keep]).groupby(idx[keep])
    reduced = s.agg(how)
    out[reduced.index.to_numpy()] = reduced.to_numpy()
    return out


def counter_increments(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Increase of a cumulative counter at each sample (first is NaN); and the number of resets."""
    inc = np.full(len(values), np.nan)
    if len(values) < 2:
        return inc, 0
    diff = np.diff(values)
    reset = diff < 0
    # After a reset the counter restarted from zero: the new value is the increase.
    inc[1:] = np.where(reset, values[1:], diff)
    return inc, int(np.count_nonzero(reset & ~np.isnan(diff)))


def counter_rate_on_grid(
    grid: WindowGrid,
    t_ns: np.ndarray,
    values: np.ndarray,
    breaks: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """Per-second rate of a cumulative counter in each window; and the resets seen.

    Each sample-to-sample increase is spread over the windows its interval
    overlaps, so windows finer or coarser than the sampling interval both work.
    Intervals longer than MAX_GAP_INTERVALS times the median are gaps: not spread.
    `breaks` marks samples whose counter is not comparable with the one before
    (e.g. a different cgroup): their increase is unknown, not spread.
    """
    rate = np.full(grid.n, np.nan)
    ok = ~np.isnan(values)
    t = np.asarray(t_ns, dtype=np.int64)[ok]
    v = values[ok]
    if len(v) < 2:
        return rate, 0
    inc, resets = counter_increments(v)
    if breaks is not None:
        inc[np.asarray(breaks, dtype=bool)[ok]] = np.nan
    dt = np.diff(t)
    median_dt = float(np.median(dt)) if len(dt) else 0.0
    lo, hi, amounts = t[:-1], t[1:], inc[1:]
    use = ~np.isnan(amounts) & (hi > lo)
    if median_dt > 0:
        use &= hi - lo <= MAX_GAP_INTERVALS * median_dt
    lo, hi, amounts = lo[use], hi[use], amounts[use]
    first = np.maximum(0, (lo - grid.start_ns) // grid.window_ns)
    last = np.minimum(grid.n - 1, (hi - 1 - grid.start_ns) // grid.window_ns)
    spans = np.maximum(0, last - first + 1)
    # Every (interval, window) pair it overlaps, at once: a Python loop over the
    # samples took ~10 s for a 24 h host series at 5 Hz.
    k = np.repeat(np.arange(len(lo)), spans)
    w = first[k] + np.arange(len(k)) - np.repeat(np.cumsum(spans) - spans, spans)
    edge = grid.start_ns + w * grid.window_ns
    overlap = np.minimum(hi[k], edge + grid.window_ns) - np.maximum(lo[k], edge)
    pos = overlap > 0
    k, w, overlap = k[pos], w[pos], overlap[pos]
    share = overlap / (hi[k] - lo[k])
    amount = np.bincount(w, weights=amounts[k] * share, minlength=grid.n)
    covered = np.bincount(w, weights=overlap.astype(float), minlength=grid.n)
    has = covered > 0
    rate[has] = amount[has] / (covered[has] / NS)
    return rate, resets


def interval_sum_on_grid(grid: WindowGrid, t_ns: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Sum of per-interval values (rows describing [t_ns, t_ns+interval)) by window; NaN where none."""
    return reduce_on_grid(grid, t_ns, np.nan_to_num(values, nan=0.0), "sum")


def interval_rate_on_grid(
    grid: WindowGrid, t_ns: np.ndarray, values: np.ndarray, interval_ns: np.ndarray | None
) -> np.ndarray:
    """Per-second rate of per-interval counts, using the time the rows actually cover."""
    total = interval_sum_on_grid(grid, t_ns, values)
    if interval_ns is None:
        return total / grid.window_s
    covered = reduce_on_grid(grid, t_ns, np.nan_to_num(interval_ns, nan=0.0), "sum") / NS
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(covered > 0, total / np.minimum(covered, grid.window_s), np.nan)


def to_series(values: np.ndarray | None) -> tuple[float | None, ...] | None:
    """Per-window values as analysis.json holds them: floats, None where unknown."""
    if values is None:
        return None
    return tuple(None if not np.isfinite(v) else float(v) for v in np.asarray(values, dtype=float))
