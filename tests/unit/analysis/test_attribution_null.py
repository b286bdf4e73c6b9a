"""The episode-level null: a signature is compared with stretches of the run of the episodes' shape.

An episode of k windows and its lead has k + LEAD_WINDOWS chances to hold a
signature; a single baseline window has one. A signature that holds in 10 % of
windows at random is found in most 8-window episodes, so comparing against single
windows called an unrelated condition "moderate" (issue 51).
"""

import numpy as np
import pytest

from loadkit.analysis import attribution
from loadkit.analysis.causes.base import Signals
from loadkit.analysis.model import CauseCheck, SpikeEpisode

RUN_WINDOWS = 600
EPISODES = 8
SEEDS = 100


def _run(
    seed: int, episode_windows: int, tied: bool, background: float = 0.1
) -> tuple[attribution.Finding | None, CauseCheck]:
    """A run of 1 s windows with EPISODES spikes of `episode_windows`, a signature scored on it.

    It holds in `background` of windows at random, its metric unmoved by the spikes;
    `tied`: also through every episode (a fault that raised them), its metric up there.
    """
    rng = np.random.default_rng(seed)
    n = RUN_WINDOWS
    starts = np.arange(n, dtype=np.int64) * 1_000_000_000
    ones = np.ones(n)
    sig = Signals(1.0, starts, 5 * ones, 4 * ones, 100 * ones, 100 * ones, 100 * ones, ones, {},
                  None, 8, 2.0, np.zeros(n, bool))  # fmt: skip
    gap = n // EPISODES
    ats = [k * gap + int(rng.integers(5, gap - episode_windows - 5)) for k in range(EPISODES)]
    holds = (rng.random(n) < background).astype(float)
    if tied:
        for at in ats:
            holds[at : at + episode_windows] = 1.0
    metric = holds + rng.random(n)  # a signature is its metric over a threshold
    episodes = []
    for k, at in enumerate(ats):
        start, end = int(starts[at]), int(starts[at + episode_windows])
        episodes.append(
            SpikeEpisode(f"p99#{k + 1}", "p99", "corrected", start, end, at, episode_windows,
                         start, 20.0, 5.0, 15.0, 15.0, 4.0, 10.0, episode_windows)
        )  # fmt: skip
    baseline = attribution.baseline_mask(n, episodes, starts)
    finding, check, _ = attribution.score(
        attribution.Signature("cpu_saturation", holds, metric), episodes, sig, baseline
    )
    return finding, check


def _level(scored: tuple[attribution.Finding | None, CauseCheck]) -> str:
    return scored[0].confidence if scored[0] is not None else "not found"


@pytest.mark.parametrize("episode_windows", [4, 8])
def test_a_signature_unrelated_to_the_spikes_is_weak_or_not_found(episode_windows):
    # GIVEN a signature in 10 % of windows at random, 8 spike episodes that stand out (4x):
    # by chance it holds somewhere in most 10-window stretches
    levels = [_level(_run(seed, episode_windows, tied=False)) for seed in range(SEEDS)]
    # THEN it is weak or not found in at least 95 % of seeds
    calm = sum(level in ("weak", "not found") for level in levels)
    assert calm >= 0.95 * SEEDS, levels


@pytest.mark.parametrize("episode_windows", [4, 8])
def test_a_signature_tied_to_the_spikes_is_moderate_or_strong(episode_windows):
    # GIVEN a signature in 5 % of windows at random, and through every episode
    levels = [_level(_run(seed, episode_windows, True, 0.05)) for seed in range(SEEDS)]
    # THEN it is found above weak in every seed
    assert all(level in ("moderate", "strong") for level in levels), levels


def test_a_tied_signature_common_all_run_is_still_a_lead():
    # GIVEN it in 10 % of windows and through every 8-window episode: 65 % of same-length
    # stretches hold it by chance, so 8 of 8 episodes is no proof, but its metric moved
    levels = [_level(_run(seed, 8, tied=True)) for seed in range(SEEDS)]
    # THEN it is never lost
    assert "not found" not in levels, levels


def test_the_finding_says_what_it_was_compared_with():
    finding, check = _run(0, 8, tied=True)
    assert finding is not None
    # the rate is of stretches as long as the episodes and their lead, not of single windows
    # (the signature is in 10 % of windows: in 65 % of 10-window stretches)
    assert 0.5 <= finding.baseline_rate <= 0.8, finding
    assert finding.lift == pytest.approx(finding.coincidence / finding.baseline_rate)
    rate = f"{finding.baseline_rate:.0%}"
    assert (
        check.reason == f"signature in 8/8 episodes, vs {rate} of same-length stretches of the run"
    )


def test_a_baseline_too_short_for_the_episodes_stretches_is_compared_window_by_window():
    # GIVEN 4 episodes whose stretches (their windows and leads: 22 chances) outnumber the
    # 11 baseline windows of a short run, the signature in 2 of those windows
    hits = attribution._EpisodeHits(
        explained=["p99#1", "p99#2", "p99#3", "p99#4"], explained_windows=[], lags=[],
        union=np.zeros(40, bool), proper=np.zeros(40, bool), tested=4,
        firsts=[2, 12, 20, 30], chances=[7, 3, 6, 6],
    )  # fmt: skip
    base = np.zeros(40, bool)
    base[[0, 1, 9, 10, 11, 17, 18, 27, 28, 38, 39]] = True
    holds = np.zeros(40)
    holds[[9, 28]] = 1.0
    null = attribution._stretch_null(holds, base, hits)
    # THEN single windows are the comparison, and the reason says why
    assert null.compared == attribution.SINGLE_WINDOWS
    assert null.rate == pytest.approx(2 / 11)
    assert null.p_value < 0.05
    # ... while a baseline long enough for them keeps the stretches
    long_base = np.ones(400, bool)
    long_base[:40] = base
    long_null = attribution._stretch_null(np.concatenate([holds, np.zeros(360)]), long_base, hits)
    assert long_null.compared != attribution.SINGLE_WINDOWS
