"""Streaming writers for the run directory (docs/run-format.md).

Everything is appended as JSON Lines and flushed at least once a second, so a
run killed with SIGKILL keeps everything up to its last flush.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from loadkit import __version__
from loadkit.rundir.atomic import write_atomic
from loadkit.rundir.layout import (
    EVENTS_FILE,
    MANIFEST_FILE,
    SCHEMA_VERSION,
    TELEMETRY_DIR,
)
from loadkit.rundir.schema import check_manifest
from loadkit.rundir.segments import SEGMENT_S, parse_series_file, segment_name

FLUSH_INTERVAL_S = 0.5
# Bytes of a closed segment compressed per flush: ~2 ms of zlib, twice a second.
COMPRESS_STEP_BYTES = 128 * 1024

# Monotonic clock for flush scheduling only; aliased so tests can patch it.
timer = time.monotonic


def now_ns() -> int:
    """Wall-clock UTC in integer nanoseconds: the timestamp of every record."""
    return time.time_ns()


def _json_default(value: Any) -> Any:
    # numpy scalars and similar: anything with .item() or that is iterable.
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def dumps_row(row: Mapping[str, Any]) -> str:
    return json.dumps(row, separators=(",", ":"), default=_json_default, allow_nan=False)


class _SegmentCompressor:
    """Compresses one closed segment into `.gz`, a bounded piece per step.

    In steps, not at once: the writer runs inside the load generator's event
    loop or a sampler's tick, and an hour of request samples (~130 MB) takes
    seconds to compress, which would stall either.
    """

    def __init__(self, plain: Path):
        self.plain = plain
        self.target = plain.with_name(plain.name + ".gz")
        self.tmp = plain.with_name(plain.name + ".gz.tmp")
        self._src: IO[bytes] = open(plain, "rb")  # noqa: SIM115
        self._dst = gzip.open(self.tmp, "wb", compresslevel=6)  # noqa: SIM115

    def step(self, budget: int = COMPRESS_STEP_BYTES) -> bool:
        """Compress up to `budget` more bytes; True once the segment is whole and swapped in."""
        data = self._src.read(budget)
        if data:
            self._dst.write(data)
            return False
        self._dst.close()
        self._src.close()
        os.replace(self.tmp, self.target)
        self.plain.unlink()
        return True

    def finish(self) -> None:
        while not self.step(1 << 24):
            pass


class JsonlWriter:
    """Append-only JSON Lines file with time-based flushing, optionally rolled into segments.

    Rows are buffered by the OS file object and flushed when the last flush is
    older than `flush_interval_s` (checked on every write), on `flush()` and on
    `close()`. Callers that may go quiet for long should call `flush()` from
    their periodic tick (the load recorder and samplers do).

    With `segment_s`, every `segment_s` the file is closed as a numbered segment
    and compressed a piece per flush (loadkit/rundir/segments.py); the live
    rows always go to `path`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        flush_interval_s: float = FLUSH_INTERVAL_S,
        segment_s: float | None = None,
    ):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._flush_interval_s = flush_interval_s
        self._last_flush = timer()
        self._segment_s = segment_s
        self._segment_started = self._last_flush
        self._stem = self.path.name.removesuffix(".jsonl")
        self._pending: list[_SegmentCompressor] = []

    def write(self, row: Mapping[str, Any]) -> None:
        """Append one row (a schema row type, loadkit/rundir/schema.py)."""
        if self._file is None:
            raise ValueError(f"{self.path} is closed")
        self._file.write(dumps_row(row) + "\n")
        now = timer()
        if self._segment_s is not None and now - self._segment_started >= self._segment_s:
            self._roll(now)
        elif now - self._last_flush >= self._flush_interval_s:
            self.flush()

    def _next_seq(self) -> int:
        seqs = [
            parsed[1]
            for p in self.path.parent.iterdir()
            if (parsed := parse_series_file(p.name)) and parsed[0] == self._stem and parsed[1]
        ]
        return max(seqs, default=0) + 1

    def _roll(self, now: float) -> None:
        """Close the live file as the next segment, start a new one, queue the compression."""
        assert self._file is not None
        self._file.flush()
        self._file.close()
        closed = self.path.with_name(segment_name(self._stem, self._next_seq()))
        os.replace(self.path, closed)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._pending.append(_SegmentCompressor(closed))
        self._segment_started = now
        self._last_flush = now

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
            self._last_flush = timer()
        if self._pending and self._pending[0].step():
            self._pending.pop(0)

    def close(self) -> None:
        if self._file is not None:
            self._file.flush()
            self._file.close()
            self._file = None
        for pending in self._pending:
            pending.finish()
        self._pending.clear()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def append_event(run_dir: str | os.PathLike[str], kind: str, name: str, **attrs: Any) -> None:
    """Append one event line; safe from several processes (one O_APPEND write each)."""
    row: dict[str, Any] = {"t_ns": attrs.pop("t_ns", None) or now_ns(), "kind": kind, "name": name}
    row.update(attrs)
    line = (dumps_row(row) + "\n").encode("utf-8")
    path = Path(run_dir) / EVENTS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def write_manifest(run_dir: str | os.PathLike[str], manifest: dict[str, Any]) -> None:
    """Write manifest.json atomically (temp file + rename) so readers never see half of it.

    Held to `schema.Manifest` first: every required key, no key it does not know.
    """
    check_manifest(manifest)
    text = json.dumps(manifest, indent=2, default=_json_default, sort_keys=False) + "\n"
    write_atomic(Path(run_dir) / MANIFEST_FILE, text)


def read_manifest_raw(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    with open(Path(run_dir) / MANIFEST_FILE, encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def update_manifest(run_dir: str | os.PathLike[str], **changes: Any) -> dict[str, Any]:
    """Read-modify-write of top-level manifest keys (single writer: the orchestrator)."""
    manifest = read_manifest_raw(run_dir)
    manifest.update(changes)
    write_manifest(run_dir, manifest)
    return manifest


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A file/tag-safe version of a user-given name (scenario, request name)."""
    cleaned = _UNSAFE.sub("-", text).strip("-.")
    return cleaned or "unnamed"


def default_run_id(scenario: str, start_ns: int | None = None) -> str:
    t = (start_ns or now_ns()) / 1e9
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(t)) + "-" + safe_name(scenario)


class RunWriter:
    """Creates a run directory and owns its manifest; hands out series writers.

    Child processes (samplers, Locust workers) do not need a RunWriter: they
    open their own `JsonlWriter` on a path inside the run directory and call
    `append_event`.
    """

    def __init__(self, path: Path, manifest: dict[str, Any]):
        self.path = path
        self.manifest = manifest
        self._series: dict[str, JsonlWriter] = {}

    @classmethod
    def create(
        cls,
        *,
        out_dir: str | os.PathLike[str] = "reports",
        run_id: str | None = None,
        kind: str = "load",
        scenario: dict[str, Any] | None = None,
        target: dict[str, Any] | None = None,
        slo: dict[str, Any] | None = None,
        environment: dict[str, Any] | None = None,
        command_line: list[str] | None = None,
        exist_ok: bool = False,
    ) -> RunWriter:
        start_ns = now_ns()
        scenario_name = (scenario or {}).get("name") or kind
        run_id = run_id or default_run_id(scenario_name, start_ns)
        path = Path(out_dir) / run_id
        if path.exists() and any(path.iterdir()) and not exist_ok:
            from loadkit.errors import UsageError

            raise UsageError(
                f"run directory {path} already exists and is not empty",
                hint="pick another --run-id or --out directory",
            )
        path.mkdir(parents=True, exist_ok=True)
        manifest: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "run_id": run_id,
            "kind": kind,
            "status": "running",
            "start_ns": start_ns,
            "end_ns": None,
            "command_line": command_line if command_line is not None else list(sys.argv),
            "loadkit_version": __version__,
            "scenario": scenario,
            "target": target,
            "slo": slo,
            "environment": environment or {},
            "sources": [],
            "notes": [],
        }
        write_manifest(path, manifest)
        append_event(path, "phase", "run-start", t_ns=start_ns)
        return cls(path, manifest)

    def series(self, source: str) -> JsonlWriter:
        """The telemetry series `telemetry/<source>.jsonl` (opened once)."""
        if source not in self._series:
            self._series[source] = JsonlWriter(
                self.path / TELEMETRY_DIR / f"{source}.jsonl", segment_s=SEGMENT_S
            )
        return self._series[source]

    def event(self, kind: str, name: str, **attrs: Any) -> None:
        append_event(self.path, kind, name, **attrs)

    def update(self, **changes: Any) -> None:
        check_manifest({**self.manifest, **changes})  # a refused key leaves the manifest as it was
        self.manifest.update(changes)
        write_manifest(self.path, self.manifest)

    def add_note(self, note: str) -> None:
        self.manifest.setdefault("notes", []).append(note)
        write_manifest(self.path, self.manifest)

    def add_source(self, source: dict[str, Any]) -> None:
        self.manifest.setdefault("sources", []).append(source)
        write_manifest(self.path, self.manifest)

    def flush(self) -> None:
        for writer in self._series.values():
            writer.flush()

    def finalize(self, status: str = "complete") -> None:
        """Close series and mark the run complete or aborted; safe to call twice."""
        if status not in ("complete", "aborted"):
            raise ValueError(f"unknown final status {status!r}")
        for writer in self._series.values():
            writer.close()
        end_ns = now_ns()
        # Other processes may have changed nothing in the manifest, but re-read
        # in case a child added sources or notes through update_manifest.
        try:
            on_disk = read_manifest_raw(self.path)
            for key in ("sources", "notes", "environment"):
                if on_disk.get(key) and on_disk.get(key) != self.manifest.get(key):
                    self.manifest[key] = on_disk[key]
        except (OSError, ValueError):
            pass
        if self.manifest.get("status") != "running":
            return
        append_event(self.path, "phase", "run-end", t_ns=end_ns, status=status)
        self.manifest.update(status=status, end_ns=end_ns)
        write_manifest(self.path, self.manifest)
