"""The telemetry-source registry: every live source is one module and one entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadkit.cli import build_parser
from loadkit.errors import UsageError
from loadkit.rundir.schema import GpuRow, HostRow, MetricRow, TritonStatsRow
from loadkit.telemetry import sources
from loadkit.telemetry.base import SamplerOptions, SamplerSpec, SourcePlan, TelemetrySource
from loadkit.telemetry.host import HostSampler
from loadkit.telemetry.supervisor import plan_sources, sampling_rates


def test_the_registry_holds_the_five_sources_with_their_rates_and_rows() -> None:
    names = ["gpu", "host", "triton_stats", "metrics", "scrape"]
    assert [s.name for s in sources.REGISTRY] == names
    assert sources.DEFAULT_RATES_HZ == {
        "gpu": 10.0,
        "host": 2.0,
        "triton_stats": 1.0,
        "metrics": 1.0,
        "scrape": 1.0,
    }
    rows = {s.name: s.row_type for s in sources.REGISTRY}
    assert rows == {
        "gpu": GpuRow,
        "host": HostRow,
        "triton_stats": TritonStatsRow,
        "metrics": MetricRow,
        "scrape": dict,  # the rows of the series it fills (gpu, host)
    }
    kinds = [k for s in sources.REGISTRY for k in s.samplers]
    assert len(kinds) == len(set(kinds)), "a sampler kind belongs to one source"


def test_a_sampler_is_built_by_its_kind_and_an_unknown_kind_is_refused() -> None:
    sampler = sources.build_sampler(SamplerSpec("host", "host", 0.5, {"server_pid": None}))
    assert isinstance(sampler, HostSampler)
    with pytest.raises(ValueError, match="unknown sampler kind 'fan'"):
        sources.build_sampler(SamplerSpec("fan", "fan", 1.0))


def test_host_always_and_server_sources_only_with_their_urls(tmp_path: Path) -> None:
    # GIVEN no GPU and no URL
    plans = dict(plan_sources(SamplerOptions(run_dir=tmp_path, gpu="none"), sampling_rates(None)))
    # THEN the host is sampled at its default rate, and the GPU says it is absent
    assert [n for n, p in plans.items() if p.spec is not None] == ["host"]
    assert plans["host"].spec == SamplerSpec("host", "host", 0.5, {"server_pid": None})
    assert plans["gpu"].environment == {"kind": "none", "devices": []}
    assert plans["gpu"].warning is None
    # GIVEN both URLs and a faster host rate
    options = SamplerOptions(
        run_dir=tmp_path,
        gpu="none",
        triton_url="http://127.0.0.1:8000",
        triton_models=["ranker"],
        metrics_url="http://127.0.0.1:8002/metrics",
    )
    plans = dict(plan_sources(options, sampling_rates({"host": 5.0})))
    assert plans["host"].spec is not None and plans["host"].spec.interval_s == 0.2
    assert plans["triton_stats"].spec == SamplerSpec(
        "triton_stats", "triton_stats", 1.0, {"url": "http://127.0.0.1:8000", "models": ["ranker"]}
    )
    assert plans["metrics"].spec == SamplerSpec(
        "metrics", "metrics", 1.0, {"url": "http://127.0.0.1:8002/metrics", "patterns": ["nv_*"]}
    )


def test_a_missing_simulated_gpu_is_a_warning_not_an_error(tmp_path: Path) -> None:
    plans = dict(plan_sources(SamplerOptions(run_dir=tmp_path, gpu="sim"), sampling_rates(None)))
    assert plans["gpu"].spec is None and plans["gpu"].warning
    assert "simulated GPU state" in plans["gpu"].warning


@pytest.mark.parametrize("rate", [0.0, -1.0, None])
def test_a_rate_must_be_positive(rate: float | None) -> None:
    with pytest.raises(UsageError, match="must be positive"):
        sampling_rates({"gpu": rate})


# --- a new source is one module and one registry entry ---------------------------------


class FanSampler:
    source = "fan"

    def open(self) -> None: ...

    def sample(self, t_ns: int) -> list[dict[str, float]]:
        return [{"t_ns": t_ns, "fan_pct": 40.0}]

    def close(self) -> None: ...

    def drain_warnings(self) -> list[str]:
        return []


FAN = TelemetrySource(
    name="fan",
    label="fan",
    default_interval_s=0.25,
    row_type=dict,
    samplers={"fan": lambda spec: FanSampler()},
    plan=lambda options, interval_s: SourcePlan(
        SamplerSpec("fan", "fan", interval_s, {"device": options.extra.get("fan_device")})
    ),
    rate_flag=True,
)


def test_a_registered_source_is_planned_built_and_gets_its_watch_rate_flag(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # GIVEN a fan source added to the registry (what a new module's entry does)
    monkeypatch.setattr(sources, "REGISTRY", (*sources.REGISTRY, FAN))
    monkeypatch.setattr(sources, "RATE_FLAGS", (*sources.RATE_FLAGS, FAN))
    monkeypatch.setattr(sources, "DEFAULT_RATES_HZ", {**sources.DEFAULT_RATES_HZ, "fan": 4.0})
    monkeypatch.setattr("loadkit.telemetry.supervisor.REGISTRY", sources.REGISTRY)
    monkeypatch.setattr("loadkit.telemetry.supervisor.DEFAULT_RATES_HZ", sources.DEFAULT_RATES_HZ)
    monkeypatch.setattr("loadkit.commands.watch.RATE_FLAGS", sources.RATE_FLAGS)
    # WHEN a run plans its samplers with the source's own option
    options = SamplerOptions(run_dir=tmp_path, gpu="none", extra={"fan_device": "/dev/fan0"})
    plans = dict(plan_sources(options, sampling_rates(None)))
    # THEN it is sampled at its default rate with its option, and its sampler is built
    spec = plans["fan"].spec
    assert spec == SamplerSpec("fan", "fan", 0.25, {"device": "/dev/fan0"})
    assert isinstance(sources.build_sampler(spec), FanSampler)
    # AND `loadkit watch` takes --fan-rate
    args = build_parser().parse_args(["watch", "--duration", "5", "--fan-rate", "8"])
    assert args.fan_rate == 8.0 and args.gpu_rate is None
