"""diagnosis (benchmark scenario): steady open-model load, optionally with periodic bursts.

Shows: a constant arrival rate `rate` for `duration_s`; with
`burst_multiplier` > 1, a spike train instead (`rate` x multiplier for
`burst_duty` of every `burst_period_s`, the first at `burst_offset_s`), whose
`burst-start`/`burst-end` phase events are the ground truth of the bursts.
Connection churn is the common `churn` parameter.

    locust -f bench/diagnosis/scenario.py --host http://127.0.0.1:8000
"""

from loadkit.load import InferenceUser, Param, Scenario, shapes


def _shape(p):  # type: ignore[no-untyped-def]
    if p.burst_multiplier <= 1.0:
        return shapes.Constant(rate=p.rate, duration_s=p.duration_s)
    return shapes.PeriodicBursts(
        base_rate=p.rate,
        multiplier=p.burst_multiplier,
        period_s=p.burst_period_s,
        duty=p.burst_duty,
        duration_s=p.duration_s,
        offset_s=p.burst_offset_s,
    )


SCENARIO = Scenario(
    name="diagnosis",
    description=__doc__ or "",
    params={
        "rate": Param(60.0, "arrivals/s (the base rate when bursting)"),
        "duration_s": Param(70.0, "run length in seconds"),
        "burst_multiplier": Param(1.0, "peak = rate x multiplier; 1 = no bursts"),
        "burst_period_s": Param(15.0, "seconds between burst starts"),
        "burst_duty": Param(0.25, "share of each period at the peak"),
        "burst_offset_s": Param(10.0, "first burst start (s after load start)"),
    },
    shape=_shape,
    slo={"p99_ms": 50.0, "errors_pct": 1.0},
)


class Ranker(InferenceUser):
    """Scores a candidate batch with the `ranker` model."""


LoadShape = SCENARIO.locust_shape()
