"""Connection churn: requests open new connections, and a new connection's first request is slow.

New connections count where their rate clears its baseline's spread (a client
that reconnects now and then all run is its own baseline), and only when its
request is slower than the requests sent at the same moment on reused
connections: a client pool that grows while requests pile up (an effect of the
latency) opens its connections exactly when everything is slow.

When most requests open a connection all run long (keep-alive off), there is
no baseline to contrast episodes with: that is a standing condition
(`run_level`), "no connection reuse".
"""

from __future__ import annotations

import numpy as np

from loadkit.analysis.causes.base import (
    EITHER,
    Cause,
    Signals,
    Signature,
    assessed,
    ev,
    flag,
    fmt,
    mean,
    median,
    need,
    outside_server_ms,
)
from loadkit.analysis.model import CAUSE_CONNECTION_CHURN, Evidence
from loadkit.analysis.noise import above_spread
from loadkit.analysis.telemetry import new_connections_per_s

# New connections per second rise where they clear their baseline's spread and are this
# many times its median (`noise.above_spread`; was a fixed 4x + 1/s) ...
CHURN_RISE = 2.0
# ... and at least this many per second (the floor where the baseline reuses every
# connection: a few reconnects are no churn) and this share of the window's requests.
CHURN_MIN_PER_S = 5.0
CHURN_NEW_CONN_SHARE = 0.05
FIRST_REQUEST_SLOWDOWN = 1.2  # churn needs the first request on a connection this much slower
# Half the requests or more open a connection, run-long: keep-alive is off (a
# standing condition), not reconnect bursts, which touch a few % of requests.
RUN_LEVEL_CHURN_SHARE = 0.5


@assessed(CAUSE_CONNECTION_CHURN)
def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    cause = CAUSE_CONNECTION_CHURN
    found, source = new_connections_per_s(sig.host, sig.samples, sig.throughput_rps)
    rate = need(found, "no request samples or host tcp_new_connections")
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(sig.throughput_rps > 0, rate / sig.throughput_rps, np.nan)
    first, reused = (
        (sig.samples.first_request_ms, sig.samples.reused_request_ms)
        if sig.samples is not None
        else (None, None)
    )
    # New connections that are not slower (e.g. the user pool growing) cost nothing.
    # Against requests sent at the same moment where there are any: a pool that
    # grows while requests pile up opens its connections when everything is slow.
    neighbours = sig.samples.first_vs_neighbours if sig.samples is not None else None
    if neighbours is not None:
        not_slower = neighbours < FIRST_REQUEST_SLOWDOWN
    else:
        not_slower = (
            first is not None and reused is not None and first < FIRST_REQUEST_SLOWDOWN * reused
        )
    run_share = float(np.nanmedian(share)) if np.any(~np.isnan(share)) else 0.0
    run_level = run_share >= RUN_LEVEL_CHURN_SHARE
    if run_level:
        cond = np.nan_to_num(share, nan=0.0) >= RUN_LEVEL_CHURN_SHARE
    else:
        rose = above_spread(rate, baseline, CHURN_RISE, at_least=CHURN_MIN_PER_S)
        if rose is None:  # under 3 baseline windows: the floor alone
            rose = flag(np.nan_to_num(rate, nan=0.0) >= CHURN_MIN_PER_S, rate)
        cond = (np.nan_to_num(rose, nan=0.0) > 0) & (
            np.nan_to_num(share, nan=0.0) >= CHURN_NEW_CONN_SHARE
        )
    if not_slower:
        cond = np.zeros(sig.n, dtype=bool)
    holds = flag(cond, rate if not run_level else share)
    outside = outside_server_ms(sig)

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        out = [
            Evidence("new_connections_in_episodes", mean(rate, ep), "/s", source),
            Evidence("new_connections_baseline", median(rate, base), "/s"),
            Evidence("new_connection_share_in_episodes", mean(share, ep), "of requests"),
            Evidence("new_connection_share_run", run_share, "of requests", "median window"),
        ]
        if sig.samples is not None:
            out += [
                Evidence(
                    "first_request_latency",
                    sig.samples.first_request_ms,
                    "ms",
                    "median, new connection",
                ),
                Evidence(
                    "reused_connection_latency", sig.samples.reused_request_ms, "ms", "median"
                ),
                Evidence(
                    "first_request_vs_neighbours",
                    sig.samples.first_vs_neighbours,
                    "x",
                    "new-connection request vs reused ones sent within 0.1 s",
                ),
            ]
        if outside is not None:
            out.append(
                Evidence(
                    "outside_server_time",
                    median(outside, ep if ep.any() else base),
                    "ms",
                    "median service latency minus Triton queue + compute",
                )
            )
        return out

    return Signature(cause, holds, rate, evidence, run_level=run_level)


def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    if run_share is not None:
        new_share = ev(e, "new_connection_share_run")
        reused = ev(e, "reused_connection_latency")
        return (
            f"{fmt(None if new_share is None else 100 * new_share)}% of requests open a new connection "
            f"(in {run_share:.0%} of windows: keep-alive is off); requests on a new connection "
            f"take {fmt(ev(e, 'first_request_latency'), '', 1)} ms"
            + (f" vs {fmt(reused, '', 1)} ms reused" if reused is not None else "")
            + f", {fmt(ev(e, 'outside_server_time'), '', 1)} ms of it outside Triton."
        )
    return (
        f"{fmt(ev(e, 'new_connections_in_episodes'))} new connections/s "
        f"(baseline {fmt(ev(e, 'new_connections_baseline'), '', 1)}) in {eps}; first request on a "
        f"connection {fmt(ev(e, 'first_request_latency'), '', 1)} ms vs "
        f"{fmt(ev(e, 'reused_connection_latency'), '', 1)} ms reused."
    )


CAUSE = Cause(
    id=CAUSE_CONNECTION_CHURN,
    title="Connection churn",
    action="Reuse connections: one long-lived gRPC channel or keep-alive HTTP "
    "client per worker; check load-balancer and server idle timeouts.",
    signature=signature,
    summary=summary,
    signal=("telemetry.new_connections_per_s", "new connections/s"),
    kind=EITHER,
    fault_events=("churn",),
    per_request="per-request connection reuse",
)
