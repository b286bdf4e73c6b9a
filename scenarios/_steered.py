"""_steered: the arrival rate is set while the load runs (used by `loadkit capacity`).

Not for `loadkit run`: the rate comes from the run directory's
`capacity/schedule.jsonl`, which `loadkit capacity` appends to as its search
decides the next probe (see `loadkit.load.shapes.Steered`). Until the first
change, and between probes, the rate is `idle_rate`.

Parameters (set by `loadkit capacity`):
  max_rate        1000.0  the highest rate the search may ask for (sizes the user pool)
  max_duration_s   600.0  the load ends here at the latest
  idle_rate          1.0  arrivals/s before the first probe
plus the common parameters.
"""

import os
from pathlib import Path

from loadkit.load import InferenceUser, Param, Scenario, shapes
from loadkit.load.handoff import ENV_RUN_DIR

SCHEDULE_FILE = "capacity/schedule.jsonl"


def _schedule_path() -> str:
    run_dir = os.environ.get(ENV_RUN_DIR)
    return str(Path(run_dir) / SCHEDULE_FILE) if run_dir else ""


SCENARIO = Scenario(
    name="capacity",
    description=__doc__ or "",
    params={
        "max_rate": Param(1000.0, "the highest rate the search may ask for"),
        "max_duration_s": Param(600.0, "the load ends here at the latest"),
        "idle_rate": Param(1.0, "arrivals/s before the first probe and between probes"),
    },
    shape=lambda p: shapes.Steered(
        schedule_path=_schedule_path(),
        max_rate=p.max_rate,
        duration_s=p.max_duration_s,
        idle_rate=p.idle_rate,
    ),
    slo=None,
)


class Steered(InferenceUser):
    """Sends the model's requests at the rate the search sets."""


LoadShape = SCENARIO.locust_shape()
