"""bench_closed: loadkit's closed model (users loop back to back) for the generator benchmark.

Same recording as the open model (corrected + service HDR histograms,
request sample), but no arrival scheduler: the rate is whatever the users
reach, like bare Locust with `wait_time = constant(0)`.

Parameters: duration_s 12.0 plus the common ones (users, protocol, ...).
"""

from loadkit.load import InferenceUser, Param, Scenario, shapes

SCENARIO = Scenario(
    name="bench_closed",
    description=__doc__ or "",
    params={"duration_s": Param(12.0, "run length in seconds")},
    shape=lambda p: shapes.Constant(rate=1.0, duration_s=p.duration_s),
    model="closed",
)


class Looper(InferenceUser):
    """Sends back to back (closed model)."""


LoadShape = SCENARIO.locust_shape()
