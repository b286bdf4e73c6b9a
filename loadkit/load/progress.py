"""The live progress line: the numbers of `LiveRunReader.snapshot()`, as one line of text.

The same snapshot feeds the Prometheus endpoint (`metrics_endpoint.py`), so
the line and a scrape taken at the same moment agree: corrected
P50/P95/P99/P99.9 and offered/achieved rate over the last 10 complete
seconds, in-flight requests, the worst dispatch lag, errors and dropped
arrivals so far, and the scenario phase.
"""

from __future__ import annotations

import sys
from typing import IO

from loadkit.load.live import LiveRunReader, LiveSnapshot

__all__ = ["LiveRunReader", "ProgressPrinter", "progress_line"]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.3g}"


def progress_line(s: LiveSnapshot) -> str:
    """One line, e.g. `[ 12/60 s] burst-peak  offered 200/s  done 198/s  p50 4.1 ... ms`."""
    c = s.corrected_s
    phase = f" {s.phase}" if s.phase else ""
    return (
        f"[{s.elapsed_s:4.0f}/{s.total_s:.0f} s]{phase}  offered {s.offered_per_s:.0f}/s"
        f"  done {s.achieved_per_s:.0f}/s  p50 {_ms(c['p50'])} p95 {_ms(c['p95'])}"
        f" p99 {_ms(c['p99'])} p99.9 {_ms(c['p999'])} ms (last {s.window_s} s)"
        f"  in flight {s.in_flight}  lag {s.dispatch_lag_max_s * 1000:.0f} ms"
        f"  errors {s.errors_total}  dropped {s.dropped_total}"
    )


class ProgressPrinter:
    """In place on a terminal (`\\r`); a plain line every `plain_every_s` otherwise (CI logs)."""

    def __init__(self, stream: IO[str] | None = None, plain_every_s: float = 5.0):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.plain_every_s = plain_every_s
        self._last_plain = -1e9
        self._drawn = False

    def show(self, snapshot: LiveSnapshot, force: bool = False) -> None:
        line = progress_line(snapshot)
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K")
            self._drawn = True
        elif force or snapshot.elapsed_s - self._last_plain >= self.plain_every_s:
            self.stream.write(line + "\n")
            self._last_plain = snapshot.elapsed_s
        else:
            return
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
