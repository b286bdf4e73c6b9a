"""periodic_bursts: a spike train, to reproduce (or rule out) sawtooth latency.

Shows: whether upstream traffic that spikes on a schedule (cron jobs, batch
fan-outs, cache refreshes) explains periodic P99 spikes: every `period_s`
the rate jumps to `multiplier` x base for `duty` of the period. Compare the
latency spikes' period with the spike train's; `loadkit analyze` attributes
episodes to "arrival burst" when they line up.

Parameters (defaults; override with `loadkit run ... --set name=value`):
  base_rate   80.0  arrivals/s between spikes
  multiplier   3.0  spike rate = base_rate x multiplier
  period_s    20.0  seconds from one spike start to the next
  duty         0.2  fraction of each period spent in the spike
  rise_s       0.0  ramp time of each spike edge (0: square wave)
  offset_s    10.0  first spike starts here
  duration_s 120.0  run length (also set by --duration)
plus the common parameters (protocol, model, candidates, churn, users,
spacing, max_start_delay_s, timeout_s).

Events: burst-start and burst-end for every spike.
"""

from loadkit.load import InferenceUser, Param, Scenario, shapes

SCENARIO = Scenario(
    name="periodic_bursts",
    description=__doc__ or "",
    params={
        "base_rate": Param(80.0, "arrivals/s between spikes"),
        "multiplier": Param(3.0, "spike rate = base_rate x multiplier"),
        "period_s": Param(20.0, "seconds from one spike start to the next"),
        "duty": Param(0.2, "fraction of each period spent in the spike"),
        "rise_s": Param(0.0, "ramp time of each spike edge (0: square wave)"),
        "offset_s": Param(10.0, "first spike starts here"),
        "duration_s": Param(120.0, "run length in seconds"),
    },
    shape=lambda p: shapes.PeriodicBursts(
        base_rate=p.base_rate,
        multiplier=p.multiplier,
        period_s=p.period_s,
        duty=p.duty,
        duration_s=p.duration_s,
        rise_s=p.rise_s,
        offset_s=p.offset_s,
    ),
    slo={"p99_ms": 50.0, "errors_pct": 1.0},
)


class Ranker(InferenceUser):
    """Scores a candidate batch with the `ranker` model."""


LoadShape = SCENARIO.locust_shape()
