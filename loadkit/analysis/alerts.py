"""Alerts: P99 above a ceiling, the GPU idle under load, the GPU hot or at its slowdown temperature."""

from __future__ import annotations

import numpy as np

from loadkit.analysis import gpu_limits
from loadkit.analysis.episodes import hot_runs
from loadkit.analysis.model import Alert

P99_ALERT_MS = 80.0
GPU_IDLE_PCT = 20.0
GPU_IDLE_SUSTAINED_S = 30.0


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(first, last + 1) window index of each run of True."""
    return hot_runs(mask, merge_gap=0)


def _alert(
    name: str,
    severity: str,
    what: str,
    runs: list[tuple[int, int]],
    values: np.ndarray,
    starts_ns: np.ndarray,
    window_s: float,
    unit: str,
    peak_fn: str = "max",
) -> Alert:
    """One alert for all the spans where a condition held: first start, last end, worst value."""
    window_ns = int(round(window_s * 1e9))
    picked = np.concatenate([values[a:b] for a, b in runs])
    worst = float(np.nanmax(picked) if peak_fn == "max" else np.nanmean(picked))
    total_s = sum(b - a for a, b in runs) * window_s
    times = f"{len(runs)} times, " if len(runs) > 1 else ""
    message = f"{what.format(value=worst)} ({times}{total_s:.0f} s in all)"
    return Alert(
        name,
        severity,
        message,
        int(starts_ns[runs[0][0]]),
        int(starts_ns[runs[-1][1] - 1]) + window_ns,
        worst,
        unit,
    )


def alerts(
    starts_ns: np.ndarray,
    window_s: float,
    p99_ms: np.ndarray,
    gpu_util_pct: np.ndarray | None,
    gpu_temp_c: np.ndarray | None,
    offered_rps: np.ndarray,
    gpu_slowdown_c: np.ndarray | None = None,
) -> list[Alert]:
    """P99 above 80 ms, GPU idle under load for 30 s or more, GPU near or at its slowdown
    temperature (`gpu_slowdown_c`: the device's own per window, when recorded)."""
    out: list[Alert] = []

    def add(
        name: str,
        severity: str,
        what: str,
        flag: np.ndarray,
        values: np.ndarray,
        unit: str,
        min_windows: int = 1,
        peak_fn: str = "max",
    ) -> None:
        runs = [(a, b) for a, b in _runs(flag) if b - a >= min_windows]
        if runs:
            out.append(
                _alert(name, severity, what, runs, values, starts_ns, window_s, unit, peak_fn)
            )

    add(
        "p99_high",
        "critical",
        f"P99 reached {{value:.0f}} ms (> {P99_ALERT_MS:.0f} ms)",
        np.nan_to_num(p99_ms, nan=0.0) > P99_ALERT_MS,
        p99_ms,
        "ms",
    )
    if gpu_util_pct is not None and not np.all(np.isnan(gpu_util_pct)):
        low = (np.nan_to_num(gpu_util_pct, nan=100.0) < GPU_IDLE_PCT) & (
            np.nan_to_num(offered_rps) > 0
        )
        add(
            "gpu_underutilized",
            "warn",
            f"GPU utilization {{value:.0f}}% (< {GPU_IDLE_PCT:.0f}%) sustained under load",
            low,
            gpu_util_pct,
            "%",
            max(1, int(round(GPU_IDLE_SUSTAINED_S / window_s))),
            "mean",
        )
    if gpu_temp_c is not None and not np.all(np.isnan(gpu_temp_c)):
        temp = np.nan_to_num(gpu_temp_c, nan=0.0)
        slowdown = gpu_limits.slowdown_c(gpu_slowdown_c, len(temp))
        hot = gpu_limits.hot_c(gpu_slowdown_c, len(temp))
        whose = "the device's own" if gpu_limits.recorded(gpu_slowdown_c) else "a typical GPU's"
        at = float(np.nanmin(slowdown))
        add(
            "gpu_temp_throttling",
            "critical",
            f"GPU temperature reached {{value:.0f}} °C (>= {at:.0f} °C, {whose} slowdown"
            " temperature: the clocks drop)",
            temp >= slowdown,
            gpu_temp_c,
            "°C",
        )
        add(
            "gpu_temp_high",
            "warn",
            f"GPU temperature reached {{value:.0f}} °C (>= {at - gpu_limits.HOT_MARGIN_C:.0f} °C,"
            f" within {gpu_limits.HOT_MARGIN_C:.0f} °C of {whose} slowdown temperature)",
            temp >= hot,
            gpu_temp_c,
            "°C",
        )
    out.sort(key=lambda a: (a.severity != "critical", a.start_ns or 0))
    return out


__all__ = ["alerts"]
