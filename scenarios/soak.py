"""soak: a constant rate for a long time, to expose drift.

Shows: whether the service holds a steady rate for long: memory growth,
a creeping latency floor, periodic stalls (GC, compaction, log rotation),
slow connection or queue build-up. Open model, so a stall shows up as
corrected latency instead of a lower request rate.

Parameters (defaults; override with `loadkit run ... --set name=value`):
  rate        100.0  arrivals/s for the whole run
  duration_s 1800.0  run length in seconds (also set by --duration)
plus the common parameters (protocol, model, candidates, churn, users,
spacing, max_start_delay_s, timeout_s).

    loadkit run soak --target http://127.0.0.1:8000 --duration 3600
"""

from loadkit.load import InferenceUser, Param, Scenario, shapes

SCENARIO = Scenario(
    name="soak",
    description=__doc__ or "",
    params={
        "rate": Param(100.0, "arrivals/s for the whole run"),
        "duration_s": Param(1800.0, "run length in seconds"),
    },
    shape=lambda p: shapes.Constant(rate=p.rate, duration_s=p.duration_s),
    slo={"p99_ms": 50.0, "errors_pct": 1.0},
)


class Ranker(InferenceUser):
    """Scores a candidate batch with the `ranker` model."""


LoadShape = SCENARIO.locust_shape()
