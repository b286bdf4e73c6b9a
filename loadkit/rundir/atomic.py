"""Whole files or nothing: write to a temporary file beside the target, then rename.

A reader (or the next `loadkit report`) never sees half a file: a full disk, an
unwritable directory or Ctrl-C in the middle leaves the previous file as it
was, and the temporary file is removed.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` (UTF-8) to `path` whole, or leave `path` untouched and raise (OSError, ...)."""
    target = Path(path)
    try:
        mode = stat.S_IMODE(target.stat().st_mode)  # a rewritten file keeps its mode
    except OSError:
        mode = 0o644  # mkstemp's 0600 would hide a report from its readers
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:  # Ctrl-C included: the old file stays, the half-written one goes
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
