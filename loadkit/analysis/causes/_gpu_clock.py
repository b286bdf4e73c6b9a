"""The GPU clock-drop signature shared by the thermal, power-cap and other-clock causes.

Busy SM clock under 80 % of max, or a shallower fall beyond the run's own
baseline spread where a reason (bit or reading) names it, split by the
clocks-event reason bits (or, without bits, by temperature and power
readings) into the three causes.
"""

from __future__ import annotations

import numpy as np

from loadkit.analysis import gpu_limits
from loadkit.analysis.causes.base import (
    CLOCK_DROP_RATIO,
    POWER_AT_LIMIT,
    REASON_SHARE,
    Shading,
    Signals,
    Signature,
    SummaryFn,
    compute_inflation,
    ev,
    flag,
    fmt,
    maximum,
    mean,
    median,
    na,
)
from loadkit.analysis.model import (
    CAUSE_GPU_CLOCK_OTHER,
    CAUSE_GPU_POWER,
    CAUSE_GPU_THERMAL,
    Evidence,
)
from loadkit.analysis.noise import above_spread
from loadkit.analysis.telemetry import GpuSeries

# Full-clock windows needed to fit compute per batch at full clock (else the baseline).
MIN_REFERENCE_WINDOWS = 10
SIGNAL = ("telemetry.gpu_sm_clock_mhz", "SM clock (MHz)")
# A shallow drop: the clock's slowdown (max / busy clock) clears its baseline's spread and
# is at least this many times its baseline median, i.e. the clock fell >= 5 % below where
# the run's baseline held it. A power cap at 60-95 % of the board's power takes 5-20 % off
# the clock; under CLOCK_DROP_RATIO alone those drops counted as none.
SHALLOW_DROP_FLOOR = 1.0 / 0.95


def shallow_drop(gpu: GpuSeries, baseline: np.ndarray | None = None) -> np.ndarray:
    """Per window: the busy clock fell beyond its baseline's spread (`noise.above_spread`).

    `baseline`: the windows to judge against (attribution's); None: every window with
    a busy clock (the timelines): a drop in a minority of windows leaves the median
    and its spread where the clock usually is.
    """
    ratio = gpu.clock_ratio_busy
    with np.errstate(invalid="ignore", divide="ignore"):
        slowdown = np.where(ratio > 0, 1.0 / ratio, np.nan)
    reference = ~np.isnan(slowdown) if baseline is None else baseline
    spread = above_spread(slowdown, reference, SHALLOW_DROP_FLOOR)
    if spread is None:
        return np.zeros(len(ratio), dtype=bool)
    return np.nan_to_num(spread, nan=0.0) > 0


def throttle_classes(gpu: GpuSeries, baseline: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per window: thermal, power-cap or other clock throttling (exclusive).

    All three need a clock drop: a reason bit with the clock holding throttles
    nothing. A drop is a busy SM clock under CLOCK_DROP_RATIO of max, or, for a
    thermal or power drop, a shallower fall beyond the clock's own baseline
    spread (`shallow_drop`; "other" keeps the deep drop only: GPU Boost moves the
    clock by a few percent with no reason at all). The drop is thermal or
    power where ≥ REASON_SHARE of the busy samples carry that reason bit (thermal
    where its share is at least power's) or,
    without bits, where the GPU is hot (`gpu_limits.hot_c`: near its own slowdown
    temperature) or one GPU draws ≥ POWER_AT_LIMIT of its own limit (`power_of_limit`:
    the GPU with the lowest clock, never the sums); "other" with neither. The one rule
    for attribution and timelines.
    """
    deep = np.nan_to_num(gpu.clock_ratio_busy, nan=1.0) < CLOCK_DROP_RATIO
    drop = deep | shallow_drop(gpu, baseline)
    if gpu.has_reasons:
        thermal_share = np.nan_to_num(gpu.thermal_reason, nan=0.0)
        power_share = np.nan_to_num(gpu.power_reason, nan=0.0)
        thermal = (thermal_share >= REASON_SHARE) & (thermal_share >= power_share)
        power = power_share >= REASON_SHARE
    else:  # no reason bits: fall back to readings
        thermal = np.nan_to_num(gpu.temp_c, nan=0.0) >= gpu_limits.hot_c(
            gpu.temp_slowdown_c, len(gpu.temp_c)
        )
        share = gpu.power_of_limit
        if share is None:  # older series: the GPUs' sums
            with np.errstate(invalid="ignore", divide="ignore"):
                share = gpu.power_w / gpu.power_limit_w
        power = np.nan_to_num(share, nan=0.0) >= POWER_AT_LIMIT
    return {
        CAUSE_GPU_THERMAL: drop & thermal,
        CAUSE_GPU_POWER: drop & power & ~thermal,
        CAUSE_GPU_CLOCK_OTHER: deep & ~thermal & ~power,
    }


def clock_signature(cause: str, sig: Signals, baseline: np.ndarray) -> Signature:
    """The signature of one of the three clock causes."""
    gpu = sig.gpu
    if gpu is None:
        return na(cause, "not assessable: no gpu data")
    ratio = gpu.clock_ratio_busy
    if np.all(np.isnan(ratio)):
        return na(cause, "not assessable: gpu data has no sm_clock_mhz/sm_clock_max_mhz")
    kinds = throttle_classes(gpu, baseline)
    drop = kinds[CAUSE_GPU_THERMAL] | kinds[CAUSE_GPU_POWER] | kinds[CAUSE_GPU_CLOCK_OTHER]
    # What compute per batch would be at full clock, from the windows at full clock: they
    # span more batch sizes than the baseline (a sawtooth leaves few baseline windows, all
    # at the calm batch size, and a slope fitted there was extrapolated to the throttled
    # windows' larger batches: x1.15 observed against x1.65 predicted in a demo run).
    fell = (np.nan_to_num(ratio, nan=1.0) < CLOCK_DROP_RATIO) | shallow_drop(gpu, baseline)
    full = ~fell & ~np.isnan(ratio)
    inflation = compute_inflation(sig, full if full.sum() >= MIN_REFERENCE_WINDOWS else baseline)
    metric = 1.0 - ratio

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        clock_ep = mean(gpu.sm_clock_mhz, ep & drop)
        clock_max = maximum(gpu.sm_clock_max_mhz, ep | base)
        r = mean(ratio, ep & drop)
        out = [
            Evidence("sm_clock_in_episodes", clock_ep, "MHz", "mean while busy"),
            Evidence("sm_clock_baseline", mean(gpu.sm_clock_mhz, base), "MHz"),
            Evidence("sm_clock_max", clock_max, "MHz"),
            Evidence("clock_ratio_in_episodes", r, "x max"),
            Evidence(
                "compute_inflation_predicted", 1.0 / r if r else None, "x", "max / current clock"
            ),
        ]
        if inflation is not None:
            out.append(
                Evidence(
                    "compute_inflation_observed",
                    median(inflation, ep & drop),
                    "x",
                    "Triton compute per batch vs full-clock windows at the same batch size",
                )
            )
        out += [
            Evidence("temp_max_in_episodes", maximum(gpu.temp_c, ep), "°C"),
            Evidence("temp_baseline", median(gpu.temp_c, base), "°C"),
            Evidence("thermal_reason_share", mean(gpu.thermal_reason, ep & drop), "of samples"),
            Evidence("power_in_episodes", mean(gpu.power_w, ep & drop), "W"),
            Evidence("power_limit", maximum(gpu.power_limit_w, ep | base), "W"),
            Evidence("power_cap_reason_share", mean(gpu.power_reason, ep & drop), "of samples"),
        ]
        return out

    return Signature(cause, flag(kinds[cause], ratio), metric, evidence)


def clock_summary(what: str) -> SummaryFn:
    """The summary sentence of a clock cause ("thermal throttling", "a clock drop", ...)."""

    def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
        return (
            f"SM clock fell to {fmt(ev(e, 'sm_clock_in_episodes'))} of {fmt(ev(e, 'sm_clock_max'))} MHz "
            f"({what}, max temp {fmt(ev(e, 'temp_max_in_episodes'))} °C) in {eps}; "
            f"compute per batch x{fmt(ev(e, 'compute_inflation_observed'), '', 2)} "
            f"(clock predicts x{fmt(ev(e, 'compute_inflation_predicted'), '', 2)})."
        )

    return summary


def clock_shading(cause: str, kind: str, what: str) -> Shading:
    """The timeline spans of one clock cause: its windows by `throttle_classes`, labelled `what`."""

    def windows(gpu: GpuSeries) -> np.ndarray:
        return throttle_classes(gpu)[cause]

    def label(gpu: GpuSeries, first: int, stop: int) -> str:
        ratio = gpu.clock_ratio_busy[first:stop]
        if np.isfinite(ratio).any():
            return f"{what}: busy SM clock {100 * float(np.nanmin(ratio)):.0f} % of max at lowest"
        return what

    return Shading(kind, "gpu", windows, label)
