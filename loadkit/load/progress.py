"""Live progress of a run, read from the files its Locust processes write.

The orchestrator never talks to Locust: it tails `load/*.jsonl` and
`latency/*.hlog` (complete lines only, from where it stopped last time) and
shows elapsed/total, offered and achieved rate, P99 of the last complete
interval (corrected), errors and dropped arrivals.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from hdrh.histogram import HdrHistogram

from loadkit.rundir.layout import LATENCY_DIR, LOAD_DIR

_BASE_RE = re.compile(r"#\[BaseTime:\s*([\d.]+)")


@dataclass(frozen=True)
class Progress:
    elapsed_s: float
    total_s: float
    offered_per_s: float  # last complete interval, all processes
    achieved_per_s: float  # completions (ok + errors) in the last complete interval
    p99_ms: float | None  # corrected P99 of the last complete interval
    requests: int  # completed so far
    errors: int
    dropped: int

    def line(self) -> str:
        p99 = f"{self.p99_ms:7.1f} ms" if self.p99_ms is not None else "      - ms"
        return (
            f"[{self.elapsed_s:5.0f}/{self.total_s:.0f} s] offered {self.offered_per_s:6.0f}/s"
            f"  achieved {self.achieved_per_s:6.0f}/s  p99 {p99}"
            f"  errors {self.errors}  dropped {self.dropped}"
        )


class _Tail:
    """Complete new lines of a growing file."""

    def __init__(self, path: Path):
        self.path = path
        self._offset = 0
        self._partial = ""

    def new_lines(self) -> list[str]:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                f.seek(self._offset)
                data = f.read()
                self._offset = f.tell()
        except OSError:
            return []
        text = self._partial + data
        lines = text.split("\n")
        self._partial = lines.pop()
        return lines


class LiveRunReader:
    """Incremental totals and per-interval aggregates of a run in progress."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self._load_tails: dict[Path, _Tail] = {}
        self._hlog_tails: dict[Path, _Tail] = {}
        self._hlog_base: dict[Path, float] = {}
        self._latest_by_file: dict[Path, int] = {}
        self.intervals: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.p99_by_interval: dict[int, HdrHistogram] = {}
        self.totals: dict[str, int] = defaultdict(int)

    def _discover(self) -> None:
        for path in sorted((self.run_dir / LOAD_DIR).glob("*.jsonl")):
            self._load_tails.setdefault(path, _Tail(path))
        for path in sorted((self.run_dir / LATENCY_DIR).glob("*.hlog")):
            self._hlog_tails.setdefault(path, _Tail(path))

    def poll(self) -> None:
        self._discover()
        for path, tail in self._load_tails.items():
            for line in tail.new_lines():
                try:
                    row: dict[str, Any] = json.loads(line)
                except ValueError:
                    continue
                t = int(row.get("t_ns") or 0)
                agg = self.intervals[t]
                for key in ("offered", "ok", "errors", "dropped"):
                    value = int(row.get(key) or 0)
                    agg[key] += value
                    self.totals[key] += value
                self._latest_by_file[path] = max(self._latest_by_file.get(path, 0), t)
        for path, tail in self._hlog_tails.items():
            for line in tail.new_lines():
                self._hlog_line(path, line)

    def _hlog_line(self, path: Path, line: str) -> None:
        if line.startswith("#"):
            if m := _BASE_RE.match(line):
                self._hlog_base[path] = float(m.group(1))
            return
        if not line.startswith("Tag=corrected:"):
            return
        try:
            _tag, rel, _length, _max, payload = line.split(",", 4)
            hist = HdrHistogram.decode(payload.encode("ascii"))
        except (ValueError, TypeError):
            return
        start_ns = round((self._hlog_base.get(path, 0.0) + float(rel)) * 1e9)
        # Interval starts are whole seconds; round away float noise.
        start_ns = round(start_ns / 1e9) * 1_000_000_000
        merged = self.p99_by_interval.get(start_ns)
        if merged is None:
            self.p99_by_interval[start_ns] = hist
        else:
            merged.add(hist)

    def last_complete_interval(self) -> int | None:
        """Latest interval every process has written (so its sums are whole)."""
        if not self._latest_by_file:
            return None
        return min(self._latest_by_file.values())

    def progress(self, elapsed_s: float, total_s: float) -> Progress:
        self.poll()
        last = self.last_complete_interval()
        agg = self.intervals.get(last, {}) if last is not None else {}
        hist = self.p99_by_interval.get(last) if last is not None else None
        p99 = hist.get_value_at_percentile(99.0) / 1000.0 if hist is not None else None
        return Progress(
            elapsed_s=elapsed_s,
            total_s=total_s,
            offered_per_s=float(agg.get("offered", 0.0)),
            achieved_per_s=float(agg.get("ok", 0.0) + agg.get("errors", 0.0)),
            p99_ms=p99,
            requests=self.totals["ok"] + self.totals["errors"],
            errors=self.totals["errors"],
            dropped=self.totals["dropped"],
        )


class ProgressPrinter:
    """In place on a terminal; a plain line every `plain_every_s` otherwise."""

    def __init__(self, stream: IO[str] | None = None, plain_every_s: float = 5.0):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.plain_every_s = plain_every_s
        self._last_plain = -1e9
        self._drawn = False

    def show(self, progress: Progress) -> None:
        if self.tty:
            self.stream.write("\r" + progress.line() + "\x1b[K")
            self._drawn = True
        elif progress.elapsed_s - self._last_plain >= self.plain_every_s:
            self.stream.write(progress.line() + "\n")
            self._last_plain = progress.elapsed_s
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
