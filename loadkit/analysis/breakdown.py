"""Where the time goes, per window: generator lag, client + network, server queue, server compute.

- generator lag = corrected P50 - service P50: the request was sent late (the
  load generator fell behind its schedule);
- client + network = service P50 - Triton's request time per request
  (success_ns / success_count): the time outside the server;
- server queue and server compute (input + infer + output per request) from
  Triton's statistics.

Percentiles of the client and means of the server mix, so the parts are a
direction, not an exact sum: what matters is which one grows in an episode.
Without Triton statistics the server and the network are one part
(`server_side` = service P50), and the generator lag still says whether the
client fell behind.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loadkit.analysis.causes.base import LABELS, Signals, components, median
from loadkit.analysis.model import LatencyBreakdown, LatencyComponent, Series, SpikeEpisode

# Compute per request this much over its baseline: a queue growing with it waits behind it.
QUEUE_BEHIND_COMPUTE = 1.3


def episode_mask(e: SpikeEpisode, starts_ns: np.ndarray) -> np.ndarray:
    return (starts_ns >= e.start_ns) & (starts_ns < e.end_ns)


def baseline_medians(parts: dict[str, np.ndarray], baseline: np.ndarray) -> dict[str, float | None]:
    """Each component's median over the baseline windows (the same for every episode)."""
    return {name: median(values, baseline) for name, values in parts.items()}


def growth(
    parts: dict[str, np.ndarray],
    mask: np.ndarray,
    baseline: np.ndarray,
    medians: dict[str, float | None] | None = None,
) -> tuple[str | None, float | None]:
    """The component that grew most in `mask` over its baseline median, and by how much (ms).

    `medians`: `baseline_medians(parts, baseline)`, computed once when labelling
    many episodes (a median of ~86,000 windows per component per episode took
    10 s of a 24 h run's analysis).
    """
    if medians is None:
        medians = baseline_medians(parts, baseline)
    best: tuple[str | None, float | None] = (None, None)
    ratios: dict[str, float] = {}
    excesses: dict[str, float] = {}
    for name, values in parts.items():
        sel = values[mask]
        sel = sel[~np.isnan(sel)]
        base = medians[name]
        if not sel.size or base is None:
            continue
        excess = float(sel.mean()) - base
        excesses[name] = excess
        ratios[name] = float(sel.mean()) / base if base > 0 else float("inf")
        if best[1] is None or excess > best[1]:
            best = (name, excess)
    # A queue grows behind slower compute: at the same arrivals the compute is the origin.
    if best[0] == "server_queue" and ratios.get("server_compute", 0.0) >= QUEUE_BEHIND_COMPUTE:
        return "server_compute", excesses["server_compute"]
    return best


def breakdown(sig: Signals, baseline: np.ndarray) -> tuple[LatencyBreakdown, dict[str, np.ndarray]]:
    parts = components(sig)
    out = []
    for name, values in parts.items():
        series: Series = tuple(None if not np.isfinite(v) else round(float(v), 4) for v in values)
        out.append(LatencyComponent(name, LABELS[name], series, median(values, baseline)))
    source = "triton statistics" if sig.triton is not None else "client only"
    return LatencyBreakdown(tuple(out), source), parts


def label_episodes(
    episodes: Sequence[SpikeEpisode],
    parts: dict[str, np.ndarray],
    starts_ns: np.ndarray,
    baseline: np.ndarray,
) -> dict[str, tuple[str | None, float | None]]:
    """Per episode id: the component that grew most, and by how much."""
    medians = baseline_medians(parts, baseline)
    return {
        e.episode_id: growth(parts, episode_mask(e, starts_ns), baseline, medians) for e in episodes
    }
