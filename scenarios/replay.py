"""replay: replay a recorded traffic trace, optionally faster or scaled.

Shows: how the service handles real traffic, with its real minute-to-minute
shape, before it happens (e.g. last Black Friday's peak at 1.5x).
The trace is a CSV with a header: either a `rate` column (one row per
second, arrivals/s) or a `timestamp` column (one row per request; seconds,
or epoch milliseconds/nanoseconds). `time_scale` 2 replays twice as fast;
`rate_scale` multiplies per-second rates (timestamp traces replay their
exact requests, so only `time_scale` applies to them).

Parameters (defaults; override with `loadkit run ... --set name=value`):
  trace       traces/sample_rates.csv  the CSV to replay (relative paths are
              tried from the working directory, then from this scenario's folder)
  time_scale  1.0  > 1 replays faster
  rate_scale  1.0  multiplies per-second rates
plus the common parameters (protocol, model, candidates, churn, users,
spacing, max_start_delay_s, timeout_s).

The sample trace is two minutes of a diurnal-looking ramp with a short
spike at 60 s (made up, 40..220 arrivals/s).
"""

from pathlib import Path

from loadkit.load import InferenceUser, Param, Scenario, shapes

HERE = Path(__file__).resolve().parent


def _trace_path(name: str) -> Path:
    path = Path(name)
    return path if path.exists() or path.is_absolute() else HERE / name


SCENARIO = Scenario(
    name="replay",
    description=__doc__ or "",
    params={
        "trace": Param("traces/sample_rates.csv", "CSV with a rate or timestamp column"),
        "time_scale": Param(1.0, "> 1 replays faster"),
        "rate_scale": Param(1.0, "multiplies per-second rates"),
    },
    shape=lambda p: shapes.TraceReplay.from_csv(
        _trace_path(p.trace), time_scale=p.time_scale, rate_scale=p.rate_scale
    ),
    slo={"p99_ms": 50.0, "errors_pct": 1.0},
)


class Ranker(InferenceUser):
    """Scores a candidate batch with the `ranker` model."""


LoadShape = SCENARIO.locust_shape()
