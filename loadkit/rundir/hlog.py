"""HdrHistogram interval logs (`.hlog`) with tags, written and read tolerantly.

The histogram encoding is the `hdrhistogram` library's. The log *lines* are
written here because the library's `HistogramLogWriter` never emits `Tag=` and
its `output_start_time` is broken, and read here because its reader stops at
the first malformed line, while a run killed mid-write must still load.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Generic, TypeVar, overload

from hdrh.histogram import HdrHistogram

from loadkit.rundir.layout import HDR_HIGHEST_US, HDR_LOWEST_US, HDR_SIGNIFICANT_FIGURES

log = logging.getLogger(__name__)

_START_RE = re.compile(r"#\[StartTime:\s*([\d.]+)")
_BASE_RE = re.compile(r"#\[BaseTime:\s*([\d.]+)")


def new_histogram() -> HdrHistogram:
    """A latency histogram in microseconds, 1 µs .. 60 s, 3 significant figures."""
    return HdrHistogram(HDR_LOWEST_US, HDR_HIGHEST_US, HDR_SIGNIFICANT_FIGURES)


H = TypeVar("H")


@dataclass(frozen=True)
class IntervalHistogram(Generic[H]):
    """One interval's histogram from a log: which request, which kind, when.

    `histogram` is an `HdrHistogram` unless the reader was given another decoder.
    """

    start_ns: int
    end_ns: int
    tag: str
    kind: str  # "corrected" or "service" (or "" when the tag has no kind)
    name: str  # request name
    histogram: H
    source: str  # file stem (process name)


def split_tag(tag: str) -> tuple[str, str]:
    kind, sep, name = tag.partition(":")
    return (kind, name) if sep else ("", tag)


class IntervalLogWriter:
    """Writes tagged interval histograms; timestamps relative to a base time."""

    def __init__(self, path: str | os.PathLike[str], base_time_ns: int):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = open(self.path, "a", encoding="ascii")  # noqa: SIM115
        self._base_ns = base_time_ns
        base_s = base_time_ns / 1e9
        self._file.write("#[loadkit interval log v1: values in microseconds]\n")
        self._file.write(f"#[StartTime: {base_s:.3f} (seconds since epoch)]\n")
        self._file.write(f"#[BaseTime: {base_s:.3f} (seconds since epoch)]\n")
        self._file.write(
            '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n'
        )
        self._file.flush()

    def write(self, tag: str, start_ns: int, end_ns: int, histogram: HdrHistogram) -> None:
        payload = histogram.encode().decode("ascii")
        self.write_encoded(tag, start_ns, end_ns, histogram.get_max_value(), payload)

    def write_encoded(
        self, tag: str, start_ns: int, end_ns: int, max_us: int, payload: str
    ) -> None:
        """An interval whose histogram is already encoded (a worker's, received by the master)."""
        if self._file is None:
            raise ValueError(f"{self.path} is closed")
        if "," in tag or " " in tag:
            raise ValueError(f"histogram tag may not contain commas or spaces: {tag!r}")
        if "," in payload or "\n" in payload:
            raise ValueError("an encoded histogram may not contain commas or newlines")
        start_s = (start_ns - self._base_ns) / 1e9
        length_s = (end_ns - start_ns) / 1e9
        max_ms = max_us / 1000.0
        self._file.write(f"Tag={tag},{start_s:.3f},{length_s:.3f},{max_ms:.3f},{payload}\n")

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class IntervalLineReader:
    """The one reader of interval-log lines, fed one line at a time: the file's
    header state (StartTime, BaseTime) and each histogram line.

    `read_interval_log` reads whole files with it; the live reader feeds it the
    lines of files still being written. `kinds`: decode only these tags' kinds
    (others read as None, undecoded).
    """

    def __init__(
        self,
        source: str,
        decode: Callable[[bytes], Any] = HdrHistogram.decode,
        kinds: Container[str] | None = None,
    ):
        self.source = source
        self._decode = decode
        self._kinds = kinds
        self._start_s = 0.0
        self._base_s: float | None = None

    def feed(self, line: str) -> IntervalHistogram[Any] | None:
        """The interval on `line`; None for a header, a comment or a blank line.

        Raises on a torn or corrupted line (whatever `decode` or parsing raises).
        """
        line = line.rstrip("\n")
        if not line:
            return None
        if line.startswith("#"):
            if m := _START_RE.match(line):
                self._start_s = float(m.group(1))
            elif m := _BASE_RE.match(line):
                self._base_s = float(m.group(1))
            return None
        if line.startswith('"StartTimestamp"'):
            return None
        tag = ""
        if line.startswith("Tag="):
            tag, _, line = line[4:].partition(",")
        kind, name = split_tag(tag)
        if self._kinds is not None and kind not in self._kinds:
            return None
        ts, length, _max, payload = line.split(",", 3)
        rel_start = float(ts)
        interval = float(length)
        hist = self._decode(payload.encode("ascii"))
        base = self._start_s if self._base_s is None else self._base_s
        # Absolute timestamps (no BaseTime, values far above a year) are kept as such.
        if self._base_s is None and rel_start > 365 * 24 * 3600:
            base = 0.0
        abs_start = base + rel_start
        return IntervalHistogram(
            start_ns=round(abs_start * 1e9),
            end_ns=round((abs_start + interval) * 1e9),
            tag=tag,
            kind=kind,
            name=name,
            histogram=hist,
            source=self.source,
        )


@overload
def read_interval_log(
    path: str | os.PathLike[str], warnings: list[str] | None = None
) -> Iterator[IntervalHistogram[HdrHistogram]]: ...


@overload
def read_interval_log(
    path: str | os.PathLike[str], warnings: list[str] | None, decode: Callable[[bytes], H]
) -> Iterator[IntervalHistogram[H]]: ...


def read_interval_log(
    path: str | os.PathLike[str],
    warnings: list[str] | None = None,
    decode: Callable[[bytes], Any] = HdrHistogram.decode,
) -> Iterator[IntervalHistogram[Any]]:
    """Yield every readable interval; skip (and report) malformed lines.

    `decode` turns a line's encoded histogram into what `histogram` holds (an
    analysis that only needs bucket counts skips building `HdrHistogram`s);
    whatever it raises marks the line unreadable.
    """
    path = Path(path)
    reader = IntervalLineReader(path.stem, decode)
    with open(path, encoding="ascii", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            try:
                interval = reader.feed(line)
            except Exception as exc:  # a torn or corrupted line
                msg = f"{path.parent.name}/{path.name}:{lineno}: skipped unreadable histogram line ({type(exc).__name__})"
                log.warning(msg)
                if warnings is not None:
                    warnings.append(msg)
                continue
            if interval is not None:
                yield interval
