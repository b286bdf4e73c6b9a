"""closed_loop (test scenario): `users` users sending back to back, no arrival schedule.

Used by the gRPC-under-gevent test: 20 users against a 100 ms model should
reach about 200 requests/s; without `init_gevent()` they reach a handful.
"""

from loadkit.load import InferenceUser, Param, Scenario, shapes

SCENARIO = Scenario(
    name="closed_loop",
    model="closed",
    params={
        "duration_s": Param(5.0, "run length in seconds"),
        "users": Param(20, "Locust users, each sending back to back"),
    },
    # In the closed model the shape only sets the run length.
    shape=lambda p: shapes.Constant(rate=0.0, duration_s=p.duration_s),
)


class Ranker(InferenceUser):
    """Scores a candidate batch with the `ranker` model."""


LoadShape = SCENARIO.locust_shape()
