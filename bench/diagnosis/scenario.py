"""diagnosis (benchmark scenario): steady open-model load, optionally with periodic bursts.

Shows: a constant arrival rate `rate` for `duration_s`; with
`burst_multiplier` > 1, a spike train instead (`rate` x multiplier for
`burst_duty` of every `burst_period_s`, the first at `burst_offset_s`), whose
`burst-start`/`burst-end` phase events are the ground truth of the bursts.
Connection churn is the common `churn` parameter. With `payload_state` (a
file written by `loadkit.faults.LargePayload`), every request sent while the
file says `{"bytes": n}` carries an n-byte `PAYLOAD` input as well (the
embedded ranker declares it optional and ignores it; Triton still copies it).

    locust -f bench/diagnosis/scenario.py --host http://127.0.0.1:8000
"""

from bench.diagnosis.payload import PayloadSource
from loadkit.faults.payload import PayloadState
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
        "payload_state": Param("", "LargePayload state file: attach its PAYLOAD bytes"),
    },
    shape=_shape,
    slo={"p99_ms": 50.0, "errors_pct": 1.0},
)


class Ranker(InferenceUser):
    """Scores a candidate batch with the `ranker` model (or the scenario's `model`)."""

    def on_start(self) -> None:
        super().on_start()
        path = str(self._runtime.resolved.params["payload_state"])
        if path:
            self._source = PayloadSource(self._source, PayloadState(path))


LoadShape = SCENARIO.locust_shape()
