"""Data movement: requests carry a large payload during each window.

The injector writes `{"bytes": n, "share": f}` to a state file at each
window's start and `{"bytes": 0, "share": f}` at its end (atomically, by rename;
reset on every exit path); the load generator reads it (`PayloadState`, at
most every 100 ms) and attaches an `n`-byte tensor to a share `f` of the
requests it sends meanwhile, spread evenly (the
diagnosis benchmark's scenario sends it as the embedded ranker's optional
`PAYLOAD` input, which the model ignores). Triton still receives the bytes and
copies them to the model: its compute_input time grows while compute_infer
does not, as when clients send raw images or full feature vectors. The ground
truth is the `data-movement` fault event.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from loadkit.faults.schedule import Clock, FaultSchedule, FaultUnavailable, ScheduledFault

STATE_REREAD_S = 0.1


class LargePayload(ScheduledFault):
    """Write a payload size (bytes per request) to a state file during each window."""

    name = "data-movement"

    def __init__(
        self,
        state_path: str | os.PathLike[str],
        schedule: FaultSchedule,
        *,
        payload_bytes: int = 1 << 20,
        share: float = 1.0,
        run_dir: str | Path | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(schedule, run_dir=run_dir, clock=clock)
        if payload_bytes < 1:
            raise FaultUnavailable(f"payload must be >= 1 byte, got {payload_bytes}")
        if not 0.0 < share <= 1.0:
            raise FaultUnavailable(f"payload share must be in (0, 1], got {share}")
        self.state_path = Path(state_path)
        self.payload_bytes = int(payload_bytes)
        self.share = float(share)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "payload_bytes": self.payload_bytes,
            "share": self.share,
            "state_path": str(self.state_path),
        }

    def _write(self, size: int) -> None:
        tmp = self.state_path.with_name(f".{self.state_path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"bytes": size, "share": self.share}))
        os.replace(tmp, self.state_path)

    def _prepare(self) -> None:
        if not self.state_path.parent.is_dir():
            raise FaultUnavailable(f"no directory for the payload state {self.state_path}")
        self._write(0)

    def _begin(self) -> dict[str, Any]:
        self._write(self.payload_bytes)
        return {"payload_bytes": self.payload_bytes, "share": self.share}

    def _end(self) -> None:
        self._write(0)

    def _cleanup(self) -> None:
        self._write(0)


class PayloadState:
    """The load generator's side: the payload size now (0: none) and the share of requests
    that carry it, re-read at most every 100 ms.

    A torn file keeps the last good value; a missing one means no payload.
    """

    def __init__(self, path: str | os.PathLike[str], *, clock: Any = time.monotonic) -> None:
        self.path = Path(path)
        self.size = 0
        self.share = 1.0
        self._clock = clock
        self._checked = float("-inf")
        self._mtime: int | None = None

    def get(self) -> int:
        now = self._clock()
        if now - self._checked < STATE_REREAD_S:
            return self.size
        self._checked = now
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError:
            self._mtime, self.size = None, 0
            return self.size
        if mtime == self._mtime:
            return self.size
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            value, share = int(data["bytes"]), float(data.get("share", 1.0))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return self.size  # torn write: keep the last good value, retry soon
        self._mtime = mtime
        self.size = max(0, value)
        self.share = min(1.0, max(0.0, share))
        return self.size
