"""The trailing 5 s P99 of burst recovery reads as merging each span's histograms does."""

from __future__ import annotations

import numpy as np
import pytest

from loadkit.analysis import recovery
from loadkit.analysis.latency_counts import LatencyCounts, merge_counts


def _merged_p99(histograms: list[LatencyCounts | None], k: int) -> np.ndarray:
    out = np.full(len(histograms), np.nan)
    for i in range(len(histograms)):
        merged = merge_counts(histograms[max(0, i - k + 1) : i + 1])
        if merged.total:
            out[i] = merged.get_value_at_percentile(99.0) / 1000.0
    return out


@pytest.mark.parametrize("cells", [recovery.ROLLING_CHUNK_CELLS, 40, 1])
def test_rolling_p99_equals_merging_each_span_in_any_chunking(monkeypatch, cells):
    rng = np.random.default_rng(5)
    histograms: list[LatencyCounts | None] = []
    for _ in range(300):
        kind = rng.random()
        if kind < 0.1:
            histograms.append(None)
        elif kind < 0.15:
            histograms.append(LatencyCounts.empty())
        else:
            index = np.unique(rng.integers(0, 9000, int(rng.integers(1, 40)))).astype(np.int32)
            count = rng.integers(1, 1000, index.size).astype(np.int64)
            histograms.append(LatencyCounts(index, count))
    monkeypatch.setattr(recovery, "ROLLING_CHUNK_CELLS", cells)
    for window_s in (1.0, 5.0, 2.0):
        k = max(1, int(round(5.0 / window_s)))
        np.testing.assert_array_equal(
            recovery.rolling_p99(histograms, window_s), _merged_p99(histograms, k)
        )
    assert np.isnan(recovery.rolling_p99([None, LatencyCounts.empty()], 1.0)).all()
