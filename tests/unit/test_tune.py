"""`loadkit tune`'s parts: the profile from Triton's statistics, the batcher simulation,
the ranking and recommendation, tune.json, and the restore when a stage fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadkit.decide.predict import Config, capacity, simulate, steady_arrivals
from loadkit.decide.profile import (
    BatchProfile,
    compute_table,
    concurrency_ladder,
    model_entry,
    overhead_quantiles,
    stats_delta,
)
from loadkit.decide.tune import (
    Slo,
    mark_pareto,
    parse_space,
    rank,
    recommend,
    run_tune,
    scenario_arrivals,
    verification,
    verify_start,
)
from loadkit.errors import TargetError, UsageError
from loadkit.kserve.repository import apply_settings, preferred_sizes, read_settings

CONFIG: dict[str, Any] = {
    "name": "ranker",
    "max_batch_size": 8,
    "dynamic_batching": {"max_queue_delay_microseconds": 2000},
    "instance_group": [{"kind": "KIND_CPU", "count": 1}],
}


def _entry(batches: dict[int, tuple[int, int]], success: int, queue_ns: int) -> dict[str, Any]:
    """A model_stats entry as Triton answers it: per size, compute_infer's count and each part's ns."""
    return {
        "name": "ranker",
        "version": "1",
        "inference_stats": {
            "success": {"count": success, "ns": 0},
            "queue": {"count": success, "ns": queue_ns},
        },
        "batch_stats": [
            {
                "batch_size": size,
                "compute_input": {"count": n, "ns": ns // 10},
                "compute_infer": {"count": n, "ns": ns - 2 * (ns // 10)},
                "compute_output": {"count": n, "ns": ns // 10},
            }
            for size, (n, ns) in batches.items()
        ],
    }


def test_a_step_is_the_difference_of_two_cumulative_snapshots() -> None:
    before = _entry({1: (10, 30_000_000)}, success=10, queue_ns=1_000_000)
    after = _entry({1: (30, 90_000_000), 4: (5, 25_000_000)}, success=50, queue_ns=5_000_000)
    stats = {"model_stats": [after, {**after, "name": "other"}]}
    assert model_entry(stats, "ranker") is after
    delta = stats_delta(before, after)
    assert delta.executions == {1: 20, 4: 5}
    assert delta.mean_ms(1) == pytest.approx(3.0)  # input + infer + output
    assert delta.mean_ms(4) == pytest.approx(5.0)
    assert delta.mean_ms(2) is None
    assert delta.requests == 40 and delta.queue_ms == pytest.approx(0.1)
    # a reload between the snapshots (counters went down): counted from zero
    reloaded = stats_delta(after, _entry({1: (3, 9_000_000)}, success=3, queue_ns=0))
    assert reloaded.executions == {1: 3} and reloaded.requests == 3


def test_the_table_takes_the_busiest_step_interpolates_and_never_drops() -> None:
    quiet = stats_delta(_entry({}, 0, 0), _entry({1: (100, 200_000_000)}, 100, 0))  # 2 ms
    busy = stats_delta(
        _entry({}, 0, 0),
        _entry({1: (10, 30_000_000), 4: (50, 250_000_000), 8: (40, 320_000_000)}, 450, 0),
    )
    table = compute_table([quiet, busy], 10)
    assert table[1] == pytest.approx(3.0)  # the busy step's mean (CPU contention), not 2 ms
    assert table[4] == pytest.approx(5.0) and table[8] == pytest.approx(8.0)
    assert 5.0 < table[6] < 8.0  # interpolated
    assert table[10] > table[8]  # extrapolated along the fit
    assert all(table[b] <= table[b + 1] for b in range(1, 10))
    assert concurrency_ladder(1, 8) == [1, 2, 4, 8, 16]
    assert concurrency_ladder(2, 4) == [1, 2, 4, 8, 16]


def test_profile_round_trips_through_json_and_borrows_the_nearest_instance_count() -> None:
    profile = BatchProfile(
        "ranker", 4, {1: {1: 2.0, 2: 2.5, 3: 3.0, 4: 3.5}}, overhead_quantiles([1.0, 2.0], 0.5)
    )
    again = BatchProfile.from_json(json.loads(json.dumps(profile.to_json())))
    assert again == profile
    assert again.table(3) == profile.table(1)
    assert again.compute(1, 6) == pytest.approx(4.5)  # beyond the profile: its slope
    assert again.overhead_ms[0] == pytest.approx(0.5) and again.overhead_ms[-1] == pytest.approx(
        1.5
    )


def _flat(ms: float, top: int = 16) -> BatchProfile:
    return BatchProfile("m", top, {1: {b: ms for b in range(1, top + 1)}}, [0.0])


def test_one_instance_without_batching_waits_as_m_d_1_says() -> None:
    # Poisson arrivals, deterministic 10 ms service at utilisation 0.7: Wq = rho D / 2(1 - rho)
    rho, service_ms = 0.7, 10.0
    arrivals = steady_arrivals(rho / (service_ms / 1e3), 600.0, "poisson", seed=3)
    sim = simulate(Config(max_batch_size=1), _flat(service_ms), arrivals)
    wait = float(np.nanmean(sim.latency_ms)) - service_ms
    assert wait == pytest.approx(rho * service_ms / (2 * (1 - rho)), rel=0.1)
    assert sim.batch_sizes == {1: len(arrivals)}


def test_batching_raises_capacity_when_the_profile_is_sub_linear() -> None:
    sub_linear = BatchProfile("m", 16, {1: {b: 4.0 + 0.5 * b for b in range(1, 17)}}, [0.0])
    linear = BatchProfile("m", 16, {1: {b: 4.5 * b for b in range(1, 17)}}, [0.0])
    one, _ = capacity(Config(1), sub_linear, 99, 100.0)
    sixteen, _ = capacity(Config(16), sub_linear, 99, 100.0)
    assert one == pytest.approx(1000 / 4.5, rel=0.08)
    assert sixteen > 3 * one
    flat_one, _ = capacity(Config(1), linear, 99, 100.0)
    flat_sixteen, _ = capacity(Config(16), linear, 99, 100.0)
    assert flat_sixteen == pytest.approx(flat_one, rel=0.1)  # nothing to gain
    two, _ = capacity(Config(1, instances=2), sub_linear, 99, 100.0)
    assert two == pytest.approx(2 * one, rel=0.1)


def test_a_queue_delay_raises_p50_at_low_load() -> None:
    arrivals = steady_arrivals(10.0, 30.0, "constant", seed=0)
    profile = _flat(2.0)
    none = simulate(Config(8, max_queue_delay_us=0), profile, arrivals)
    window = simulate(Config(8, max_queue_delay_us=8000), profile, arrivals)
    assert np.nanmedian(none.latency_ms) == pytest.approx(2.0, abs=0.1)
    assert np.nanmedian(window.latency_ms) == pytest.approx(10.0, abs=0.2)  # waits out 8 ms
    # a preferred size reached goes at once, whatever the window
    burst = np.repeat(np.arange(10) * 0.1, 4)
    preferred = simulate(Config(8, 8000, 1, preferred_batch_sizes=(4,)), profile, burst)
    assert preferred.batch_sizes == {4: 10}
    assert float(np.nanmax(preferred.latency_ms)) == pytest.approx(2.0, abs=0.01)


def _row(label: str, cap: float, p99: float) -> dict[str, Any]:
    return {"label": label, "settings": {"max_batch_size": int(label)}, "predicted": {
        "capacity_rps": cap, "p99_ms": p99}}  # fmt: skip


def test_ranking_pareto_and_the_recommendation_from_measured_capacity() -> None:
    rows = [_row("1", 45.0, 20.0), _row("8", 300.0, 40.0), _row("4", 300.0, 30.0),
            _row("2", 90.0, 50.0)]  # fmt: skip
    assert [r["label"] for r in rank(rows)] == ["4", "8", "2", "1"]
    mark_pareto(rows)
    assert {r["label"]: r["pareto"] for r in rows} == {"1": True, "8": False, "4": True, "2": False}
    slo = Slo("p99", 50.0)
    verified = [
        {"label": "4", "settings": {"max_batch_size": 4}, "status": "measured",
         "measured_capacity_rps": 260.0, "predicted_capacity_rps": 300.0,
         "capacity_error_pct": 15.4, "predicted_p99_ms": 30.0},
        {"label": "8", "settings": {"max_batch_size": 8}, "status": "measured",
         "measured_capacity_rps": 280.0, "predicted_capacity_rps": 300.0,
         "capacity_error_pct": 7.1, "predicted_p99_ms": 40.0},
        {"label": "2", "settings": {"max_batch_size": 2}, "status": "failed"},
    ]  # fmt: skip
    rec = recommend(verified, rows, "ranker", slo, peak_rps=2000.0, headroom=0.5)
    assert rec is not None and rec["label"] == "8"  # measured beats predicted
    assert rec["replicas"] == 15  # ceil(2000 / (280 x 0.5))
    assert rec["sentence"].startswith("Run ranker with 8: 280 req/s measured within p99 <= 50 ms")
    assert "15 replica(s) for a peak of 2000 req/s with 50% headroom" in rec["sentence"]
    assert recommend([verified[2]], rows, "ranker", slo, None, None) is None


def test_a_verifying_search_cut_short_is_a_lower_bound_and_says_so() -> None:
    # GIVEN a verifying search that passed at 320 and failed at 480 when --max-duration ran
    # out (the ranker's 18-point grid, session 18: the server's own ceiling was ~445)
    row = _row("16", 438.8, 107.0)
    point = {"status": "measured", "run": "r", "numbers": {
        "capacity_rps": 320.0, "capacity_bracket": [320.0, 480.0],
        "capacity_cut_short": "--max-duration 150 s"}}  # fmt: skip
    v = verification(row, point, Slo("p99", 250.0))
    # THEN the verification keeps the bracket, and the prediction is inside it
    assert v["measured_bracket"] == [320.0, 480.0] and v["cut_short"] == "--max-duration 150 s"
    assert v["predicted_within_bracket"] is True and v["capacity_error_pct"] == 37.1
    # AND the recommendation says the capacity is at least what was measured
    rec = recommend([{**v, "status": "measured"}], [row], "ranker", Slo("p99", 250.0), None, None)
    assert rec is not None
    assert (
        "at least 320 req/s measured (its search was cut short by --max-duration 150 s"
        in (rec["sentence"])
    )


def test_a_verifying_search_starts_near_its_prediction_within_the_search_bounds() -> None:
    # the ramp's probes far below the prediction are skipped: 0.8 x 440 = 352
    assert verify_start(440.0, 40.0, 800.0) == pytest.approx(352.0)
    # never below --start, never above --max-rate, and --start without a prediction
    assert verify_start(30.0, 40.0, 800.0) == 40.0
    assert verify_start(5000.0, 40.0, 800.0) == 800.0
    assert verify_start(None, 40.0, 800.0) == 40.0


def test_space_and_scenario_arrivals() -> None:
    assert parse_space(["max_batch_size=4,8", "instances=1,2"]) == [
        ("max_batch_size", [4, 8]),
        ("instances", [1, 2]),
    ]
    with pytest.raises(UsageError, match="--space"):
        parse_space(["window=1"])
    arrivals = scenario_arrivals(
        {"kind": "Constant", "rate": 20.0, "duration_s": 5.0}, "constant", 0
    )
    assert len(arrivals) == 100 and arrivals[0] == pytest.approx(0.025)
    with pytest.raises(UsageError):
        scenario_arrivals({"kind": "Nonsense"}, "constant", 0)


class _Repository:
    """A repository API that records loads; its config is what was loaded last."""

    model = "ranker"
    url = "http://127.0.0.1:1"

    def __init__(self) -> None:
        self.loaded: list[dict[str, Any]] = []

    def load(self, config: dict[str, Any]) -> None:
        self.loaded.append(config)

    def config(self) -> dict[str, Any]:
        return self.loaded[-1] if self.loaded else CONFIG

    def state(self) -> str:
        return "READY"


def _tune(
    repo: _Repository, tmp_path: Path, measure: Any, written: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    written = [] if written is None else written
    data: dict[str, Any] = {"kind": "tune", "verifications": [], "restored": None}

    def default_profile() -> BatchProfile:
        repo.load(apply_settings(CONFIG, {"max_batch_size": 8, "max_queue_delay_us": 0}))
        return BatchProfile("ranker", 8, {1: {b: 2.0 + 0.5 * b for b in range(1, 9)}}, [0.3])

    run_tune(
            repo, CONFIG, data, lambda d: written.append(json.loads(json.dumps(d))),
            profile=default_profile, points=[{"max_batch_size": 1}, {"max_batch_size": 8}],
            arrivals=steady_arrivals(50.0, 10.0, "constant", 0), slo=Slo("p99", 50.0),
            spacing="constant", seed=0, verify=1, measure=measure,
            profile_path=tmp_path / "profile.json",
        )  # fmt: skip
    return data


def test_tune_json_has_the_space_the_profile_predictions_and_verifications(tmp_path: Path) -> None:
    repo = _Repository()
    measured: list[dict[str, Any]] = []
    predicted: list[float | None] = []

    def measure(k: int, settings: dict[str, Any], predicted_rps: float | None) -> Path:
        measured.append(dict(settings))
        predicted.append(predicted_rps)
        raise TargetError("the search could not start")

    with pytest.raises(TargetError):
        _tune(repo, tmp_path, measure)
    # the best predicted (max_batch_size=8) was verified first, told its prediction ...
    assert measured == [{"max_batch_size": 8}]
    assert predicted[0] is not None and predicted[0] > 0
    # ... and the original configuration was loaded back after the failure
    assert read_settings(repo.loaded[-1]) == read_settings(CONFIG)


def test_a_failing_profile_restores_and_the_predictions_are_kept_when_it_works(
    tmp_path: Path,
) -> None:
    repo = _Repository()

    def broken() -> BatchProfile:
        repo.load(apply_settings(CONFIG, {"instances": 2}))
        raise TargetError("no statistics")

    data: dict[str, Any] = {"kind": "tune", "verifications": [], "restored": None}
    with pytest.raises(TargetError):
        run_tune(
            repo, CONFIG, data, lambda d: None, profile=broken, points=[{"instances": 2}],
            arrivals=np.array([]), slo=Slo("p99", 50.0), spacing="constant", seed=0,
            verify=0, measure=lambda k, s, p: tmp_path, profile_path=tmp_path / "p.json",
        )  # fmt: skip
    assert data["restored"]["ok"] is True and data["status"] == "failed"
    assert read_settings(repo.loaded[-1]) == read_settings(CONFIG)

    def unreachable(k: int, settings: Any, predicted_rps: float | None) -> Path:
        raise TargetError("gone")

    written: list[dict[str, Any]] = []
    with pytest.raises(TargetError):
        _tune(_Repository(), tmp_path, unreachable, written)
    # before the verification failed, tune.json had the profile and every prediction
    last = written[-1]
    assert json.loads((tmp_path / "profile.json").read_text())["max_batch_size"] == 8
    assert [p["label"] for p in last["predictions"]] == ["max_batch_size=1", "max_batch_size=8"]
    caps = {p["label"]: p["predicted"]["capacity_rps"] for p in last["predictions"]}
    assert caps["max_batch_size=8"] > 2 * caps["max_batch_size=1"]
    assert set(last["predictions"][0]["predicted"]) >= {"capacity_rps", "p50_ms", "p99_ms"}


def test_a_waiting_batch_takes_the_arrivals_so_a_request_waits_half_an_execution() -> None:
    # GIVEN a busy instance (20 ms per execution, 100 req/s: about 2 requests per execution)
    profile = BatchProfile("m", 8, {1: {b: 19.0 + 0.5 * b for b in range(1, 9)}}, [0.0])
    arrivals = steady_arrivals(100.0, 30.0, "constant", seed=0)
    sim = simulate(Config(8, max_queue_delay_us=0), profile, arrivals)
    # THEN a request waits for the execution under way (half of one on average), then runs
    # in the batch that took it; never behind two formed batches (three executions)
    assert float(np.nanmedian(sim.latency_ms)) == pytest.approx(20.0 + 10.0, abs=3.0)
    sizes = sim.batch_sizes
    assert max(sizes, key=lambda k: sizes[k]) == 2  # what arrives during one execution


def test_with_a_queue_delay_arrivals_wait_for_the_next_batch_once_the_delay_ran_out() -> None:
    # Triton's batcher, having waited out a delay, is woken by an arrival only when the queue
    # holds a preferred (here: the max) batch, so a busy instance's next batch starts only when
    # it picks up the waiting one: a delay costs more than itself under load
    profile = BatchProfile("m", 8, {1: {b: 19.0 + 0.5 * b for b in range(1, 9)}}, [0.0])
    arrivals = steady_arrivals(100.0, 30.0, "constant", seed=0)
    none = simulate(Config(8, max_queue_delay_us=0), profile, arrivals)
    delay = simulate(Config(8, max_queue_delay_us=8000), profile, arrivals)
    assert (
        float(np.nanpercentile(delay.latency_ms, 99))
        > float(np.nanpercentile(none.latency_ms, 99)) + 8.0
    )
    # the alternation of single requests and bigger batches that Triton shows
    assert delay.batch_sizes.get(1, 0) > len(arrivals) / 10 > none.batch_sizes.get(1, 0)


def test_capacity_of_a_latency_bound_configuration_reaches_its_throughput() -> None:
    # 8 per 26.6 ms at most (300 req/s): within a 100 ms P99 the batcher gets close to it,
    # as the embedded ranker did (300 measured; the old model's 2 formed batches said 241)
    profile = BatchProfile("m", 8, {1: {b: 20.9 + 0.71 * b for b in range(1, 9)}}, [0.0])
    cap, _ = capacity(Config(8), profile, 99, 100.0)
    assert cap == pytest.approx(8 / 0.02658, rel=0.04)


def test_preferred_sizes_shape_the_batches_as_tritons_batcher_forms_them() -> None:
    # GIVEN doc_ranker's preferred sizes [4, 8] under max_batch_size 16, 60 ms per execution,
    # and requests arriving together every 200 ms (the instance free at each arrival)
    profile = BatchProfile("m", 16, {1: {b: 60.0 + 0.5 * b for b in range(1, 17)}}, [0.0])

    def batches(delay_us: int, together: int) -> dict[int, int]:
        config = Config(16, delay_us, 1, preferred_batch_sizes=(4, 8))
        return simulate(config, profile, np.repeat(np.arange(10) * 0.2, together)).batch_sizes

    # THEN without a queue delay a preferred size goes at once and saturated: 12 together
    # are 8 + 4, never 12 (Triton 2.51 on doc_ranker, session 18: batch sizes 1, 2, 3, 4
    # and 8 only at max_batch_size 16 without a delay), and fewer than 4 go as they are
    assert batches(0, 12) == {4: 10, 8: 10}
    assert batches(0, 3) == {3: 10}
    # ... with a delay, the largest preferred size within it, and the one left when the
    # delay ran out (5 together: 4 + 1, not 5) ...
    assert batches(8000, 5) == {1: 10, 4: 10}
    # ... but a batch at 8 with a delay is not saturated: it takes one more, where the walk
    # marks past the largest preferred size (the same server with a delay: 9-16, never 8),
    # and the last one goes when the delay ran out
    assert batches(8000, 10) == {1: 10, 9: 10}


def test_a_point_keeps_the_servers_whole_preferred_list_unless_it_sets_one() -> None:
    config = {"max_batch_size": 8, "dynamic_batching": {"preferred_batch_size": [8, 4]}}
    defaults = {**read_settings(config), "preferred_batch_sizes": preferred_sizes(config)}
    assert preferred_sizes(config) == [4, 8] and read_settings(config)["preferred_batch_size"] == 8
    assert Config.of({"max_batch_size": 16}, defaults).preferred_batch_sizes == (4, 8)
    assert Config.of({"preferred_batch_size": 2}, defaults).preferred_batch_sizes == (2,)
    assert Config.of({}, {"preferred_batch_size": 4}).preferred_batch_sizes == (4,)


def test_loadkit_report_renders_a_tune_directory_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loadkit.cli import main

    # GIVEN the tune.json a tune left when its verification failed (profile and predictions)
    def unreachable(k: int, settings: Any, predicted_rps: float | None) -> Path:
        raise TargetError("gone")

    written: list[dict[str, Any]] = []
    with pytest.raises(TargetError):
        _tune(_Repository(), tmp_path, unreachable, written)
    tune_dir = tmp_path / "tune"
    tune_dir.mkdir()
    (tune_dir / "tune.json").write_text(json.dumps(written[-1]))
    # WHEN `loadkit report` is given the directory THEN it writes the tune's own report
    assert main(["report", str(tune_dir)]) == 0
    html = (tune_dir / "report.html").read_text()
    assert "max_batch_size=8" in html and '<img src="data:image/' in html
    assert "HTML tune report" in capsys.readouterr().out
    # ... and says which format a tune has
    assert main(["report", str(tune_dir), "--format", "md"]) != 0
    assert "a tune has no md report" in capsys.readouterr().err
