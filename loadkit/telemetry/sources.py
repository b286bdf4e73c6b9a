"""The registry of live telemetry sources: one module per source, listed once here.

Adding a source = one new module in this package holding its sampler and a
`SOURCE = TelemetrySource(...)` (name, default interval, row type, sampler
kinds, `plan`), plus its entry in `REGISTRY`. The sampler set, the sampler
process and the telemetry flags of `loadkit watch` read this registry and
nothing else; the analysis aligns the series by the same name
(loadkit/analysis/sources.py). See docs/architecture.md.
"""

from __future__ import annotations

from loadkit.telemetry import gpu, host, prom_metrics, scrape, triton_stats
from loadkit.telemetry.base import Sampler, SamplerSpec, TelemetrySource

# In the order their samplers start (and are listed in the manifest's `sources`).
REGISTRY: tuple[TelemetrySource, ...] = (
    gpu.SOURCE,
    host.SOURCE,
    triton_stats.SOURCE,
    prom_metrics.SOURCE,
    scrape.SOURCE,  # the server's exporters: the series they fill (gpu, host)
)

BY_NAME: dict[str, TelemetrySource] = {s.name: s for s in REGISTRY}
DEFAULT_RATES_HZ: dict[str, float] = {s.name: s.default_rate_hz for s in REGISTRY}
# Sources whose rate `loadkit watch` sets with `--<name>-rate HZ`.
RATE_FLAGS: tuple[TelemetrySource, ...] = tuple(s for s in REGISTRY if s.rate_flag)


def build_sampler(spec: SamplerSpec) -> Sampler:
    """The sampler of `spec.kind` (in the sampler process)."""
    for source in REGISTRY:
        build = source.samplers.get(spec.kind)
        if build is not None:
            return build(spec)
    raise ValueError(f"unknown sampler kind {spec.kind!r}")


__all__ = ["BY_NAME", "DEFAULT_RATES_HZ", "RATE_FLAGS", "REGISTRY", "build_sampler"]
