"""burst_2x: does latency recover after traffic doubles for a while?

Shows: a steady base rate, then the rate rises to `multiplier` x base within
`rise_s` (10 s), holds for `hold_s`, falls back within `fall_s`, and stays at
base for `recover_s` while you watch whether P99 comes back quickly or the
queues pile up. Open model: arrivals keep their schedule whatever the server
does, and latency is measured from the intended send time.

Parameters (defaults; override with `loadkit run ... --set name=value`):
  base_rate   100.0  arrivals/s before and after the burst
  multiplier    2.0  peak rate = base_rate x multiplier
  steady_s     30.0  seconds at base before the burst
  rise_s       10.0  seconds to reach the peak
  hold_s       30.0  seconds at the peak
  fall_s       10.0  seconds to come back to base
  recover_s    60.0  seconds at base after the burst (recovery window)
plus the common parameters (protocol, model, candidates, churn, users,
spacing, max_start_delay_s, timeout_s): see `loadkit run burst_2x --help`.

Events: burst-start, burst-peak, burst-fall, burst-end (recovery is measured
from burst-end). SLO declared: P99 under 50 ms.

    loadkit run burst_2x --target http://127.0.0.1:8000
    locust -f scenarios/burst_2x.py --host http://127.0.0.1:8000
"""

from loadkit.load import InferenceUser, Param, Scenario, shapes

SCENARIO = Scenario(
    name="burst_2x",
    description=__doc__ or "",
    params={
        "base_rate": Param(100.0, "arrivals/s before and after the burst"),
        "multiplier": Param(2.0, "peak rate = base_rate x multiplier"),
        "steady_s": Param(30.0, "seconds at base before the burst"),
        "rise_s": Param(10.0, "seconds to reach the peak"),
        "hold_s": Param(30.0, "seconds at the peak"),
        "fall_s": Param(10.0, "seconds to come back to base"),
        "recover_s": Param(60.0, "seconds at base after the burst (recovery window)"),
    },
    shape=lambda p: shapes.Burst(
        base_rate=p.base_rate,
        multiplier=p.multiplier,
        steady_s=p.steady_s,
        rise_s=p.rise_s,
        hold_s=p.hold_s,
        fall_s=p.fall_s,
        recover_s=p.recover_s,
    ),
    slo={"p99_ms": 50.0, "errors_pct": 1.0},
)


class Ranker(InferenceUser):
    """Scores a candidate batch with the `ranker` model."""


LoadShape = SCENARIO.locust_shape()
