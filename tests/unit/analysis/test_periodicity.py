import re

import numpy as np

from loadkit.analysis.align import NS
from loadkit.analysis.episodes import baseline_windows_for, find_episodes
from loadkit.analysis.periodicity import detect_periodicity, rayleigh_test

T0 = 1_700_000_000 * NS


def _sawtooth(n, period, length, jitter=0.0, seed=0, noise=0.3):
    rng = np.random.default_rng(seed)
    values = 10 + rng.normal(0, noise, n)
    t = 5.0
    while t + length < n:
        s = int(round(t + rng.uniform(-jitter, jitter)))
        values[s : s + length] = 22 + rng.normal(0, 1, len(values[s : s + length]))
        t += period
    return values


def _detect(values):
    starts = T0 + np.arange(len(values), dtype=np.int64) * NS
    episodes, _ = find_episodes(list(values), starts, 1.0, T0, "p99")
    return detect_periodicity(list(values), 1.0, episodes, "p99"), episodes


def _rejections(result) -> list[str]:
    """The rule that rejected each candidate period, numbers about the candidate left out."""
    # The reason is one phrase for the one-line summary; the candidates are listed apart.
    assert result.reason.startswith("no period confirmed; "), result.reason
    assert result.reason.count(";") == 1, result.reason
    rules = []
    for part in result.rejected:
        period, _, rule = part.partition(" s: ")
        assert float(period) > 0, part
        rule = re.sub(r"autocorrelation -?\d+\.\d+ <", "autocorrelation <", rule)
        rules.append(rule.replace(" to test a period", ""))
    return rules


def test_rayleigh_uniform_phases_are_not_significant_and_locked_phases_are():
    r, p = rayleigh_test(np.linspace(0, 2 * np.pi, 12, endpoint=False))
    assert r < 1e-9 and p > 0.5
    r, p = rayleigh_test(np.full(8, 1.0))
    assert r == 1.0 and p < 1e-3


def test_sawtooth_period_is_found_with_jitter_strength_and_cycles():
    result, episodes = _detect(_sawtooth(150, 15, 4, jitter=0.5, seed=1))
    assert result.periodic, result.reason
    assert abs(result.period_s - 15.0) < 0.6
    assert result.jitter_s is not None and result.jitter_s < 1.5
    assert result.strength is not None and result.strength > 0.3
    assert result.cycles is not None and result.cycles >= 9
    assert result.p_value is not None and result.p_value < 0.005
    assert result.episodes_used == len(episodes)


def test_random_spikes_are_not_periodic():
    rng = np.random.default_rng(7)
    values = 10 + rng.normal(0, 0.3, 150)
    for s in sorted(rng.choice(np.arange(5, 145), 8, replace=False)):
        values[s : s + 2] = 25.0
    result, _ = _detect(values)
    assert not result.periodic
    # THEN every candidate period was rejected by the autocorrelation rule, and the reason says so
    assert _rejections(result) == ["autocorrelation < 0.25"] * 3, result.reason


def test_fewer_than_five_cycles_is_rejected():
    result, episodes = _detect(_sawtooth(70, 20, 4, seed=2))  # 3.5 cycles
    assert len(episodes) >= 3
    assert not result.periodic


def test_too_few_episodes_says_so():
    values = np.full(100, 10.0)
    values[50:52] = 30.0
    result, episodes = _detect(values)
    assert len(episodes) == 1
    assert not result.periodic
    # THEN every candidate was rejected for having too few spikes to fold, whatever its autocorrelation
    assert _rejections(result) == ["only 1 spike onset (need 4)"] * 3, result.reason


def test_no_episodes_says_so():
    result, episodes = _detect(np.full(100, 10.0))
    assert not episodes
    assert not result.periodic and result.reason == "no spike episodes"


def test_sawtooth_riding_on_a_plateau_keeps_its_cycles():
    # GIVEN spikes every 10 s, three of which sit on a 25 s plateau (a burst)
    # that merges them into one long episode against the long baseline
    rng = np.random.default_rng(3)
    values = 12.0 + rng.normal(0, 0.8, 90)
    values[30:55] = 22.0 + rng.normal(0, 0.8, 25)
    for start in range(11, 90, 10):
        values[start : start + 4] += 20.0
    result, episodes = _detect(values)
    # THEN the onsets against a plateau-following baseline still show the period
    assert len(episodes) < 8
    assert result.periodic, result.reason
    assert abs(result.period_s - 10.0) < 0.5


def test_fft_autocorrelation_equals_the_direct_sum():
    from loadkit.analysis.periodicity import autocorrelation

    x = np.random.default_rng(3).normal(size=3000) + np.sin(np.arange(3000) / 7.0)
    centered = x - x.mean()
    direct = np.correlate(centered, centered, mode="full")[x.size - 1 :] / centered.dot(centered)
    np.testing.assert_allclose(autocorrelation(x), direct, rtol=0, atol=1e-12)


def test_spikes_a_few_steps_apart_that_fold_on_no_period_are_said_unresolvable_not_absent():
    # GIVEN spikes two to four 5 s steps apart that fold on no period at this step (a 4 s
    # slowdown every 12 s seen at a 5 s step jitters by a step: issue 54)
    rng = np.random.default_rng(4)
    coarse = 10 + rng.normal(0, 0.3, 48)
    at = 1
    while at < len(coarse):
        coarse[at] = 22 + rng.normal(0, 1)
        at += int(rng.integers(2, 5))
    starts = T0 + np.arange(len(coarse), dtype=np.int64) * 5 * NS
    episodes, _ = find_episodes(
        list(coarse), starts, 5.0, T0, "p99", baseline_windows=baseline_windows_for(5.0)
    )
    assert len(episodes) >= 4, episodes
    # WHEN a period is looked for at that step
    result = detect_periodicity(list(coarse), 5.0, episodes, "p99")
    # THEN none is claimed, and the reason says the step cannot resolve one that short
    assert not result.periodic, result.reason
    assert "under 4 steps of 5 s: not resolvable at this step" in result.reason, result.reason
