"""Built-in scenarios by name, from any directory; a user's locustfile by path."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadkit import cli
from loadkit.errors import UsageError
from loadkit.load.catalog import builtin_names, resolve_scenario, scenario_dir

EXPECTED = {"burst_2x", "periodic_bursts", "replay", "soak", "steps_to_knee"}


def test_builtins_resolve_by_name_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert EXPECTED <= set(builtin_names())
    assert resolve_scenario("burst_2x") == scenario_dir() / "burst_2x.py"
    assert resolve_scenario("burst_2x.py") == scenario_dir() / "burst_2x.py"


def test_an_existing_path_wins_over_a_builtin_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    own = tmp_path / "burst_2x.py"
    own.write_text("# the user's own\n")
    assert resolve_scenario("burst_2x.py") == Path("burst_2x.py")
    assert resolve_scenario(own) == own


def test_unknown_scenario_lists_the_builtins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as exc:
        resolve_scenario("steady")
    assert "steady" in exc.value.message
    assert exc.value.hint is not None and "burst_2x" in exc.value.hint
    # a checkout path used elsewhere points at the name
    with pytest.raises(UsageError) as exc:
        resolve_scenario("scenarios/soak.py")
    assert exc.value.hint is not None and "loadkit run soak" in exc.value.hint


def test_loadkit_scenarios_lists_purpose_and_parameters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["scenarios"]) == 0
    out = capsys.readouterr().out
    for name in EXPECTED:
        assert f"  {name} " in out
    assert "does latency recover after traffic doubles" in out
    assert "base_rate=100 multiplier=2" in out
    assert "cannot be loaded" not in out


def test_replay_finds_its_sample_trace_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loadkit.load.describe import describe_scenario

    monkeypatch.chdir(tmp_path)
    info = describe_scenario(resolve_scenario("replay"))
    assert info["duration_s"] > 60
