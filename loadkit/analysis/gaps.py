"""Completion gaps: spans with requests in flight and nothing completing, finer than a window.

A stall of a few hundred milliseconds (a GC pause, page faults, a frozen
container, a SIGSTOP) hides inside a 1 s window, or splits over two: the
window's completion count barely moves. What does not hide is the span
itself: while requests are in flight, nothing completes. The recorder writes
those spans exactly (`completion_gaps` in `load/<process>.jsonl`, every gap of
50 ms or more); runs recorded before that field get them from the request
samples when the samples hold every request (below the reservoir's size),
else not at all.

With several load processes a server stall stops all of them: a span counts
only where every process active in that second had a gap (one process alone
stopping is the generator, not the server).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from loadkit.analysis.align import NS, WindowGrid

# Shortest gap that can be a stall: 5x the typical service time and twice the run's usual
# P99, relative to the run (it was at least 0.2 s: a 0.2 s stop's gaps, some a few ms
# shorter, were half dropped, and a 0.15 s one was never seen; issue 51).
MIN_GAP_SERVICE_MULTIPLE = 5.0
MIN_GAP_TAIL_MULTIPLE = 2.0
# The recorder writes gaps from this length up (docs/run-format.md).
RECORDED_GAP_NS = 50_000_000
# A container over its CPU quota is paused, every thread, until the next quota period
# (CFS's period: 100 ms by default, in the kernel and in Kubernetes), so a throttled
# server or load machine makes gaps of up to one period: those are the quota's, read by
# cgroup_throttling and load_machine_saturated from the counters (a load machine's
# quota read as a server stop in 0.09 s gaps, session 22). A stop is longer, with a
# margin for the scheduler's own delay.
QUOTA_PERIOD_GAP_S = 0.12


@dataclass
class CompletionGaps:
    """Gap spans (start_ns, end_ns), sorted by start, and where they come from."""

    spans_ns: np.ndarray  # shape (k, 2), int64
    source: str

    def longer_than(self, min_s: float) -> CompletionGaps:
        if not len(self.spans_ns):
            return self
        keep = (self.spans_ns[:, 1] - self.spans_ns[:, 0]) >= int(min_s * NS)
        return CompletionGaps(self.spans_ns[keep], self.source)

    def per_window(self, grid: WindowGrid) -> np.ndarray:
        """Seconds of gap inside each window (gaps straddling windows count in both)."""
        out = np.zeros(grid.n)
        starts = grid.starts_ns
        for a, b in self.spans_ns:
            lo = max(0, int((a - grid.start_ns) // grid.window_ns))
            hi = min(grid.n - 1, int((b - 1 - grid.start_ns) // grid.window_ns))
            for i in range(lo, hi + 1):
                w0 = int(starts[i])
                out[i] += max(0, min(b, w0 + grid.window_ns) - max(a, w0)) / NS
        return out

    def longest_per_window(self, grid: WindowGrid) -> np.ndarray:
        """The longest gap (whole length, seconds) per window that its requests complete in; 0
        where none.

        Latency is recorded by completion time: the requests a gap holds complete
        at its end, in the window it ends in. The window it began in, where it
        ends later, completed its requests before the stop and shows nothing of
        it; marked, it read as a stall without a spike (issue 51). The windows
        between have no completions. So: from the window after its start's
        through its end's, or its one window.
        """
        out = np.zeros(grid.n)
        for a, b in self.spans_ns:
            first = int((a - grid.start_ns) // grid.window_ns)
            last = int((b - 1 - grid.start_ns) // grid.window_ns)
            lo = max(0, min(first + 1, last))
            hi = min(grid.n - 1, last)
            if hi >= lo:
                out[lo : hi + 1] = np.maximum(out[lo : hi + 1], (b - a) / NS)
        return out


def min_gap_s(typical_service_ms: float | None, usual_p99_ms: float | None) -> float:
    """The shortest gap that counts as a stall for this run's service time and usual P99.

    Requests caught in a stop wait its length: a stop within the run's usual tail
    raises no spike, and a slow request alone makes a gap as long as it takes.
    Never within a CPU quota's period (QUOTA_PERIOD_GAP_S), whose pauses are the quota's.
    """
    service_s = (typical_service_ms or 0.0) / 1000.0
    tail_s = (usual_p99_ms or 0.0) / 1000.0
    return max(
        QUOTA_PERIOD_GAP_S,
        MIN_GAP_SERVICE_MULTIPLE * service_s,
        MIN_GAP_TAIL_MULTIPLE * tail_s,
    )


def _intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def gaps_from_load(frame: pd.DataFrame) -> CompletionGaps | None:
    """Gaps the recorder wrote (`completion_gaps`), intersected over active processes."""
    if frame.empty or "completion_gaps" not in frame.columns or "t_ns" not in frame.columns:
        return None
    procs: list[str] = (
        [str(p) for p in frame["process"]] if "process" in frame.columns else ["0"] * len(frame)
    )
    by_proc: dict[str, list[tuple[int, int]]] = {}
    active: dict[str, set[int]] = {}
    for i, (t, entry) in enumerate(zip(frame["t_ns"], frame["completion_gaps"], strict=True)):
        proc = procs[i]
        active.setdefault(proc, set()).add(int(t) // NS)
        spans = by_proc.setdefault(proc, [])
        if isinstance(entry, list):
            for span in entry:
                if isinstance(span, list | tuple) and len(span) == 2:
                    a, b = int(span[0]), int(span[1])
                    if b > a:
                        spans.append((a, b))
    lists = {p: sorted(set(s)) for p, s in by_proc.items()}
    if len(lists) == 1:
        merged = next(iter(lists.values()))
    else:
        # A candidate from each process; kept where every process active then also had one.
        merged = []
        for proc, spans in lists.items():
            for a, b in spans:
                piece = [(a, b)]
                for other, other_spans in lists.items():
                    if other == proc or not (active[other] & {a // NS, (b - 1) // NS}):
                        continue
                    piece = _intersect(piece, other_spans)
                merged.extend(piece)
        merged = sorted(set(merged))
    arr = np.array(merged, dtype=np.int64).reshape(-1, 2)
    return CompletionGaps(arr, "load counters (completion_gaps)")


def gaps_from_samples(
    samples: pd.DataFrame, completions_per_s: dict[int, float]
) -> CompletionGaps | None:
    """Gaps from the request samples, only when they hold every completed request.

    `completions_per_s`: completions per wall-clock second from the load counters.
    Between consecutive completions d_i < d_j the span counts from the later of
    d_i and the earliest send of a request still in flight at d_j.
    """
    needed = {"sent_ns", "done_ns"}
    if samples.empty or not needed <= set(samples.columns):
        return None
    sent = pd.to_numeric(samples["sent_ns"], errors="coerce").to_numpy(dtype=float)
    done = pd.to_numeric(samples["done_ns"], errors="coerce").to_numpy(dtype=float)
    ok = ~np.isnan(sent) & ~np.isnan(done)
    sent, done = sent[ok].astype(np.int64), done[ok].astype(np.int64)
    if done.size < 2:
        return None
    # The sample holds every request only where it has as many as completed.
    seconds, counts = np.unique(done // NS, return_counts=True)
    for s, c in zip(seconds, counts, strict=True):
        if c < completions_per_s.get(int(s), 0):
            return None
    order = np.argsort(done, kind="stable")
    sent, done = sent[order], done[order]
    # Earliest send among requests completing at or after each position.
    suffix_min_sent = np.minimum.accumulate(sent[::-1])[::-1]
    spans = []
    for i in range(len(done) - 1):
        start = max(int(done[i]), int(suffix_min_sent[i + 1]))
        end = int(done[i + 1])
        if end - start >= RECORDED_GAP_NS:
            spans.append((start, end))
    arr = np.array(spans, dtype=np.int64).reshape(-1, 2)
    return CompletionGaps(arr, "request samples (every request sampled)")
