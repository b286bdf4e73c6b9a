"""Loads any run directory (complete, aborted, killed, imported) into pandas frames.

Everything missing is explained in one line in `Run.warnings`; nothing here
raises for a partial run, only for a directory that is not a run at all or has
a schema version this loadkit does not know.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from functools import cached_property
from itertools import chain, islice
from pathlib import Path
from typing import Any, TypeVar, overload

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pa_json
from hdrh.histogram import HdrHistogram

from loadkit.errors import RunFormatError
from loadkit.rundir.hlog import IntervalHistogram, read_interval_log
from loadkit.rundir.layout import (
    ANALYSIS_FILE,
    EVENTS_FILE,
    KNOWN_SCHEMA_VERSIONS,
    LATENCY_DIR,
    LOAD_DIR,
    MANIFEST_FILE,
    REQUESTS_DIR,
    TELEMETRY_DIR,
)
from loadkit.rundir.schema import Manifest
from loadkit.rundir.segments import open_series_text, series_files

H = TypeVar("H")

log = logging.getLogger(__name__)


# Lines parsed per chunk: one `json.loads` call for the whole chunk when every line parses.
CHUNK_LINES = 8192
COMPACT_ROWS = 65_536
_MISSING = float("nan")  # what `pd.DataFrame(rows)` puts where a row lacks a key


def _parse_lines(
    path: Path, lines: list[str], first_lineno: int, warnings: list[str]
) -> list[dict[str, Any]]:
    """The rows of one chunk of lines: a bad line is skipped with a warning naming it."""
    try:
        rows = json.loads("[" + ",".join(lines) + "]")
    except ValueError:
        rows = None
    # One value per line and every value an object: the chunk is clean.
    if (
        isinstance(rows, list)
        and len(rows) == len(lines)
        and all(type(row) is dict for row in rows)
    ):
        return rows
    rows = []
    for lineno, line in enumerate(lines, start=first_lineno):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            torn = not line.endswith("\n")
            why = "torn last line (run was killed mid-write)" if torn else "corrupted line"
            msg = f"{_shown(path)}:{lineno}: skipped {why}"
            log.warning(msg)
            warnings.append(msg)
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            warnings.append(f"{_shown(path)}:{lineno}: skipped a line that is not a JSON object")
    return rows


def _shown(path: Path) -> str:
    """`load/local.jsonl`: the file a warning names, with its folder (several share a name)."""
    return f"{path.parent.name}/{path.name}"


def iter_jsonl_chunks(path: Path, warnings: list[str]) -> Iterator[list[dict[str, Any]]]:
    """Rows of a JSON Lines file (or compressed segment), a chunk at a time.

    Bad lines are skipped with a warning; a compressed segment that is cut short
    or corrupted yields what it could decompress, with a warning.
    """
    with open_series_text(path) as f:
        lineno = 1
        while True:
            try:
                lines = list(islice(f, CHUNK_LINES))
            except (EOFError, OSError, zlib.error) as exc:
                # gzip reads ahead: what it had decompressed before the damage is salvaged
                # from the raw bytes, whole lines only.
                kept = salvage_gzip_lines(path)[lineno - 1 :]
                if kept:
                    yield _parse_lines(path, kept, lineno, warnings)
                msg = (
                    f"{_shown(path)}: compressed segment unreadable after line "
                    f"{lineno - 1 + len(kept)} ({exc}); the rest of it is skipped"
                )
                log.warning(msg)
                warnings.append(msg)
                return
            if not lines:
                return
            yield _parse_lines(path, lines, lineno, warnings)
            lineno += len(lines)


def salvage_gzip_lines(path: Path) -> list[str]:
    """The whole lines a cut-short or corrupted gzip file decompresses to, up to the damage."""
    decompressor = zlib.decompressobj(wbits=31)  # gzip header
    out = bytearray()
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 16):
                out += decompressor.decompress(block)
    except (OSError, zlib.error):
        pass
    text = out.decode("utf-8", errors="replace")
    return text.splitlines(keepends=True)[:-1] if not text.endswith("\n") else text.splitlines(True)


def read_jsonl(path: Path, warnings: list[str]) -> list[dict[str, Any]]:
    """Rows of a JSON Lines file; a line that does not parse is skipped with a warning."""
    return [row for chunk in iter_jsonl_chunks(path, warnings) for row in chunk]


class _Columns:
    """Rows gathered as columns, chunk by chunk: `pd.DataFrame(rows)` without keeping the rows.

    Holding every row as a dict costs ~0.5 KB a row (a 2,000 req/s hour of
    request samples is 738,000 rows); column lists hold only the values.
    Columns come in order of first appearance and a missing key is NaN, as
    `pd.DataFrame(rows)` does, so the frame is the same. `keep`: gather only
    these columns (the frame is then the full frame's columns of that name).
    """

    def __init__(self, keep: frozenset[str] | None = None) -> None:
        self.columns: dict[str, list[Any]] = {}  # values not yet packed, per column
        # Numeric columns are packed into numpy arrays every COMPACT_ROWS rows: a
        # Python float is 32 bytes in a list, 8 in an array (a 24 h GPU series at
        # 10 Hz is 864,000 rows x 27 columns: ~0.8 GB as lists).
        self.packed: dict[str, list[np.ndarray]] = {}
        self.objects: set[str] = set()  # columns seen holding a non-number: never packed
        self.rows = 0
        self.pending = 0
        self.keep = keep

    def add(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        columns = self.columns
        layouts = dict.fromkeys(map(tuple, rows))  # distinct key orders, by first appearance
        keys = dict.fromkeys(chain.from_iterable(layouts))  # keys, by first appearance
        for key in keys:
            if key not in columns and (self.keep is None or key in self.keep):
                columns[key] = [_MISSING] * self.rows
        if len(layouts) == 1 and self.keep is None:
            # The usual case: every row has the same keys in the same order.
            for key, values in zip(keys, zip(*map(dict.values, rows), strict=True), strict=True):
                columns[key].extend(values)
            for key, column in columns.items():
                if key not in keys:
                    column.extend([_MISSING] * len(rows))
        else:
            for key, column in columns.items():
                column.extend([row.get(key, _MISSING) for row in rows])
        self.rows += len(rows)
        self.pending += len(rows)
        if self.pending >= COMPACT_ROWS:
            self._pack()

    def _pack(self) -> None:
        for key, values in self.columns.items():
            if key in self.objects or not values:
                continue
            array = _numeric_array(values)
            if array is None:
                self.objects.add(key)
                parts = self.packed.pop(key, [])
                if parts:  # back to values, as they would have been
                    self.columns[key] = [v for p in parts for v in p.tolist()] + values
                continue
            self.packed.setdefault(key, []).append(array)
            self.columns[key] = []
        self.pending = 0

    def frame(self) -> pd.DataFrame:
        if not self.columns:
            return pd.DataFrame([{}] * self.rows)
        if self.packed:
            self._pack()
        data: dict[str, Any] = {}
        for key, values in self.columns.items():
            parts = self.packed.get(key)
            data[key] = np.concatenate(parts) if parts and not values else values
        return pd.DataFrame(data)


def _numeric_array(values: list[Any]) -> np.ndarray | None:
    """`values` as the numpy column pandas would infer from them, when they are all numbers.

    ints -> int64; ints, floats and None -> float64 (None as NaN, as pandas does);
    anything else (bools, strings, lists, dicts, ints beyond int64) -> None.
    """
    types = set(map(type, values))
    try:
        if types <= {int}:
            return np.array(values, dtype=np.int64)
        if types <= {int, float, type(None)}:
            return np.array(values, dtype=np.float64)
    except OverflowError:
        return None
    return None


def _read_file_arrow(path: Path, keep: frozenset[str] | None) -> pd.DataFrame | None:
    """A whole clean series file (plain or gzip) by pyarrow's JSON reader; None to read it row by row.

    pyarrow parses in C++, 3-5x faster than `json.loads` (a 24 h run holds
    3 M request-sample rows and 1.3 M telemetry rows). Any file it cannot take
    whole (a torn or corrupted line, a segment cut short, a column whose type
    changes) is None, so the tolerant row-by-row reader reads it and says what
    it skipped. Objects come back as dicts of the keys each row had; lists as lists.
    """
    try:
        table = pa_json.read_json(path)
    except (pa.ArrowException, OSError, EOFError, zlib.error, ValueError):
        return None
    if keep is not None:
        table = table.select([name for name in table.column_names if name in keep])
    for field in table.schema:
        kind = field.type
        if not (
            pa.types.is_integer(kind)
            or pa.types.is_floating(kind)
            or pa.types.is_boolean(kind)
            or pa.types.is_string(kind)
            or pa.types.is_null(kind)
            or pa.types.is_struct(kind)
            or (pa.types.is_list(kind) and pa.types.is_floating(kind.value_type))
            or (pa.types.is_list(kind) and pa.types.is_integer(kind.value_type))
        ):
            return None  # nested lists, lists of objects: as json.loads gives them
    frame = table.to_pandas()
    for field in table.schema:
        if pa.types.is_struct(field.type):
            # pyarrow gives every row every key seen in the file (None where absent).
            frame[field.name] = [
                {k: v for k, v in d.items() if v is not None} if isinstance(d, dict) else d
                for d in frame[field.name]
            ]
        elif pa.types.is_list(field.type):
            frame[field.name] = [
                c.tolist() if isinstance(c, np.ndarray) else c for c in frame[field.name]
            ]
        elif pa.types.is_null(field.type):
            frame[field.name] = np.full(len(frame), np.nan)
    return frame


def _frame(df: pd.DataFrame) -> pd.DataFrame:
    if "t_ns" in df.columns:
        df["t_ns"] = pd.to_numeric(df["t_ns"], errors="coerce")
        df = df.dropna(subset=["t_ns"])
        df["t_ns"] = df["t_ns"].astype("int64")
        df = df.sort_values("t_ns", kind="stable").reset_index(drop=True)
    return df


class Run:
    """A loaded run directory. Frames are read on first use and cached."""

    def __init__(self, path: Path, manifest: dict[str, Any]):
        self.path = path
        self.manifest = manifest
        self.warnings: list[str] = []
        status = manifest.get("status")
        if status == "running":
            self.warnings.append(
                "run did not finish (status 'running'): it was killed or is still in "
                "progress; loading what was recorded"
            )
        elif status == "aborted":
            self.warnings.append("run was aborted; loading what was recorded before the stop")

    # --- identity -------------------------------------------------------
    @property
    def info(self) -> Manifest:
        """The manifest, typed (read afresh: `manifest` is the dict it was loaded as)."""
        return Manifest.from_dict(self.manifest)

    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id") or self.path.name)

    @property
    def status(self) -> str:
        return str(self.manifest.get("status", "unknown"))

    @property
    def start_ns(self) -> int | None:
        return self.manifest.get("start_ns")

    @property
    def end_ns(self) -> int | None:
        """End of the run; for an unfinished run, the last timestamp seen in any series."""
        end = self.manifest.get("end_ns")
        if end:
            return int(end)
        last = [int(df["t_ns"].max()) for df in self._all_frames() if len(df)]
        return max(last) if last else None

    def _all_frames(self) -> list[pd.DataFrame]:
        frames = [self.events, self.load_intervals]
        frames += [self.series(name) for name in self.series_names()]
        return [f for f in frames if "t_ns" in f.columns]

    # --- pieces ---------------------------------------------------------
    def _jsonl_frame(self, path: Path, what: str) -> pd.DataFrame:
        if not path.exists():
            self.warnings.append(f"no {what} ({path.relative_to(self.path)} is missing)")
            return pd.DataFrame()
        return self._read_frame([(path.stem, path)], process_column=False)

    def _series_files(self, dirname: str) -> dict[str, list[Path]]:
        """Each series of a folder (process or source name) and its files, segments first."""
        cache: dict[str, dict[str, list[Path]]] = self.__dict__.setdefault("_files_cache", {})
        if dirname not in cache:
            cache[dirname] = series_files(self.path / dirname)
        return cache[dirname]

    def _jsonl_dir_frame(
        self, dirname: str, what: str, columns: Iterable[str] | None = None
    ) -> pd.DataFrame:
        files = [
            (stem, path) for stem, paths in self._series_files(dirname).items() for path in paths
        ]
        if not files:
            self._warn_once(f"no {what} ({dirname}/ is missing or empty)")
            return pd.DataFrame()
        return self._read_frame(files, process_column=True, columns=columns)

    def _read_frame(
        self,
        files: list[tuple[str, Path]],
        process_column: bool,
        columns: Iterable[str] | None = None,
    ) -> pd.DataFrame:
        """Rows of `files` ((series name, path) pairs) in one frame sorted by t_ns.

        `process` (the series name: the file name without segment number and
        suffix) is added where a row lacks it.
        """
        wanted = None if columns is None else list(dict.fromkeys(columns))
        # t_ns is always read: rows are dropped and sorted by it, whatever is kept.
        keep = None if wanted is None else frozenset([*wanted, "t_ns"])
        add_process = process_column and (keep is None or "process" in keep)
        parts: list[pd.DataFrame] = []
        gathered: _Columns | None = None  # files the fast reader refused, row by row
        for process, file in files:
            fast = _read_file_arrow(file, keep)
            if fast is not None:
                if gathered is not None:  # keep the files' order
                    parts.append(gathered.frame())
                    gathered = None
                if add_process:
                    if "process" not in fast.columns:
                        fast["process"] = process
                    else:
                        fast["process"] = fast["process"].fillna(process)
                parts.append(fast)
                continue
            gathered = gathered or _Columns(keep)
            warnings: list[str] = []
            for rows in iter_jsonl_chunks(file, warnings):
                if add_process:
                    for row in rows:
                        row.setdefault("process", process)
                gathered.add(rows)
            for msg in warnings:
                self._warn_once(msg)
        if gathered is not None:
            parts.append(gathered.frame())
        parts = [p for p in parts if len(p.columns)]
        if not parts:
            merged = pd.DataFrame()
        elif len(parts) == 1:
            merged = parts[0]
        else:
            # A column one file lacked (or held only nulls in) is `object` after the
            # concatenation; inferred again it is what one frame of all rows would hold.
            merged = pd.concat(parts, ignore_index=True, sort=False).infer_objects()
        frame = _frame(merged)
        if wanted is not None:
            frame = frame[[c for c in frame.columns if c in wanted]]
        return frame

    @cached_property
    def events(self) -> pd.DataFrame:
        return self._jsonl_frame(self.path / EVENTS_FILE, "events log")

    def error_messages(self, per_kind: int = 3) -> dict[str, list[str]]:
        """The servers' own words per error kind (`server_error` events), first few distinct."""
        events = self.events
        out: dict[str, list[str]] = {}
        if events.empty or "kind" not in events.columns or "message" not in events.columns:
            return out
        rows = events[events["kind"] == "server_error"].sort_values("t_ns", kind="stable")
        for kind, message in zip(rows["name"], rows["message"], strict=True):
            kept = out.setdefault(str(kind), [])
            if isinstance(message, str) and message not in kept and len(kept) < per_kind:
                kept.append(message)
        return out

    @cached_property
    def load_intervals(self) -> pd.DataFrame:
        """Per-process, per-interval load counters (offered, ok, errors, dropped, ...)."""
        return self._jsonl_dir_frame(LOAD_DIR, "load counters")

    @cached_property
    def request_samples(self) -> pd.DataFrame:
        return self._jsonl_dir_frame(REQUESTS_DIR, "request samples")

    def request_sample_columns(self, columns: Iterable[str]) -> pd.DataFrame:
        """Only `columns` of `request_samples` (same rows, same values), read without the rest.

        The whole sample of an hour at 2,000 requests/s is 738,000 rows and
        ~270 MB as a frame, mostly its string columns; not cached.
        """
        if "request_samples" in self.__dict__:
            frame: pd.DataFrame = self.request_samples
            return frame[[c for c in frame.columns if c in set(columns)]]
        return self._jsonl_dir_frame(REQUESTS_DIR, "request samples", columns=columns)

    def latency_log_files(self) -> list[Path]:
        folder = self.path / LATENCY_DIR
        return sorted(folder.glob("*.hlog")) if folder.is_dir() else []

    @overload
    def iter_latency_intervals(self) -> Iterator[IntervalHistogram[HdrHistogram]]: ...

    @overload
    def iter_latency_intervals(
        self, decode: Callable[[bytes], H]
    ) -> Iterator[IntervalHistogram[H]]: ...

    def iter_latency_intervals(
        self, decode: Callable[[bytes], Any] = HdrHistogram.decode
    ) -> Iterator[IntervalHistogram[Any]]:
        """Every interval histogram, file by file in file order (not sorted across files).

        One decoded histogram (139 KB) at a time: an hour at 2,000 requests/s is
        7,200 of them, ~1 GB as a list. `decode` is `read_interval_log`'s.
        Unreadable lines are reported in `warnings` once, however many times the
        logs are read.
        """
        files = self.latency_log_files()
        if not files:
            self._warn_once(f"no latency histograms ({LATENCY_DIR}/ is missing or empty)")
            return
        for file in files:
            seen: list[str] = []
            try:
                yield from read_interval_log(file, seen, decode)
            finally:
                for msg in seen:
                    self._warn_once(msg)

    @cached_property
    def latency_intervals(self) -> list[IntervalHistogram[HdrHistogram]]:
        """All interval histograms from all processes, sorted by start time.

        Holds them all in memory; prefer `iter_latency_intervals()` for long runs.
        """
        return sorted(self.iter_latency_intervals(), key=lambda h: h.start_ns)

    def _warn_once(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)

    def series_names(self) -> list[str]:
        return list(self._series_files(TELEMETRY_DIR))

    def has_series(self, source: str) -> bool:
        return source in self._series_files(TELEMETRY_DIR)

    def series_file_paths(self, source: str) -> list[Path]:
        """The files of one telemetry series, in time order (closed segments, then live)."""
        return list(self._series_files(TELEMETRY_DIR).get(source, []))

    def place(self, series: str, field: str | None = None) -> str:
        """Where a series (or one of its fields) was sampled: `server`, `client` or `unknown`.

        `server`: the machine or container the target runs on; `client`: a machine
        sending load. From the manifest's `sources` (docs/telemetry.md, "Where each
        series was sampled"); a run recorded before places were, by the legacy rules
        of docs/run-format.md. `field` matters for a series with parts (`host`'s
        `server_*` and `cgroup_*` fields are the process part).
        """
        return self.info.place(series, field)

    def series(self, source: str) -> pd.DataFrame:
        """A telemetry series (`gpu`, `host`, `triton_stats`, ...); empty frame if absent."""
        cache: dict[str, pd.DataFrame] = self.__dict__.setdefault("_series_cache", {})
        if source not in cache:
            files = self.series_file_paths(source)
            if not files:
                self.warnings.append(
                    f"no {source} telemetry ({TELEMETRY_DIR}/{source}.jsonl is missing)"
                )
                cache[source] = pd.DataFrame()
            else:
                cache[source] = self._read_frame([(source, f) for f in files], process_column=False)
        return cache[source]

    def analysis(self) -> dict[str, Any] | None:
        path = self.path / ANALYSIS_FILE
        if not path.exists():
            return None
        with open(path, encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
        return data


def load_run(path: str | os.PathLike[str]) -> Run:
    """Open a run directory; raise RunFormatError with what to do if it is not one."""
    path = Path(path)
    if not path.exists():
        raise RunFormatError(
            f"{path} does not exist", hint="pass a run directory, e.g. reports/<run_id>"
        )
    if not path.is_dir():
        raise RunFormatError(f"{path} is not a directory", hint="pass the run directory itself")
    manifest_path = path / MANIFEST_FILE
    if not manifest_path.exists():
        raise RunFormatError(
            f"{path} has no {MANIFEST_FILE}; it is not a loadkit run directory",
            hint="create one with `loadkit run`, `loadkit watch` or `loadkit import`",
        )
    try:
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
    except ValueError as exc:
        raise RunFormatError(
            f"{manifest_path} is not valid JSON ({exc})",
            hint="the manifest is written atomically; restore it from a copy of the run",
        ) from exc
    if not isinstance(manifest, dict):
        raise RunFormatError(f"{manifest_path} does not hold a JSON object")
    version = manifest.get("schema_version")
    if version not in KNOWN_SCHEMA_VERSIONS:
        known = ", ".join(str(v) for v in KNOWN_SCHEMA_VERSIONS)
        raise RunFormatError(
            f"{path} has schema_version {version!r}; this loadkit reads version(s) {known}",
            hint="upgrade loadkit to read runs written by a newer version",
        )
    run = Run(path, manifest)
    run.warnings.extend(missing_source_files(run))
    return run


def missing_source_files(run: Run) -> list[str]:
    """A warning per telemetry file the manifest lists that is not there (deleted, never copied)."""
    out: list[str] = []
    for source in run.info.sources:
        file = source.file
        if file is None or not file.startswith(f"{TELEMETRY_DIR}/"):
            continue
        stem = Path(file).name.split(".", 1)[0]
        if not run.has_series(stem):
            out.append(
                f"{file} is listed in the manifest's sources but missing: "
                f"the causes that need {stem} telemetry are not assessable"
            )
    return out
