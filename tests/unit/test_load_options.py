"""run_scenario's flat keywords are RunOptions' and LiveOptions' fields (RunOptions.of)."""

from __future__ import annotations

import pytest

from loadkit.load.orchestrator import LiveOptions, RunOptions, Workers


def test_flat_keywords_go_to_their_option_group():
    options = RunOptions.of(duration_s=3, workers=2, seed=4, show_progress=True, abort_on=["x"])
    assert options.duration_s == 3 and options.seed == 4
    assert options.workers == Workers(local=2)
    assert options.live == LiveOptions(show_progress=True, abort_on=["x"])
    assert RunOptions.of(workers=Workers(expect=3)).workers.expect == 3


def test_a_misspelt_keyword_is_refused():
    with pytest.raises(TypeError, match="duraton_s"):
        RunOptions.of(duraton_s=3)
