"""Intended arrival times for an open-model run: a pure, seeded iterator.

Arrivals come from time-rescaling: with Λ(t) = ∫0^t r(s) ds, the k-th
arrival is at Λ⁻¹(u_k), where u_k = k + 0.5 for constant spacing and the
cumulative sum of Exp(1) draws (seeded) for Poisson spacing. So the count of
arrivals in any second matches ∫ r over that second (exactly, up to ±1, for
constant spacing; in expectation for Poisson), whatever the shape.

**Several generator processes** (`--workers N`): every process computes the
same global sequence and worker i keeps arrivals k with k % N == i. The union
of the workers' arrivals is exactly the single-process sequence, so a run's
offered load does not depend on how many workers carried it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import numpy as np

from loadkit.errors import UsageError
from loadkit.load.shapes import Shape

Spacing = Literal["constant", "poisson"]
SPACINGS: tuple[str, ...] = ("constant", "poisson")

# Integration step for Λ(t); a rate is assumed constant within one step.
DEFAULT_STEP_S = 0.001
_POISSON_BLOCK = 4096


def _unit_marks(spacing: str, seed: int) -> Iterator[float]:
    """u_0 < u_1 < ...: arrival marks of a unit-rate process."""
    if spacing == "constant":
        k = 0
        while True:
            yield k + 0.5
            k += 1
    elif spacing == "poisson":
        rng = np.random.default_rng(seed)
        total = 0.0
        while True:
            for gap in rng.exponential(1.0, _POISSON_BLOCK):
                total += float(gap)
                yield total
    else:
        raise UsageError(
            f"unknown arrival spacing {spacing!r}", hint=f"use one of: {', '.join(SPACINGS)}"
        )


def _invert(shape: Shape, marks: Iterator[float], step_s: float) -> Iterator[float]:
    """Map unit marks through Λ⁻¹ by walking t forward in `step_s` steps."""
    t = 0.0
    cum = 0.0  # Λ(t)
    mark = next(marks)
    while t < (duration := shape.end_s()):  # a steered shape's end may come sooner
        t_next = min(t + step_s, duration)
        rate = shape.rate_at((t + t_next) / 2)
        cum_next = cum + rate * (t_next - t)
        while mark < cum_next:
            # rate > 0 here (cum_next > cum since mark >= cum).
            yield t + (mark - cum) / rate
            mark = next(marks)
        t, cum = t_next, cum_next


def arrival_times(
    shape: Shape,
    *,
    spacing: str = "constant",
    seed: int = 0,
    worker_index: int = 0,
    worker_count: int = 1,
    step_s: float = DEFAULT_STEP_S,
) -> Iterator[float]:
    """Intended send times (seconds from the start) of this worker's arrivals, ascending.

    Shapes with explicit arrivals (timestamp traces) are replayed as they are;
    `spacing` and `seed` do not apply to them.
    """
    if worker_count < 1 or not 0 <= worker_index < worker_count:
        raise UsageError(f"bad worker split {worker_index}/{worker_count}")
    if spacing not in SPACINGS:
        raise UsageError(
            f"unknown arrival spacing {spacing!r}", hint=f"use one of: {', '.join(SPACINGS)}"
        )
    explicit = shape.explicit_arrivals()
    source: Iterator[float]
    if explicit is not None:
        source = iter(explicit)
    else:
        source = _invert(shape, _unit_marks(spacing, seed), step_s)
    for k, t in enumerate(source):
        if k % worker_count == worker_index:
            yield t


def counts_per_second(times: Iterator[float] | list[float], duration_s: float) -> list[int]:
    """Arrivals in each whole second [i, i+1) of a run (for tests and reports)."""
    counts = [0] * int(np.ceil(duration_s))
    for t in times:
        i = int(t)
        if 0 <= i < len(counts):
            counts[i] += 1
    return counts
