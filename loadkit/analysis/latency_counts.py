"""Latency histograms as their non-zero buckets: small to keep, fast to merge and read.

An `HdrHistogram` over loadkit's range (1 µs .. 60 s, 3 significant figures)
is 17,408 counters (139 KB) however few requests it holds, and the library
reads a percentile by walking every counter in Python. A second at 2,000
requests/s fills ~130 buckets, so `LatencyCounts` keeps only those: bucket
indices and counts as numpy arrays. Merging adds counts bucket by bucket
(never averages percentiles), and percentiles, maximum and mean follow the
library's own definitions exactly (highest equivalent value of the first
bucket whose cumulative count reaches the target count), from bucket value
tables built once by the library itself.
"""

from __future__ import annotations

import base64
import ctypes
import threading
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TypeAlias

import numpy as np
from hdrh import codec
from hdrh.histogram import HdrHistogram
from pyhdrh import decode as decode_varints  # hdrh's own C decoder of the counts

from loadkit.rundir import new_histogram
from loadkit.rundir.layout import HDR_HIGHEST_US, HDR_LOWEST_US, HDR_SIGNIFICANT_FIGURES


@dataclass(frozen=True)
class _BucketLayout:
    """loadkit's histogram layout and each bucket's values, as the library computes them."""

    counts_len: int
    shape: tuple[int, int, int, int]  # what HdrHistogram.add compares to add counts directly
    lowest: np.ndarray  # get_value_from_index(i)
    highest: np.ndarray  # get_highest_equivalent_value(lowest[i])
    median: np.ndarray  # _hdr_median_equiv_value(highest[i]) (what get_mean_value weighs)


def _shape(hist: HdrHistogram) -> tuple[int, int, int, int]:
    return (hist.bucket_count, hist.sub_bucket_count, hist.unit_magnitude, hist.word_size)


@cache
def bucket_layout() -> _BucketLayout:
    proto = new_histogram()
    n = proto.counts_len
    lowest = [proto.get_value_from_index(i) for i in range(n)]
    highest = [proto.get_highest_equivalent_value(v) for v in lowest]
    median = [proto._hdr_median_equiv_value(v) for v in highest]
    return _BucketLayout(
        counts_len=n,
        shape=_shape(proto),
        lowest=np.array(lowest, dtype=np.int64),
        highest=np.array(highest, dtype=np.int64),
        median=np.array(median, dtype=np.int64),
    )


@dataclass(frozen=True, eq=False)
class LatencyCounts:
    """A latency histogram (µs) as its non-zero buckets; reads like an `HdrHistogram`.

    `index`: ascending bucket indices in loadkit's layout (`new_histogram()`);
    `count`: requests in each. Instances are never modified.
    """

    index: np.ndarray  # int32, ascending, unique
    count: np.ndarray  # int64, > 0

    @classmethod
    def empty(cls) -> LatencyCounts:
        return cls(np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64))

    @classmethod
    def from_histogram(cls, hist: HdrHistogram) -> LatencyCounts:
        """The non-zero buckets of `hist`, re-bucketed into loadkit's layout if it differs.

        A different layout goes through `HdrHistogram.add`, as merging into a
        `new_histogram()` always did (same values, same out-of-range errors).
        """
        layout = bucket_layout()
        if _shape(hist) != layout.shape or hist.counts_len != layout.counts_len:
            converted = new_histogram()
            converted.add(hist)
            hist = converted
        counts = np.ctypeslib.as_array(hist.counts)
        nonzero = np.flatnonzero(counts)
        return cls(nonzero.astype(np.int32), counts[nonzero].astype(np.int64))

    @classmethod
    def decode(cls, encoded: bytes) -> LatencyCounts:
        """`from_histogram(HdrHistogram.decode(encoded))`, without building the histogram.

        The library allocates and walks a fresh 17,408-counter histogram per
        payload: reading a day's 172,800 interval histograms took most of the
        analysis. Here the library's own C decoder fills one reused counter
        array and only its non-zero buckets are kept. Anything but a plain
        payload in loadkit's layout (another layout, a bad cookie or length)
        goes through the library, with its values and its errors.
        """
        raw = base64.b64decode(encoded)
        if len(raw) > codec.ext_header_size:
            outer = codec.ExternalHeader.from_buffer_copy(raw)
            if (
                codec.get_cookie_base(outer.cookie) == codec.V2_COMPRESSION_COOKIE_BASE
                and outer.length == len(raw) - codec.ext_header_size
            ):
                data = zlib.decompress(raw[codec.ext_header_size :])
                if len(data) >= codec.payload_header_size:
                    counts = _decode_in_layout(data)
                    if counts is not None:
                        return counts
        return cls.from_histogram(HdrHistogram.decode(encoded))

    @property
    def total(self) -> int:
        return int(self.count.sum())

    def percentiles_us(self, percentiles: Sequence[float]) -> list[int]:
        """`HdrHistogram.get_value_at_percentile` for each percentile (0 when empty)."""
        layout = bucket_layout()
        cumulative = np.cumsum(self.count)
        total = int(cumulative[-1]) if cumulative.size else 0
        out: list[int] = []
        for p in percentiles:
            # The library's target count, in the same float arithmetic.
            target = max(int((min(p, 100.0) * total / 100) + 0.5), 1)
            pos = int(np.searchsorted(cumulative, target, side="left"))
            if pos >= cumulative.size:
                out.append(0)
                continue
            table = layout.highest if p else layout.lowest
            out.append(int(table[self.index[pos]]))
        return out

    def max_us(self) -> int:
        """`HdrHistogram.get_max_value`: highest equivalent value of the top bucket (0 if empty)."""
        if not self.index.size:
            return 0
        return int(bucket_layout().highest[self.index[-1]])

    def mean_us(self) -> float:
        """`HdrHistogram.get_mean_value`: buckets weighed at their median equivalent value."""
        total = self.total
        if not total:
            return 0.0
        weighted = int(np.dot(self.count, bucket_layout().median[self.index]))
        return float(weighted) / total

    # The `HdrHistogram` read API, for code written against the library.
    def get_total_count(self) -> int:
        return self.total

    def get_value_at_percentile(self, percentile: float) -> int:
        return self.percentiles_us([percentile])[0]

    def get_max_value(self) -> int:
        return self.max_us()

    def get_mean_value(self) -> float:
        return self.mean_us()


class _Counters(threading.local):
    """One zeroed counter array per thread that `LatencyCounts.decode` fills and clears."""

    def __init__(self) -> None:
        self.buffer = (ctypes.c_int64 * bucket_layout().counts_len)()
        self.array = np.ctypeslib.as_array(self.buffer)


_counters = _Counters()


def _decode_in_layout(data: bytes) -> LatencyCounts | None:
    """The non-zero buckets of a decompressed payload in loadkit's layout (None: another layout)."""
    header = codec.PayloadHeader.from_buffer_copy(data)
    if (
        codec.get_cookie_base(header.cookie) != codec.V2_ENCODING_COOKIE_BASE
        or codec.get_word_size_in_bytes_from_cookie(header.cookie)
        != codec.V2_MAX_WORD_SIZE_IN_BYTES
        or header.lowest_trackable_value != HDR_LOWEST_US
        or header.highest_trackable_value != HDR_HIGHEST_US
        or header.significant_figures != HDR_SIGNIFICANT_FIGURES
    ):
        return None
    array = _counters.array
    try:
        found = decode_varints(
            data, codec.payload_header_size, ctypes.addressof(_counters.buffer), array.size, 8
        )
    except Exception:
        array[:] = 0  # a corrupt payload may have written some counts before failing
        raise
    if not found["total"]:
        return LatencyCounts.empty()
    lo, hi = found["min_nonzero_index"], found["max_nonzero_index"] + 1
    nonzero = np.flatnonzero(array[lo:hi]) + lo
    out = LatencyCounts(nonzero.astype(np.int32), array[nonzero].astype(np.int64))
    array[nonzero] = 0
    return out


Histogram: TypeAlias = HdrHistogram | LatencyCounts


def as_counts(hist: Histogram) -> LatencyCounts:
    return hist if isinstance(hist, LatencyCounts) else LatencyCounts.from_histogram(hist)


def merge_counts(histograms: Iterable[Histogram | None]) -> LatencyCounts:
    """One histogram holding every count of `histograms` (None entries are skipped)."""
    parts = [as_counts(h) for h in histograms if h is not None]
    filled = [p for p in parts if p.index.size]
    if len(filled) <= 1:
        return filled[0] if filled else parts[0] if parts else LatencyCounts.empty()
    index = np.concatenate([p.index for p in filled])
    count = np.concatenate([p.count for p in filled])
    order = np.argsort(index, kind="stable")
    index, count = index[order], count[order]
    starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
    return LatencyCounts(index[starts], np.add.reduceat(count, starts))
