"""Burst recovery: how high P99 went during a burst, and how long until it was back in band."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadkit.analysis.latency_counts import LatencyCounts, bucket_layout
from loadkit.analysis.model import BurstRecovery

RECOVERY_SPAN_S = 5.0  # P99 is judged over 5 s
RECOVERY_HOLD_S = 10.0  # and must stay in band this long
PRE_BURST_S = 30.0


# Cells (windows x buckets used) of the dense table `rolling_p99` sums a chunk of windows in.
ROLLING_CHUNK_CELLS = 1 << 20  # 8 MB per int64 table: small beside the whole run held in memory


def rolling_p99(
    histograms: Sequence[LatencyCounts | None], window_s: float, span_s: float = RECOVERY_SPAN_S
) -> np.ndarray:
    """P99 over the trailing `span_s` at each window, from merged histograms.

    Read as the library reads the merged histogram (highest equivalent value
    of the first bucket whose cumulative count reaches its target count), for
    a chunk of windows at once: the histograms go into a dense table of the
    buckets the run uses, summed over the span by a cumulative sum. Merging
    the span's histograms window by window took ~8 s of a 24 h analysis.
    """
    n = len(histograms)
    k = max(1, int(round(span_s / window_s)))
    out = np.full(n, np.nan)
    filled = [(i, h) for i, h in enumerate(histograms) if h is not None and h.index.size]
    if not filled:
        return out
    seen = np.zeros(bucket_layout().counts_len, dtype=bool)
    for _, h in filled:
        seen[h.index] = True
    used = np.flatnonzero(seen)
    column = np.cumsum(seen) - 1  # bucket index -> its column in the table
    highest = bucket_layout().highest[used]
    windows = np.array([i for i, _ in filled])
    step = max(1, ROLLING_CHUNK_CELLS // used.size)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        first = max(0, lo - k + 1)
        a, b = np.searchsorted(windows, [first, hi])
        part = filled[a:b]  # only this chunk's buckets are ever gathered into arrays
        # Row 0 stays zero so that every span is a difference of cumulative rows.
        table = np.zeros((hi - first + 1, used.size), dtype=np.int64)
        if part:
            rows = np.repeat(windows[a:b] - first + 1, [h.index.size for _, h in part])
            index = np.concatenate([h.index for _, h in part])
            # One entry per window and bucket: assignment, no accumulation needed.
            table[rows, column[index]] = np.concatenate([h.count for _, h in part])
        table = np.cumsum(table, axis=0, out=table)
        ends = np.arange(lo, hi)
        span = table[ends - first + 1] - table[np.maximum(ends - k + 1, 0) - first]
        cumulative = np.cumsum(span, axis=1, out=span)
        total = cumulative[:, -1]
        # The library's target count, in the same float arithmetic (percentiles_us).
        target = np.maximum((99.0 * total / 100 + 0.5).astype(np.int64), 1)
        pos = np.count_nonzero(cumulative < target[:, None], axis=1)
        some = total > 0
        out[lo:hi][some] = highest[pos[some]] / 1000.0
    return out


@dataclass(frozen=True)
class BurstPhase:
    start_ns: int
    end_ns: int | None
    rate: float | None


def burst_recovery(
    burst: BurstPhase,
    starts_ns: np.ndarray,
    window_s: float,
    p99_ms: np.ndarray,
    p99_5s_ms: np.ndarray,
    batch_mean: np.ndarray | None,
    queue_ms: np.ndarray | None,
) -> BurstRecovery:
    """Pre-burst band, then the first time after the burst that P99 (5 s) stays in it for 10 s."""
    n = len(starts_ns)
    window_ns = int(round(window_s * 1e9))
    i_start = int(np.searchsorted(starts_ns, burst.start_ns, side="right")) - 1
    i_start = max(0, i_start)
    end_ns = burst.end_ns if burst.end_ns is not None else int(starts_ns[-1]) + window_ns
    i_end = min(n, int(np.searchsorted(starts_ns, end_ns, side="left")))
    pre_lo = max(0, i_start - int(round(PRE_BURST_S / window_s)))
    pre = p99_5s_ms[pre_lo:i_start]
    pre = pre[~np.isnan(pre)]
    before = np.zeros(n, dtype=bool)
    before[pre_lo:i_start] = True
    during = np.zeros(n, dtype=bool)
    during[i_start:i_end] = True

    def mean_of(values: np.ndarray | None, mask: np.ndarray) -> float | None:
        if values is None:
            return None
        sel = values[mask]
        sel = sel[~np.isnan(sel)]
        return float(sel.mean()) if sel.size else None

    extras = {
        "batch_size_mean_before": mean_of(batch_mean, before),
        "batch_size_mean_during": mean_of(batch_mean, during),
        "queue_ms_before": mean_of(queue_ms, before),
        "queue_ms_during": mean_of(queue_ms, during),
    }
    if pre.size < 3:
        return BurstRecovery(
            burst.start_ns,
            burst.end_ns,
            burst.rate,
            None,
            None,
            False,
            None,
            None,
            None,
            None,
            None,
            detail="too little data before the burst for a band",
            **extras,
        )
    median = float(np.median(pre))
    # The upper decile, not median + k·MAD: before the burst P99 may already
    # have a sawtooth (5 s windows with and without a spike), whose MAD is
    # inflated by the two levels; "recovered" means back to what it was then.
    band = max(float(np.quantile(pre, 0.9)) * 1.1, 1.2 * median)
    hold = max(1, int(round(RECOVERY_HOLD_S / window_s)))
    within = np.nan_to_num(p99_5s_ms, nan=np.inf) <= band
    recovered_at: int | None = None
    for i in range(i_end, n - hold + 1):
        if within[i : i + hold].all():
            recovered_at = i
            break
    last = recovered_at if recovered_at is not None else n
    seg = p99_ms[i_start : max(last, i_start + 1)]
    peak = float(np.nanmax(seg)) if seg.size and not np.all(np.isnan(seg)) else None
    area = float(np.nansum(np.clip(seg - median, 0, None)) * window_s) if seg.size else None
    if recovered_at is None:
        recovery_s = rec_ns = None
        detail = (
            f"P99 (5 s) did not stay under {band:.1f} ms for {RECOVERY_HOLD_S:.0f} s "
            "before the run ended"
        )
    else:
        rec_ns = int(starts_ns[recovered_at])
        recovery_s = max(0.0, (rec_ns - end_ns) / 1e9)
        detail = (
            f"P99 (5 s) back under {band:.1f} ms and held {RECOVERY_HOLD_S:.0f} s, "
            f"{recovery_s:.0f} s after the burst ended"
        )
    return BurstRecovery(
        burst.start_ns,
        burst.end_ns,
        burst.rate,
        median,
        band,
        recovered_at is not None,
        recovery_s,
        rec_ns,
        peak,
        None if peak is None else peak - median,
        area,
        detail=detail,
        **extras,
    )
