"""Unexplained slowdowns: no cause matched, but the latency part that grew is named.

When the spike episodes that no other cause explains show one component of
the latency growing (`loadkit/analysis/breakdown.py`), the finding says which,
by how much, and that the signals of the other causes did not move, so the
reader knows where to look: "unexplained compute slowdown: compute per batch
x1.9 in 6/6 episodes, with no change in GPU clock, CPU, cgroup quota or batch
size". Attribution scores these only on the episodes no other found cause explains.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loadkit.analysis.causes.base import (
    BUSY_CORES_SHARE,
    COMPUTE_INFLATION,
    GROWTH_RATIO,
    UNEXPLAINED,
    Cause,
    Signals,
    Signature,
    SignatureFn,
    SummaryFn,
    busy_cores,
    components,
    compute_inflation,
    ev,
    flag,
    fmt,
    material,
    mean,
    median,
    na,
)
from loadkit.analysis.model import Evidence
from loadkit.analysis.noise import EFFECT_MOVED, MAD_TO_SIGMA, SPREAD_SIGMAS, moved

# other parts: at least GROWTH_RATIO (causes/base.py) times their baseline ...
GROWTH_MIN_MS = 1.0  # ... and 1 ms more
SERVER_SIDE_RATIO = 1.5

CAUSE_COMPUTE = "unexplained_compute_slowdown"
CAUSE_QUEUE = "unexplained_queue_growth"
CAUSE_CLIENT_NETWORK = "unexplained_client_network_slowdown"
CAUSE_GENERATOR = "unexplained_generator_lag"
CAUSE_SERVER_SIDE = "unexplained_server_side_slowdown"


# The other causes' signals the residual reports on: (name in the text, evidence prefix).
_CONTEXT = (
    ("GPU clock", "gpu_clock_ratio"),
    ("CPU", "cpu_mean"),
    ("cgroup quota", "cgroup_throttled"),
    ("batch size", "batch_size"),
    ("arrivals", "offered"),
    ("other models' load", "other_models_compute"),
)
# Said only where measured: a server with one model has no other models' load to deny.
_SILENT_WHEN_UNKNOWN = frozenset({"other_models_compute"})
# Series that count as a name's too: "CPU" is the host's mean busy %, its share of busy
# cores and the server's run delay (a neighbour on some cores shows in the last two only).
_ALSO = {"cpu_mean": ("cpu_busy_cores", "cpu_run_delay")}
# A signal moved in one episode when at least this share of the episode's windows lie
# beyond its baseline's spread (median +- SPREAD_SIGMAS robust sigmas, the sigma at least
# SPREAD_FLOOR of the median): a quota that binds in half of a spike's windows moved there,
# while three windows of a noisy series reach a Cliff's delta of 0.33 by chance about one
# time in three.
EPISODE_MOVED_SHARE = 0.5
SPREAD_FLOOR = 0.05


def _beyond_spread(values: np.ndarray, baseline: np.ndarray) -> np.ndarray | None:
    """Per window: 1 beyond the baseline's spread (either side), 0 within, NaN unknown."""
    ref = values[baseline]
    ref = ref[~np.isnan(ref)]
    if ref.size < 3:
        return None
    med = float(np.median(ref))
    sigma = max(MAD_TO_SIGMA * float(np.median(np.abs(ref - med))), SPREAD_FLOOR * abs(med))
    return flag(np.abs(np.nan_to_num(values, nan=med) - med) > SPREAD_SIGMAS * sigma, values)


def _moved_in(beyond: np.ndarray | None, episode: np.ndarray) -> bool:
    if beyond is None:
        return False
    seen = beyond[episode]
    seen = seen[~np.isnan(seen)]
    return bool(seen.size) and float(seen.mean()) >= EPISODE_MOVED_SHARE


def _context_series(sig: Signals) -> dict[str, tuple[np.ndarray, str]]:
    out: dict[str, tuple[np.ndarray, str]] = {}
    if sig.gpu is not None:
        out["gpu_clock_ratio"] = (sig.gpu.clock_ratio_busy, "x max")
    if sig.host is not None:
        out["cpu_mean"] = (sig.host.cpu_mean_pct, "%")
        busy = busy_cores(sig)
        if busy is not None and sig.host.has_per_core:
            out["cpu_busy_cores"] = (busy, "share of cores at >= 95%")
        delay = sig.host.server_run_delay_ms_per_s
        if delay is not None and not np.all(np.isnan(delay)):
            out["cpu_run_delay"] = (delay, "ms/s")
        if sig.host.has_cgroup:
            out["cgroup_throttled"] = (sig.host.cgroup_throttled_pct, "% of periods")
    if sig.triton is not None:
        out["batch_size"] = (sig.triton.batch_size_mean, "requests")
    out["offered"] = (sig.offered_rps, "req/s")
    if sig.triton is not None and sig.triton.others:
        # The server's statistics of its other models: their compute per second (a
        # neighbour's burst is a change the residual must not deny).
        busy = np.nansum([o.compute_ms_per_s for o in sig.triton.others.values()], axis=0)
        out["other_models_compute"] = (busy, "ms/s")
    return out


def _per_episode(sig: Signals) -> Callable[[list[np.ndarray], np.ndarray], list[Evidence]]:
    """Each context signal judged episode by episode: in how many of them it moved.

    Pooled over all episodes, a quota that fired in 2 of 6 reads "no change"; each
    episode's own windows against the baseline windows say where it moved.
    """

    def evidence(episodes: list[np.ndarray], base: np.ndarray) -> list[Evidence]:
        series = _context_series(sig)
        out = [Evidence("episodes_judged", float(len(episodes)), "episodes")]
        for _, prefix in _CONTEXT:
            parts = [p for p in (prefix, *_ALSO.get(prefix, ())) if p in series]
            if not parts:
                continue
            beyond = [_beyond_spread(series[p][0], base) for p in parts]
            hits = sum(any(_moved_in(b, ep) for b in beyond) for ep in episodes)
            out.append(
                Evidence(
                    f"{prefix}_moved_episodes",
                    float(hits),
                    "episodes",
                    f"of {len(episodes)}: {', '.join(parts)} beyond the baseline's spread in "
                    f">= {EPISODE_MOVED_SHARE:.0%} of the episode's windows",
                )
            )
        return out

    return evidence


def _context(sig: Signals, ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
    """The other causes' signals in the episodes and baseline, and how far each moved.

    "Moved" is judged against the same series in the run's baseline windows
    (Cliff's delta, loadkit/analysis/noise.py), never by a fixed tolerance: a CPU
    quota that lowers the host's CPU by a few points is a change in CPU.
    """
    out: list[Evidence] = []
    for prefix, (values, unit) in _context_series(sig).items():
        out += [
            Evidence(f"{prefix}_in_episodes", mean(values, ep), unit),
            Evidence(f"{prefix}_baseline", median(values, base), unit),
            Evidence(
                f"{prefix}_moved",
                moved(values, ep, base),
                "Cliff's d",
                "episode windows against baseline windows",
            ),
        ]
    return out


def _unchanged(e: list[Evidence], controlled: tuple[str, ...] = ()) -> str:
    """ "no change in GPU clock, arrivals (moved too: cgroup quota in 2/6 episodes)".

    Judged episode by episode where the evidence has it (`_per_episode`); a signal
    that moved over all the episodes pooled but in none alone still moved. "CPU"
    moved when the host's CPU, its busy cores or the server's run delay did.
    `controlled`: names the finding already holds fixed (the compute residual compares
    at the same batch size: batches that grow behind a slower model are no other change).
    """
    judged = ev(e, "episodes_judged")
    same, changed, unknown = [], [], []
    for name, prefix in _CONTEXT:
        if name in controlled:
            continue
        deltas = [ev(e, f"{p}_moved") for p in (prefix, *_ALSO.get(prefix, ()))]
        known = [d for d in deltas if d is not None]
        hits = ev(e, f"{prefix}_moved_episodes")
        if not known and prefix in _SILENT_WHEN_UNKNOWN:
            continue
        if not known:
            unknown.append(name)
        elif hits:
            changed.append(f"{name} in {hits:.0f}/{judged:.0f} episodes")
        elif any(abs(d) >= EFFECT_MOVED for d in known):
            changed.append(name)
        else:
            same.append(name)
    text = f"no change in {', '.join(same)}" if same else "other signals changed too"
    if changed:
        text += f" (moved{' too' if same else ''}: {', '.join(changed)})"
    if unknown:
        text += f" ({', '.join(unknown)} not measured)"
    return text


def _growing(
    values: np.ndarray, baseline: np.ndarray, ratio: float
) -> tuple[np.ndarray, float | None]:
    base = median(values, baseline)
    if base is None:
        return np.full(len(values), np.nan), None
    cond = (np.nan_to_num(values, nan=0.0) >= ratio * base) & (
        np.nan_to_num(values, nan=0.0) >= base + GROWTH_MIN_MS
    )
    return flag(cond, values), base


def compute_signature(sig: Signals, baseline: np.ndarray) -> Signature:
    inflation = compute_inflation(sig, baseline)
    if inflation is None:
        why = (
            "no triton_stats data (compute per batch)"
            if sig.triton is None
            else "fewer than 3 baseline windows with Triton statistics to fit compute per batch"
        )
        return na(CAUSE_COMPUTE, f"not assessable: {why}")
    # Slower by a share of the tail that matters: x1.3 of a 0.3 ms compute under a 2 ms P99
    # is host noise, not where a P99 spike's milliseconds went.
    assert sig.triton is not None
    compute = sig.triton.batch_compute_ms
    with np.errstate(invalid="ignore", divide="ignore"):
        excess_ms = compute - compute / inflation
    slower = np.nan_to_num(inflation, nan=0.0) >= COMPUTE_INFLATION
    holds = flag(slower & material(excess_ms, sig.p99_ms, baseline), inflation)
    # On saturated cores a model's compute slows with the host (a CPU-bound
    # backend, or the threads that feed the accelerator): where the windows
    # that show the slowdown had their cores saturated, it cannot be told from
    # CPU contention, so it stays a weak lead.
    cap, notes = None, []
    busy = busy_cores(sig)
    slow = np.nan_to_num(holds, nan=0.0) > 0
    saturated = median(busy, slow) if busy is not None and slow.any() else None
    if saturated is not None and saturated >= BUSY_CORES_SHARE:
        cap = "weak"
        notes.append(
            f"the host's cores were saturated where compute slowed ({saturated:.0%} of cores at "
            ">=95%): on a busy host the model's compute slows with the CPU, so this cannot be "
            "told from CPU contention"
        )

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        assert sig.triton is not None
        return [
            Evidence(
                "compute_inflation_in_episodes",
                median(inflation, ep & (holds > 0)),
                "x",
                "compute per batch vs baseline at the same batch size",
            ),
            Evidence("compute_per_batch_in_episodes", mean(sig.triton.batch_compute_ms, ep), "ms"),
            Evidence("compute_per_batch_baseline", median(sig.triton.batch_compute_ms, base), "ms"),
            *_context(sig, ep, base),
        ]

    return Signature(
        CAUSE_COMPUTE,
        holds,
        inflation,
        evidence,
        notes=notes,
        max_confidence=cap,
        per_episode=_per_episode(sig),
    )


def _component_signature(
    cause: str, part: str, ratio: float, cap: str | None = "weak"
) -> SignatureFn:
    def signature(sig: Signals, baseline: np.ndarray) -> Signature:
        parts = components(sig)
        if part not in parts:
            why = {
                "server_side": "not assessable here: Triton statistics split the server side",
            }.get(part, "not assessable: no triton_stats data")
            return na(cause, why)
        values = parts[part]
        holds, base = _growing(values, baseline, ratio)
        if base is None:
            return na(cause, f"not assessable: no {part} in baseline windows")
        if part == "server_queue":
            infl = compute_inflation(sig, baseline)
            if infl is not None:  # queueing behind slow compute is the compute's
                holds[np.nan_to_num(infl, nan=0.0) >= COMPUTE_INFLATION] = 0.0

        def evidence(ep: np.ndarray, base_mask: np.ndarray) -> list[Evidence]:
            return [
                Evidence("component_in_episodes", mean(values, ep), "ms", part),
                Evidence("component_baseline", base, "ms"),
                *_context(sig, ep, base_mask),
            ]

        # Queue, generator lag and service times also grow from ordinary queueing noise
        # near capacity; compute per batch at the same batch size does not, nor does the
        # time outside the server (`cap`): those earn their confidence like any cause.
        return Signature(
            cause, holds, values, evidence, max_confidence=cap, per_episode=_per_episode(sig)
        )

    return signature


def _summary(what: str, where: str) -> SummaryFn:
    def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
        inflation = ev(e, "compute_inflation_in_episodes")
        controlled: tuple[str, ...] = ()
        if inflation is not None:
            grew = f"compute per batch x{fmt(inflation, '', 1)} at the same batch size"
            controlled = ("batch size",)
        else:
            grew = (
                f"{what} {fmt(ev(e, 'component_in_episodes'), ' ms', 1)} vs "
                f"{fmt(ev(e, 'component_baseline'), ' ms', 1)} baseline"
            )
        return f"{grew} in {eps}, with {_unchanged(e, controlled)}; {where}."

    return summary


COMPUTE = Cause(
    id=CAUSE_COMPUTE,
    component="server_compute",
    title="Unexplained compute slowdown",
    action="Profile the model itself: GC or allocator pauses, data-dependent work (input sizes, "
    "early exits), I/O or locks in the model code, another process sharing the accelerator; "
    "compare compute per batch by batch size in Triton's statistics.",
    signature=compute_signature,
    summary=_summary("compute", "the model itself slows (GC, data-dependent work, I/O)"),
    signal=("telemetry.compute_ms_per_execution", "compute per batch (ms)"),
    kind=UNEXPLAINED,
    fault_events=("model-slowdown",),
)


def _component_cause(
    cause: str,
    part: str,
    title: str,
    action: str,
    grew: tuple[str, str],
    ratio: float = GROWTH_RATIO,
    signal: tuple[str, str] | None = None,
    fault_events: tuple[str, ...] = (),
    cap: str | None = "weak",
) -> Cause:
    """The fallback cause naming one latency component (`part`) that grew; `grew`: (what, where).

    `cap`: the highest confidence it may reach (None: as its evidence earns).
    """
    return Cause(
        id=cause,
        component=part,
        title=title,
        action=action,
        signature=_component_signature(cause, part, ratio, cap),
        summary=_summary(*grew),
        signal=signal,
        kind=UNEXPLAINED,
        fault_events=fault_events,
    )


QUEUE = _component_cause(
    CAUSE_QUEUE,
    "server_queue",
    "Unexplained server queue growth",
    "Requests wait longer in Triton's queue while arrivals and compute per batch stay "
    "the same: check instance_group count, other models sharing the GPU or instances, and "
    "the scheduler's settings (priorities, queue policy).",
    ("queue time", "requests wait in the server's queue"),
    signal=("telemetry.queue_ms_per_request", "queue time per request (ms)"),
)
CLIENT_NETWORK = _component_cause(
    CAUSE_CLIENT_NETWORK,
    "client_network",
    "Unexplained client or network slowdown",
    "The time goes outside the server (client, network, proxies): check the client "
    "host (CPU, GC pauses), the network path and load balancers, and connection setup.",
    ("client + network time", "the time goes outside the server"),
    fault_events=("slow-path",),
    # A localisation with evidence, not a shrug: the time outside the server does not
    # grow from the server's own queueing, so it earns its confidence like any cause
    # (and ranks after a specific cause of the same episodes, `rank_findings`).
    cap=None,
)
GENERATOR = _component_cause(
    CAUSE_GENERATOR,
    "generator_lag",
    "Load generator fell behind",
    "The generator sent requests late: its results in these windows understate load. "
    "Give it more CPU or more processes (loadkit run --workers N), or lower the rate per process.",
    ("generator lag", "the client side (load generator) fell behind its schedule"),
)
SERVER_SIDE = _component_cause(
    CAUSE_SERVER_SIDE,
    "server_side",
    "Unexplained server-side slowdown",
    "The service time grew while the generator kept its schedule: the server or the "
    "network. Record Triton's statistics (loadkit run records them from the target) to split "
    "queue from compute.",
    ("service time", "server or network side (no server statistics to split)"),
    ratio=SERVER_SIDE_RATIO,
)
CAUSES = (COMPUTE, QUEUE, CLIENT_NETWORK, GENERATOR, SERVER_SIDE)
