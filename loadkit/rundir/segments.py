"""Series rolled into segments: which files make up one series, in order, and how to open them.

A long series (`requests/<process>`, `telemetry/<source>`) is written to its
plain file `<stem>.jsonl`; every `SEGMENT_S` the writer closes it as
`<stem>.seg<NNNN>.jsonl` and compresses it, a bounded piece per flush, into
`<stem>.seg<NNNN>.jsonl.gz` (a temporary `.gz.tmp`, renamed when whole, then
the plain segment removed). A run killed at any point leaves every row
readable once: a closed segment as `.gz` or, until its compression finished,
as plain `.jsonl`; the live rows in `<stem>.jsonl`.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import IO

SEGMENT_S = 3600.0  # a segment per hour of wall-clock time
SEGMENT_SUFFIX = ".jsonl"
_SEGMENT_RE = re.compile(r"^(?P<stem>.+)\.seg(?P<seq>\d{4,})\.jsonl(?P<gz>\.gz)?$")


def segment_name(stem: str, seq: int, compressed: bool = False) -> str:
    return f"{stem}.seg{seq:04d}.jsonl" + (".gz" if compressed else "")


def parse_series_file(name: str) -> tuple[str, int | None] | None:
    """(stem, segment number or None for the live file) of a series file name, else None."""
    if m := _SEGMENT_RE.match(name):
        return m.group("stem"), int(m.group("seq"))
    if name.endswith(SEGMENT_SUFFIX):
        return name[: -len(SEGMENT_SUFFIX)], None
    return None


def series_files(folder: Path) -> dict[str, list[Path]]:
    """Each series' files in time order: closed segments by number, then the live file.

    A segment present both compressed and plain (a run killed between the
    rename and the removal) is read once, compressed.
    """
    if not folder.is_dir():
        return {}
    found: dict[str, dict[int | None, Path]] = {}
    for path in folder.iterdir():
        parsed = parse_series_file(path.name)
        if parsed is None or not path.is_file():
            continue
        stem, seq = parsed
        files = found.setdefault(stem, {})
        if seq in files and files[seq].name.endswith(".gz"):
            continue
        files[seq] = path
    return {
        stem: [files[k] for k in sorted(k for k in files if k is not None)]
        + ([files[None]] if None in files else [])
        for stem, files in sorted(found.items())
    }


def open_series_text(path: Path) -> IO[str]:
    """A series file for reading as text, decompressing a closed segment."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
