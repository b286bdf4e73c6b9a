"""Loads any run directory (complete, aborted, killed, imported) into pandas frames.

Everything missing is explained in one line in `Run.warnings`; nothing here
raises for a partial run, only for a directory that is not a run at all or has
a schema version this loadkit does not know.
"""

from __future__ import annotations

import json
import logging
import os
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

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

log = logging.getLogger(__name__)


def read_jsonl(path: Path, warnings: list[str]) -> list[dict[str, Any]]:
    """Rows of a JSON Lines file; a line that does not parse is skipped with a warning."""
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                torn = not line.endswith("\n")
                why = "torn last line (run was killed mid-write)" if torn else "corrupted line"
                msg = f"{path.name}:{lineno}: skipped {why}"
                log.warning(msg)
                warnings.append(msg)
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                warnings.append(f"{path.name}:{lineno}: skipped a line that is not a JSON object")
    return rows


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
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
        return _frame(read_jsonl(path, self.warnings))

    def _jsonl_dir_frame(self, dirname: str, what: str) -> pd.DataFrame:
        folder = self.path / dirname
        files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
        if not files:
            self.warnings.append(f"no {what} ({dirname}/ is missing or empty)")
            return pd.DataFrame()
        rows: list[dict[str, Any]] = []
        for file in files:
            for row in read_jsonl(file, self.warnings):
                row.setdefault("process", file.stem)
                rows.append(row)
        return _frame(rows)

    @cached_property
    def events(self) -> pd.DataFrame:
        return self._jsonl_frame(self.path / EVENTS_FILE, "events log")

    @cached_property
    def load_intervals(self) -> pd.DataFrame:
        """Per-process, per-interval load counters (offered, ok, errors, dropped, ...)."""
        return self._jsonl_dir_frame(LOAD_DIR, "load counters")

    @cached_property
    def request_samples(self) -> pd.DataFrame:
        return self._jsonl_dir_frame(REQUESTS_DIR, "request samples")

    @cached_property
    def latency_intervals(self) -> list[IntervalHistogram]:
        """All interval histograms from all processes, sorted by start time."""
        folder = self.path / LATENCY_DIR
        files = sorted(folder.glob("*.hlog")) if folder.is_dir() else []
        if not files:
            self.warnings.append(f"no latency histograms ({LATENCY_DIR}/ is missing or empty)")
            return []
        out: list[IntervalHistogram] = []
        for file in files:
            out.extend(read_interval_log(file, self.warnings))
        out.sort(key=lambda h: h.start_ns)
        return out

    def series_names(self) -> list[str]:
        folder = self.path / TELEMETRY_DIR
        return sorted(p.stem for p in folder.glob("*.jsonl")) if folder.is_dir() else []

    def has_series(self, source: str) -> bool:
        return (self.path / TELEMETRY_DIR / f"{source}.jsonl").exists()

    def series(self, source: str) -> pd.DataFrame:
        """A telemetry series (`gpu`, `host`, `triton_stats`, ...); empty frame if absent."""
        cache: dict[str, pd.DataFrame] = self.__dict__.setdefault("_series_cache", {})
        if source not in cache:
            cache[source] = self._jsonl_frame(
                self.path / TELEMETRY_DIR / f"{source}.jsonl", f"{source} telemetry"
            )
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
    return Run(path, manifest)
