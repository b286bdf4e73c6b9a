"""Model slowdown: the model itself takes `factor` times longer during each window.

The embedded `ranker` reads `{"factor": f}` from the file named by its
`slowdown_state` parameter (at most every 100 ms) and multiplies its simulated
accelerator time by f. Nothing else changes: no GPU clock, CPU, cgroup or
traffic signal, as when a model slows from GC, data-dependent work or I/O.
The file is written atomically (rename) and reset to 1.0 on every exit path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from loadkit.faults.schedule import Clock, FaultSchedule, FaultUnavailable, ScheduledFault


class ModelSlowdown(ScheduledFault):
    """Write `factor` to the model's slowdown state file during each window."""

    name = "model-slowdown"

    def __init__(
        self,
        state_path: str | os.PathLike[str],
        schedule: FaultSchedule,
        *,
        factor: float = 2.0,
        run_dir: str | Path | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(schedule, run_dir=run_dir, clock=clock)
        if factor < 1.0:
            raise FaultUnavailable(f"model slowdown factor must be >= 1, got {factor}")
        self.state_path = Path(state_path)
        self.factor = float(factor)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "factor": self.factor, "state_path": str(self.state_path)}

    def _write(self, factor: float) -> None:
        tmp = self.state_path.with_name(f".{self.state_path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"factor": factor}))
        os.replace(tmp, self.state_path)

    def _prepare(self) -> None:
        if not self.state_path.parent.is_dir():
            raise FaultUnavailable(f"no directory for the slowdown state {self.state_path}")
        self._write(1.0)

    def _begin(self) -> dict[str, Any]:
        self._write(self.factor)
        return {"factor": self.factor}

    def _end(self) -> None:
        self._write(1.0)

    def _cleanup(self) -> None:
        self._write(1.0)
