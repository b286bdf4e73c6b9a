"""LatencyCounts reads exactly as the hdrhistogram library does: percentiles, max, mean, merges."""

from __future__ import annotations

import base64
import struct
import zlib

import numpy as np
import pytest
from hdrh import codec
from hdrh.histogram import HdrHistogram

from loadkit.analysis.latency_counts import (
    LatencyCounts,
    bucket_layout,
    merge_counts,
)
from loadkit.rundir import new_histogram

PERCENTILES = (0.0, 1.0, 25.0, 50.0, 90.0, 95.0, 99.0, 99.9, 99.99, 99.999, 100.0)


def _random_histogram(rng: np.random.Generator) -> HdrHistogram:
    """Values from 0 µs to 60 s: lognormal bodies, long tails, repeated values, a few records."""
    hist = new_histogram()
    n = int(rng.choice([1, 2, 3, 10, 150, 2000]))
    median = float(rng.choice([3, 800, 8000, 250_000]))
    values = rng.lognormal(np.log(median), float(rng.uniform(0.1, 2.5)), n)
    values = np.clip(values.round(), 0, 60_000_000).astype(int)
    for v in values:
        hist.record_value(int(v), int(rng.integers(1, 4)))
    return hist


def test_bucket_tables_match_the_library_for_every_index():
    lib = new_histogram()
    layout = bucket_layout()
    assert layout.counts_len == lib.counts_len
    for i in range(0, lib.counts_len, 7):
        low = lib.get_value_from_index(i)
        assert layout.lowest[i] == low
        assert layout.highest[i] == lib.get_highest_equivalent_value(low)


@pytest.mark.parametrize("seed", range(40))
def test_percentiles_max_and_mean_equal_the_library_on_random_histograms(seed):
    rng = np.random.default_rng(seed)
    hist = _random_histogram(rng)
    counts = LatencyCounts.from_histogram(hist)

    assert counts.total == hist.get_total_count()
    assert counts.percentiles_us(PERCENTILES) == [
        hist.get_value_at_percentile(p) for p in PERCENTILES
    ]
    wanted = hist.get_percentile_to_value_dict(list(PERCENTILES))
    assert counts.percentiles_us(PERCENTILES) == [wanted[p] for p in PERCENTILES]
    assert counts.max_us() == hist.get_max_value()
    assert counts.mean_us() == hist.get_mean_value()


@pytest.mark.parametrize("seed", range(10))
def test_merging_adds_counts_exactly_as_the_library_add(seed):
    rng = np.random.default_rng(100 + seed)
    parts = [_random_histogram(rng) for _ in range(int(rng.integers(2, 7)))]
    total = new_histogram()
    for h in parts:
        total.add(h)
    merged = merge_counts([None, *(LatencyCounts.from_histogram(h) for h in parts), None])

    dense = np.zeros(total.counts_len, dtype=np.int64)
    dense[merged.index] = merged.count
    assert dense.tolist() == list(total.counts)
    assert np.all(np.diff(merged.index) > 0)
    assert merged.percentiles_us(PERCENTILES) == [
        total.get_value_at_percentile(p) for p in PERCENTILES
    ]
    assert merged.max_us() == total.get_max_value()
    # HdrHistograms and LatencyCounts mix; the HdrHistogram read API works on the result.
    mixed = merge_counts([parts[0], LatencyCounts.from_histogram(parts[1])])
    pair = new_histogram()
    pair.add(parts[0])
    pair.add(parts[1])
    assert mixed.get_value_at_percentile(99.0) == pair.get_value_at_percentile(99.0)
    assert mixed.get_total_count() == pair.get_total_count()


def test_a_histogram_of_another_layout_is_rebucketed_as_the_library_add_does():
    # e.g. an imported log at 2 significant figures and a 1 h range
    other = HdrHistogram(1, 3_600_000_000, 2)
    for v in (7, 1234, 55_555, 2_000_000):
        other.record_value(v, 3)
    expected = new_histogram()
    expected.add(other)
    counts = LatencyCounts.from_histogram(other)
    assert counts.total == expected.get_total_count() == 12
    assert counts.percentiles_us(PERCENTILES) == [
        expected.get_value_at_percentile(p) for p in PERCENTILES
    ]


def test_empty_histograms_read_as_the_library_reads_them():
    empty = LatencyCounts.from_histogram(new_histogram())
    lib = new_histogram()
    assert empty.total == 0
    assert empty.max_us() == lib.get_max_value() == 0
    assert empty.mean_us() == lib.get_mean_value() == 0.0
    assert empty.percentiles_us([50.0]) == [lib.get_value_at_percentile(50.0)]
    assert merge_counts([None, None]).total == 0
    # an empty histogram is still "a histogram" (not None) after merging
    assert merge_counts([empty]) is empty


def test_a_value_of_zero_and_the_top_of_the_range():
    hist = new_histogram()
    hist.record_value(0, 5)
    hist.record_value(60_000_000)
    counts = LatencyCounts.from_histogram(hist)
    assert counts.percentiles_us([0.0, 50.0, 100.0]) == [
        hist.get_value_at_percentile(p) for p in (0.0, 50.0, 100.0)
    ]
    assert counts.max_us() == hist.get_max_value()


def _same(a: LatencyCounts, b: LatencyCounts) -> bool:
    return (
        a.index.dtype == b.index.dtype
        and a.count.dtype == b.count.dtype
        and np.array_equal(a.index, b.index)
        and np.array_equal(a.count, b.count)
    )


def test_decoding_a_payload_equals_decoding_the_library_histogram():
    rng = np.random.default_rng(7)
    hists = [_random_histogram(rng) for _ in range(60)]
    big = new_histogram()
    big.record_value(1500, 2**40)  # a count that takes a long varint
    big.record_value(0, 3)
    hists += [new_histogram(), big]
    for hist in hists:
        encoded = hist.encode()
        expected = LatencyCounts.from_histogram(HdrHistogram.decode(encoded))
        assert _same(LatencyCounts.decode(encoded), expected)
    # Another layout goes through the library (re-bucketed as `from_histogram` does).
    other = HdrHistogram(1, 3_600_000_000, 2)
    other.record_value(55_555, 3)
    assert _same(LatencyCounts.decode(other.encode()), LatencyCounts.from_histogram(other))


def _zigzag_varint(value: int) -> bytes:
    u = (value << 1) ^ (value >> 63)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    return bytes(out) + bytes([u])


def test_a_payload_that_overruns_the_counters_raises_as_the_library_and_leaves_none_behind():
    hist = new_histogram()
    hist.record_value(10, 5)
    raw = base64.b64decode(hist.encode())
    header = bytearray(zlib.decompress(raw[8:])[: codec.payload_header_size])
    # 5 at bucket 0, then 20,000 empty buckets (past the last), then 1: written, then fails.
    body = _zigzag_varint(5) + _zigzag_varint(-20_000) + _zigzag_varint(1)
    struct.pack_into(">I", header, 4, len(body))
    compressed = zlib.compress(bytes(header) + body)
    bad = base64.b64encode(raw[:4] + struct.pack(">I", len(compressed)) + compressed)
    with pytest.raises(IndexError, match="overrun"):
        HdrHistogram.decode(bad)
    with pytest.raises(IndexError, match="overrun"):
        LatencyCounts.decode(bad)
    assert _same(LatencyCounts.decode(hist.encode()), LatencyCounts.from_histogram(hist))
