"""The sweep's pure parts: --vary, config overrides, the batch-size rules, the recommendation,
and what it says when the original configuration cannot be restored."""

from __future__ import annotations

from typing import Any

import pytest

from loadkit.analysis.sweep import batch_rules, recommend
from loadkit.decide.sweep import parse_vary, points_of, restore
from loadkit.errors import TargetError, UsageError
from loadkit.kserve.repository import apply_settings, read_settings

CONFIG: dict[str, Any] = {
    "name": "ranker",
    "max_batch_size": 32,
    "dynamic_batching": {"preferred_batch_size": [32], "max_queue_delay_microseconds": 2000},
    "instance_group": [{"name": "ranker_0", "kind": "KIND_CPU", "count": 1}],
}


def test_vary_gives_every_combination_and_refuses_unknown_names() -> None:
    vary = parse_vary(["max_queue_delay_us=0,2000", "instances=1,2"])
    assert points_of(vary) == [
        {"max_queue_delay_us": 0, "instances": 1},
        {"max_queue_delay_us": 0, "instances": 2},
        {"max_queue_delay_us": 2000, "instances": 1},
        {"max_queue_delay_us": 2000, "instances": 2},
    ]
    for bad in ("window=1,2", "instances", "instances=a", "instances=-1"):
        with pytest.raises(UsageError):
            parse_vary([bad])


def test_apply_settings_changes_a_copy_and_read_settings_reads_it_back() -> None:
    changed = apply_settings(
        CONFIG, {"max_queue_delay_us": 8000, "instances": 2, "max_batch_size": 16}
    )
    assert read_settings(changed) == {
        "max_queue_delay_us": 8000,
        "preferred_batch_size": None,  # 32 > the new max: dropped, or Triton refuses the load
        "max_batch_size": 16,
        "instances": 2,
    }
    assert read_settings(CONFIG)["max_queue_delay_us"] == 2000  # the original is untouched


def test_batch_rules_window_useless_and_raise_max_batch_size() -> None:
    useless = batch_rules({"1": 90, "2": 8, "4": 2}, 32, 5000)
    assert [r["rule"] for r in useless] == ["window useless"]
    assert batch_rules({"1": 90, "2": 10}, 32, 0) == []  # no window: nothing to blame
    pinned = batch_rules({"8": 30, "32": 70}, 32, 2000)
    assert [r["rule"] for r in pinned] == ["raise max_batch_size"]


def _point(label: str, p99: float, passed: bool, throughput: float = 100.0) -> dict[str, Any]:
    return {
        "label": label,
        "settings": {"max_queue_delay_us": int(label)},
        "status": "measured",
        "numbers": {"p99_ms": p99, "slo_passed": passed, "throughput_rps": throughput},
        "rules": [],
    }


def test_recommend_lowest_p99_among_those_within_the_slo() -> None:
    points = [_point("2000", 30.0, True), _point("5000", 20.0, False), _point("8000", 25.0, True)]
    best = recommend(points)
    assert best is not None and best["label"] == "8000"
    assert "met the SLO" in best["why"] and "2000 30.0 ms" in best["why"]
    none_pass = recommend([_point("2000", 90.0, False), _point("5000", 80.0, False)])
    assert none_pass is not None and none_pass["label"] == "5000"
    assert "no configuration met the SLO" in none_pass["why"]


class _BrokenRepository:
    model = "ranker"

    def load(self, config: Any) -> None:
        raise TargetError("loading 'ranker' with the new configuration failed: out of memory")

    def state(self) -> str:
        return "UNAVAILABLE"

    def config(self) -> dict[str, Any]:
        raise AssertionError("not READY: its configuration is not read")


def test_the_most_capacity_and_how_many_searches_were_cut_short() -> None:
    points = [_point("0", 100.0, True), _point("2000", 100.0, True)]
    points[0]["numbers"].update(capacity_rps=400.0, capacity_cut_short="--max-duration 150 s")
    points[1]["numbers"].update(capacity_rps=320.0, capacity_cut_short=None)
    best = recommend(points)
    assert best is not None and best["label"] == "0"
    assert "1 of 2 searches were cut short by their --max-duration" in best["why"]


def test_a_failed_restore_says_exactly_what_state_the_server_is_in(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = restore(_BrokenRepository(), CONFIG)
    assert result["ok"] is False
    assert "the model is UNAVAILABLE" in result["message"]
    assert "out of memory" in result["message"]
    assert "max_queue_delay_us=2000" in result["message"]  # what to load back
    assert capsys.readouterr().err.startswith("ERROR: could not restore")
