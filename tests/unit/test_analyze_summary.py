"""`loadkit analyze`'s summary: the period line reads as one line a person can take in."""

from types import SimpleNamespace

from loadkit.analysis.model import Periodicity
from loadkit.commands.analyze import _period_phrase


def _analysis(*periods: Periodicity) -> SimpleNamespace:
    by = {p.percentile: p for p in periods}
    return SimpleNamespace(periodicity_for=by.get)


def test_p99_not_periodic_but_p95_is_says_both_in_one_short_line():
    rejected = tuple(f"{p:.1f} s: spike onsets not phase-locked" for p in (9.7, 9.2, 2.7, 3.5))
    p99 = Periodicity(
        "p99",
        False,
        reason="no period confirmed; closest 9.7 s, onsets not phase-locked (p=0.02)",
        rejected=rejected,
    )
    p95 = Periodicity("p95", True, period_s=10.0, jitter_s=0.3, p_value=3e-5, cycles=9)
    text = _period_phrase(_analysis(p99, p95))
    assert text == (
        "; the P95 spikes repeat every 10.0 s (P99's own: no period confirmed; "
        "closest 9.7 s, onsets not phase-locked (p=0.02))"
    )
    assert "9.2" not in text and "\n" not in text


def test_a_periodic_p99_keeps_its_numbers():
    p99 = Periodicity("p99", True, period_s=10.0, jitter_s=0.3, p_value=3e-5, cycles=9)
    assert _period_phrase(_analysis(p99)) == (
        ", periodic every 10.0 s (jitter 0.3 s, 9 cycles, p=3e-05)"
    )
