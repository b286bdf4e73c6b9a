"""Whether the load generator kept its schedule: one rule, read from the load rows.

A generator that falls behind (its scheduler late, arrivals dropped, its
Locust process at a full core) measures itself as much as the server: the
corrected latency then includes loadkit's own delay. `loadkit run`'s
end-of-run summary, `loadkit analyze` (an alert) and the report (the same
alert) each say so in one line, from this function alone, so the three never
disagree. It sits with the run directory because the recording side (the
summary) and the analysis side both read it and may not import each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

LAG_MS = 10.0  # the scheduler this late in a second (its worst arrival): behind schedule
CPU_PCT = 90.0  # a Locust process this busy in a second: at the limit of its one core
SECONDS_SHARE = 0.1  # ... in at least this share of a process's seconds with load
ADVICE = "use --workers N (one Locust process per core) or more machines"


@dataclass(frozen=True)
class ScheduleShortfall:
    """How a run's generator fell behind; `line()` is what every output says."""

    dropped: int  # arrivals never sent
    late_s: int  # process-seconds with the scheduler >= LAG_MS late
    busy_s: int  # process-seconds with a Locust process >= CPU_PCT of a core
    seconds: int  # process-seconds with load
    worst_lag_ms: float

    def line(self) -> str:
        why = []
        if self.dropped:
            why.append(f"{self.dropped} arrivals dropped")
        if self.late_s:
            why.append(
                f"scheduler >= {LAG_MS:g} ms late in {self.late_s} of {self.seconds} s"
                f" (worst {self.worst_lag_ms:.0f} ms)"
            )
        if self.busy_s:
            why.append(f"Locust at >= {CPU_PCT:g} % of a core in {self.busy_s} of {self.seconds} s")
        return (
            f"the load generator could not keep its schedule ({'; '.join(why)}): "
            f"the latencies include its own delay; {ADVICE}"
        )


def schedule_shortfall(load: pd.DataFrame) -> ScheduleShortfall | None:
    """The shortfall in a run's load rows (`load/<process>.jsonl`), or None when it kept up.

    Behind schedule: any dropped arrival, or, in at least `SECONDS_SHARE` of the
    seconds a process had load, its scheduler `LAG_MS` late or its CPU at `CPU_PCT`
    of a core. Rows without the lag or CPU columns (closed model, older runs) count
    as on time.
    """
    if load is None or not len(load) or "t_ns" not in load.columns:
        return None
    dropped = int(load["dropped"].fillna(0).sum()) if "dropped" in load.columns else 0
    keys = ["process", "t_ns"] if "process" in load.columns else ["t_ns"]
    columns = {c: "max" for c in ("dispatch_lag_max_ms", "generator_cpu_pct") if c in load.columns}
    if columns:
        per_second = load.groupby(keys).agg(columns)
    else:
        per_second = load.groupby(keys).size().to_frame("rows")
    seconds = len(per_second)
    lag = per_second.get("dispatch_lag_max_ms", pd.Series(dtype=float)).astype(float)
    cpu = per_second.get("generator_cpu_pct", pd.Series(dtype=float)).astype(float)
    late_s, busy_s = int((lag >= LAG_MS).sum()), int((cpu >= CPU_PCT).sum())
    need = max(1, SECONDS_SHARE * seconds)
    late_s = late_s if late_s >= need else 0
    busy_s = busy_s if busy_s >= need else 0
    if not (dropped or late_s or busy_s):
        return None
    worst = float(lag.max()) if len(lag) and lag.notna().any() else 0.0
    return ScheduleShortfall(dropped, late_s, busy_s, seconds, worst)
