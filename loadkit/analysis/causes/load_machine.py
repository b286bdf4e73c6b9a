"""The load machine short of CPU: the generator's own delay, not the server's.

Read from the telemetry sampled on a load machine (`client_series`): its cores
saturated (>= BUSY_CORES_SHARE of them at >= 95 %) or its container throttled
(loadkit's own cgroup: the host series' process part without --server-pid) beyond
its baseline's spread (`quota_throttled`), the rules the server's CPU causes are
found by. Scored like every episode cause: it explains a
spike where it holds in the spike (or just before it) and seldom in baseline
windows. A load machine busy all run long coincides with every window and is
left to the generator's own check (the `generator_behind` alert).

Its evidence is the generator's lag where it was recorded: how late requests
were sent (corrected minus service latency, `components`' generator lag), the
arrival scheduler's worst lateness, and the time outside the server. Where the
lag did not grow it is still the load machine's: a starved client also reads
its responses late, which the service time counts.

Where the host series were sampled on the server's machine, or nobody knows where
(an older run), it is not assessable: the server's causes read them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadkit.analysis.causes.base import (
    BUSY_CORES_SHARE,
    CGROUP_THROTTLED_FLOOR_PCT,
    EPISODIC,
    Cause,
    Signals,
    Signature,
    assessed,
    check,
    components,
    ev,
    fmt,
    host_busy_cores,
    maximum,
    mean,
    median,
    quota_throttled,
)
from loadkit.analysis.model import Evidence
from loadkit.analysis.places import CLIENT_SIDE, part_place, series_at
from loadkit.analysis.telemetry import HostSeries
from loadkit.rundir.schema import WORKER_SERIES_PREFIX

CAUSE_LOAD_MACHINE = "load_machine_saturated"
# A sign of the load machine's that holds in this share of the baseline windows is the
# run's standing condition, not a spike's cause.
STANDING_SHARE = 0.5


def machine_name(sig: Signals) -> str:
    """The load machine's name as its host series' source recorded it ("": not recorded)."""
    series = series_at(sig.places, "host", CLIENT_SIDE)
    entry = next((p for p in sig.places if p.name == series and p.file is not None), None)
    if entry is None or not entry.host:
        return ""
    return entry.host + (" (loadkit's machine)" if entry.loadkit_host else "")


@dataclass
class _Machine:
    """One load machine's signs per window: this one's, or a worker's (`host-worker-*`)."""

    name: str
    busy: np.ndarray | None
    throttled: np.ndarray | None
    short: np.ndarray
    known: np.ndarray
    metric: np.ndarray
    standing: list[str]
    cgroup_whose: str


def _machines(sig: Signals) -> list[tuple[str, HostSeries, str]]:
    """(name, host series, whose cgroup) of every load machine: this one, then each worker."""
    out = []
    if sig.host is not None:
        host_series = series_at(sig.places, "host", CLIENT_SIDE)
        loadkits = part_place(sig.places, host_series, "process") == "client"
        whose = "loadkit's own cgroup" if loadkits else "the load process's cgroup"
        out.append((machine_name(sig), sig.host, whose))
    for name, series in sig.sources.items():
        if name.startswith(WORKER_SERIES_PREFIX) and series is not None:
            entry = next((p for p in sig.places if p.name == name), None)
            host = entry.host if entry is not None and entry.host else name
            out.append((f"{host} (a worker)", series, "the worker's cgroup"))
    return out


def _signs(
    name: str, host: HostSeries, whose: str, baseline: np.ndarray, n: int
) -> _Machine | None:
    busy = host_busy_cores(host)
    throttled = host.cgroup_throttled_pct if host.has_cgroup else None
    if busy is None and throttled is None:
        return None
    machine = _Machine(
        name,
        busy,
        throttled,
        np.zeros(n, dtype=bool),
        np.zeros(n, dtype=bool),
        np.full(n, np.nan),
        [],
        whose,
    )
    conditions = []
    if busy is not None:
        conditions.append(("cores busy", busy >= BUSY_CORES_SHARE, busy, busy))
    capped = quota_throttled(host, baseline)
    if throttled is not None and capped is not None:
        conditions.append(
            ("container throttled", np.nan_to_num(capped, nan=0.0) > 0, throttled, throttled / 100)
        )
    for what, cond, values, scaled in conditions:
        seen = ~np.isnan(values)
        machine.known |= seen
        if _standing(cond & seen, seen & baseline):
            # Held all run long: the generator's own check (an alert) speaks for it, and
            # it would hide the sign that did come and go with the spikes.
            machine.standing.append(what)
            continue
        machine.short |= cond & seen
        machine.metric = np.fmax(machine.metric, scaled)
    return machine


@assessed(CAUSE_LOAD_MACHINE)
def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    """A load machine's cores saturated or its container throttled (any of them)."""
    cause = CAUSE_LOAD_MACHINE
    found = _machines(sig)
    check(bool(found), "no host data")
    machines = [m for m in (_signs(*f, baseline, sig.n) for f in found) if m is not None]
    check(
        bool(machines),
        "the load machine's host data has no cpu_per_core_pct or cgroup counters",
    )
    short = np.logical_or.reduce([m.short for m in machines])
    known = np.logical_or.reduce([m.known for m in machines])
    metric = np.fmax.reduce([m.metric for m in machines])
    holds = np.where(known, short.astype(float), np.nan)
    lag = components(sig).get("generator_lag")
    outside = components(sig).get("client_network")

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        # The machine short in most of the episodes speaks; the others short too are named.
        shares = [float(np.mean(m.short[ep])) if ep.any() else 0.0 for m in machines]
        top = machines[int(np.argmax(shares))]
        also = [m.name for m, share in zip(machines, shares, strict=True) if share and m is not top]
        name = top.name + (f", and {', '.join(also)}" if also else "")
        busy, throttled = top.busy, top.throttled
        out = [
            Evidence(
                "load_machine_short_of_cpu",
                float(np.mean(short[known])) if known.any() else None,
                "share of windows",
                name,
            )
        ]
        if busy is not None:
            out += [
                Evidence(
                    "load_machine_cores_at_95pct_in_episodes", mean(busy, ep), "share of cores"
                ),
                Evidence(
                    "load_machine_cores_at_95pct_baseline", median(busy, base), "share of cores"
                ),
            ]
        if throttled is not None:
            out += [
                Evidence(
                    "load_machine_throttled_periods_in_episodes",
                    mean(throttled, ep),
                    "% of periods",
                    top.cgroup_whose,
                ),
                Evidence(
                    "load_machine_throttled_periods_baseline",
                    median(throttled, base),
                    "% of periods",
                ),
            ]
        if lag is not None:
            out += [
                Evidence(
                    "generator_lag_in_episodes",
                    mean(lag, ep),
                    "ms",
                    "median corrected minus median service latency: sent late",
                ),
                Evidence("generator_lag_baseline", median(lag, base), "ms"),
            ]
        if sig.dispatch_lag_ms is not None:
            out += [
                Evidence(
                    "dispatch_lag_max_in_episodes",
                    maximum(sig.dispatch_lag_ms, ep),
                    "ms",
                    "the arrival scheduler's worst lateness",
                ),
                Evidence("dispatch_lag_baseline", median(sig.dispatch_lag_ms, base), "ms"),
            ]
        if outside is not None:
            out += [
                Evidence(
                    "client_network_in_episodes",
                    mean(outside, ep),
                    "ms",
                    "median service latency minus the server's time",
                ),
                Evidence("client_network_baseline", median(outside, base), "ms"),
            ]
        return out

    notes = [
        f"load machine{' ' + m.name if m.name else ''} {w} in most baseline windows: "
        "left to the generator check"
        for m in machines
        for w in m.standing
    ]
    return Signature(cause, holds, metric, evidence, notes=notes)


def _standing(cond: np.ndarray, baseline: np.ndarray) -> bool:
    """Whether a sign holds in most baseline windows (a load machine short all run long)."""
    return bool(baseline.any()) and float(np.mean(cond[baseline])) >= STANDING_SHARE


def _machine(e: list[Evidence]) -> str:
    """ "The load machine loadgen-1" (its name is the note of its share of windows)."""
    name = next((x.note for x in e if x.name == "load_machine_short_of_cpu"), "")
    return f"The load machine {name}" if name else "The load machine"


def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    throttled = ev(e, "load_machine_throttled_periods_in_episodes")
    cores = ev(e, "load_machine_cores_at_95pct_in_episodes")
    # Each sign that held in the spikes (both where neither did on average).
    capped = throttled is not None and throttled >= CGROUP_THROTTLED_FLOOR_PCT
    usual_cores = ev(e, "load_machine_cores_at_95pct_baseline")
    # Cores as busy in baseline as in the spikes are the run's, not the spikes' (a note says so).
    busy = (
        cores is not None
        and cores >= BUSY_CORES_SHARE
        and (usual_cores is None or usual_cores < BUSY_CORES_SHARE)
    )
    what = []
    if throttled is not None and (capped or not busy):
        what.append(
            f"its container throttled in {fmt(throttled)}% of CFS periods vs "
            f"{fmt(ev(e, 'load_machine_throttled_periods_baseline'))}% in baseline"
        )
    if cores is not None and (busy or not (capped or throttled is not None)):
        what.append(
            f"{fmt(100 * cores)}% of its cores at >=95% vs "
            f"{fmt(None if usual_cores is None else 100 * usual_cores)}% in baseline"
        )
    lag = ev(e, "generator_lag_in_episodes")
    late = (
        f"; requests were sent {fmt(lag, ' ms', 1)} late "
        f"(baseline {fmt(ev(e, 'generator_lag_baseline'), ' ms', 1)})"
        if lag is not None
        else ""
    )
    dispatch = ev(e, "dispatch_lag_max_in_episodes")
    if dispatch is not None:
        late += f", the scheduler up to {fmt(dispatch)} ms behind"
    outside = ev(e, "client_network_in_episodes")
    if outside is not None:
        late += (
            f"; client + network {fmt(outside, ' ms', 1)} "
            f"(baseline {fmt(ev(e, 'client_network_baseline'), ' ms', 1)})"
        )
    return (
        f"{_machine(e)} was short of CPU in {eps} ({'; '.join(what)}){late}. "
        "Part of this latency is the load generator's own, not the server's."
    )


CAUSE = Cause(
    id=CAUSE_LOAD_MACHINE,
    title="Load machine short of CPU",
    action="Give the load generator more CPU before judging the server: spread the load over "
    "more processes or machines (loadkit run --workers N, or --master with `loadkit worker` "
    "on other hosts), raise the load pod's CPU limit (limits.cpu), or lower the rate per "
    "process.",
    signature=signature,
    summary=summary,
    signal=("telemetry.cgroup_throttled_pct", "load machine's cgroup periods throttled (%)"),
    kind=EPISODIC,
    fault_events=("load-machine-quota",),
    client_series=("host", "host.process"),
)
