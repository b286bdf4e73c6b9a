"""steps_to_knee: a staircase of rates, to find where latency stops being flat.

Shows: the saturation knee. The rate starts at `start_rate` and rises by
`step_rate` every `step_s` seconds, `steps` times. Below the knee P99 stays
flat as the rate grows; past it, queues build within each step and
corrected latency climbs (and, with a bounded queue, `queue_full` errors or
dropped arrivals appear). Each step is long enough for a stable P99 at
1 s resolution; the `step` events carry each step's rate.

Parameters (defaults; override with `loadkit run ... --set name=value`):
  start_rate  50.0  arrivals/s of the first step
  step_rate   50.0  added every step
  step_s      20.0  seconds per step
  steps         10  number of steps (last rate = start + step x (steps - 1))
plus the common parameters (protocol, model, candidates, churn, users,
spacing, max_start_delay_s, timeout_s).
"""

from loadkit.load import InferenceUser, Param, Scenario, shapes

SCENARIO = Scenario(
    name="steps_to_knee",
    description=__doc__ or "",
    params={
        "start_rate": Param(50.0, "arrivals/s of the first step"),
        "step_rate": Param(50.0, "added every step"),
        "step_s": Param(20.0, "seconds per step"),
        "steps": Param(10, "number of steps"),
    },
    shape=lambda p: shapes.Steps(
        start_rate=p.start_rate, step_rate=p.step_rate, step_s=p.step_s, steps=p.steps
    ),
    slo={"p99_ms": 50.0, "errors_pct": 1.0},
)


class Ranker(InferenceUser):
    """Scores a candidate batch with the `ranker` model."""


LoadShape = SCENARIO.locust_shape()
