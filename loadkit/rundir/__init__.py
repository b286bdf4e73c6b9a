"""The run directory: the only contract between recording, analysis and reports."""

from loadkit.rundir.hlog import (
    IntervalHistogram,
    IntervalLogWriter,
    new_histogram,
    read_interval_log,
)
from loadkit.rundir.reader import Run, load_run
from loadkit.rundir.writer import (
    JsonlWriter,
    RunWriter,
    append_event,
    now_ns,
    safe_name,
    update_manifest,
    write_manifest,
)

__all__ = [
    "IntervalHistogram",
    "IntervalLogWriter",
    "JsonlWriter",
    "Run",
    "RunWriter",
    "append_event",
    "load_run",
    "new_histogram",
    "now_ns",
    "read_interval_log",
    "safe_name",
    "update_manifest",
    "write_manifest",
]
