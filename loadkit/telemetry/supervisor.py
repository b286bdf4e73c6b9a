"""Starts and stops the sampler processes of one run, and describes them.

`SamplerSet.start(...)` asks each registered source (loadkit/telemetry/sources.py)
whether it is sampled in this run (GPU: real NVML, the simulated GPU, or none;
host always; Triton statistics and metrics when a URL is given), starts one
`python -m loadkit.telemetry.process` per source and returns at once. `stop()` stops and reaps them by PID. `manifest_info()` is what the
orchestrator merges into the manifest.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from loadkit import lifeline
from loadkit.errors import UsageError
from loadkit.rundir.layout import TELEMETRY_DIR
from loadkit.rundir.schema import LOCAL_SUFFIX, TargetLocation
from loadkit.telemetry.base import (
    SamplerOptions,
    SamplerSpec,
    SourcePlace,
    SourcePlan,
    this_machine,
)
from loadkit.telemetry.gpu import GPU_CHOICES
from loadkit.telemetry.sources import DEFAULT_RATES_HZ, REGISTRY

STOP_GRACE_S = 3.0
KILL_WAIT_S = 30.0  # after SIGKILL: the kernel still has to schedule the exit

log = logging.getLogger(__name__)


def sampling_rates(rates: Mapping[str, float | None] | None) -> dict[str, float]:
    """Every source's rate in Hz: its default, else the one given (which must be positive)."""
    hz = dict(DEFAULT_RATES_HZ)
    for name, value in (rates or {}).items():
        if value is None or value <= 0:
            raise UsageError(f"sampling rate for {name!r} must be positive, got {value}")
        hz[name] = float(value)
    return hz


def plan_sources(
    options: SamplerOptions, rates_hz: Mapping[str, float]
) -> list[tuple[str, SourcePlan]]:
    """Each registered source's plans for this run, in registry order, by the series each
    writes (its file stem); nothing is started.

    A series is one file with one place. Where the server's own copy of a series
    (`holds_series`: `--scrape`) and a sampler of this machine would both write it, the
    server's keeps the name (the analysis reads a series by its name, and its causes are
    the server's) and this machine's is written as `<series>-local`; a plan that only says
    why this machine's copy is missing (the GPU of a load machine) says nothing then.
    """
    planned: list[tuple[str, SourcePlan]] = []
    for source in REGISTRY:
        result = source.plan(options, 1.0 / rates_hz[source.name])
        for plan in result if isinstance(result, tuple) else (result,):
            planned.append((plan.spec.source if plan.spec is not None else source.name, plan))
    held = {name for name, plan in planned if plan.holds_series}
    out: list[tuple[str, SourcePlan]] = []
    for name, plan in planned:
        if name in held and not plan.holds_series:
            if plan.spec is None:
                plan = SourcePlan(None, plan.environment)
            else:
                name = name + LOCAL_SUFFIX
                plan = replace(plan, spec=replace(plan.spec, source=name))
        out.append((name, plan))
    return out


@dataclass
class _Child:
    spec: SamplerSpec
    process: subprocess.Popen[str]
    status: str = "starting"  # "ok", "unavailable", "exited"
    warning: str | None = None


def _spawn_sampler(spec: SamplerSpec, run_dir: Path) -> subprocess.Popen[str]:
    """`python -m loadkit.telemetry.process` for one source (stderr: ours)."""
    argv = [
        sys.executable,
        "-m",
        "loadkit.telemetry.process",
        "--run-dir",
        str(run_dir),
        "--spec",
        json.dumps(asdict(spec)),
    ]
    # SIGTERM when we die: the sampler flushes what it has and exits.
    return lifeline.popen(
        argv,
        death_signal=signal.SIGTERM,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )


def _signal(proc: subprocess.Popen[str], sig: int) -> None:
    if proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


@dataclass
class SamplerSet:
    run_dir: Path
    # Each source's part of the manifest's `environment` (the GPU's devices), by name.
    environment: dict[str, Any] = field(default_factory=dict)
    # Sources asked for that cannot be read: (name, warning), listed with no file.
    unavailable: list[tuple[str, str]] = field(default_factory=list)
    # Where each source's series is sampled (`sources[].place`, `host`, `parts`), by name.
    places: dict[str, SourcePlace] = field(default_factory=dict)
    children: list[_Child] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def start(
        cls,
        run_dir: Path,
        *,
        gpu: str = "auto",
        triton_url: str | None = None,
        triton_models: list[str] | None = None,
        server_pid: int | None = None,
        rates: dict[str, float] | None = None,
        metrics_url: str | None = None,
        metrics_patterns: list[str] | None = None,
        sim_gpu_state: Path | None = None,
        target_location: TargetLocation | None = None,
        **source_options: Any,
    ) -> SamplerSet:
        """Start the samplers for one run; returns while they start up.

        `rates` are in Hz per source name (`gpu`, `host`, `triton_stats`, `metrics`).
        `sim_gpu_state` (for `gpu="sim"`) defaults to `<run_dir>/sim_gpu_state.json`.
        `target_location`: whether the target runs on this machine
        (`loadkit.placement.locate_target`), which gives each series its place and
        keeps `gpu="auto"` off this machine's GPUs for a target elsewhere; None
        leaves this machine's series `unknown`.
        `source_options` are read by the `plan` of sources that take other options
        (`scrape=[ScrapeTarget, ...]`: the server's exporters, loadkit/telemetry/scrape.py).
        """
        if gpu not in GPU_CHOICES:
            raise UsageError(
                f"unknown GPU telemetry mode {gpu!r}",
                hint=f"choose one of {', '.join(GPU_CHOICES)}",
            )
        run_dir = Path(run_dir)
        (run_dir / TELEMETRY_DIR).mkdir(parents=True, exist_ok=True)
        options = SamplerOptions(
            run_dir=run_dir,
            gpu=gpu,
            triton_url=triton_url,
            triton_models=triton_models,
            server_pid=server_pid,
            metrics_url=metrics_url,
            metrics_patterns=metrics_patterns,
            sim_gpu_state=sim_gpu_state,
            target=target_location,
            extra=source_options,
        )
        specs: list[SamplerSpec] = []
        warnings: list[str] = []
        environment: dict[str, Any] = {}
        unavailable: list[tuple[str, str]] = []
        places: dict[str, SourcePlace] = {}
        for name, plan in plan_sources(options, sampling_rates(rates)):
            if plan.spec is not None or plan.warning:
                # A source that does not say where it samples runs here, like its sampler.
                places[name] = plan.place or this_machine(options)
            if plan.environment is not None:
                environment[name.removesuffix(LOCAL_SUFFIX)] = dict(plan.environment)
            if plan.warning:
                warnings.append(plan.warning)
                unavailable.append((name, plan.warning))
                print(f"WARNING: telemetry {name}: {plan.warning}", file=sys.stderr, flush=True)
            if plan.spec is not None:
                specs.append(plan.spec)

        sset = cls(
            run_dir=run_dir,
            environment=environment,
            unavailable=unavailable,
            places=places,
            warnings=warnings,
        )
        try:
            for spec in specs:
                sset.children.append(_Child(spec, _spawn_sampler(spec, run_dir)))
        except BaseException:
            sset.stop()
            raise
        return sset

    # --- state ------------------------------------------------------------
    def _poll(self) -> None:
        for child in self.children:
            stdout = child.process.stdout
            if child.status != "starting" or stdout is None or stdout.closed:
                continue
            ready, _, _ = select.select([stdout], [], [], 0)
            if not ready:
                continue
            line = stdout.readline()
            try:
                report = json.loads(line)
                child.status, child.warning = report["status"], report.get("message")
            except (ValueError, KeyError, TypeError):
                child.status = "exited"
                child.warning = (
                    f"sampler process exited (code {child.process.poll()}) before opening "
                    "its source; see its stderr"
                )
            if child.warning:
                self.warnings.append(child.warning)

    def wait_started(self, timeout_s: float = 15.0) -> bool:
        """Wait until every sampler has opened (or given up); True if all did in time."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._poll()
            if all(c.status != "starting" for c in self.children):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    @property
    def pids(self) -> list[int]:
        return [c.process.pid for c in self.children]

    def stop(self) -> None:
        """SIGTERM every sampler by PID, wait for them to flush; SIGKILL stragglers."""
        self._poll()
        for child in self.children:
            _signal(child.process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.children:
            try:
                child.process.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(child.process, signal.SIGKILL)
                try:
                    # SIGKILL cannot be ignored, but a niced sampler on a saturated
                    # host took over 2 s to be scheduled and exit (a 1 h soak at
                    # nice 19, load 10): that must not fail the run's finalization.
                    child.process.wait(KILL_WAIT_S)
                except subprocess.TimeoutExpired:
                    log.warning(
                        "telemetry sampler %s (PID %d) still exiting %.0f s after SIGKILL",
                        child.spec.source,
                        child.process.pid,
                        KILL_WAIT_S,
                    )
        for child in self.children:
            if child.process.stdout is not None:
                child.process.stdout.close()

    def __enter__(self) -> SamplerSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def gpu_info(self) -> dict[str, Any]:
        """environment.gpu (what the GPU source found)."""
        return dict(self.environment.get("gpu") or {"kind": "none", "devices": []})

    def manifest_info(self) -> dict[str, Any]:
        """`{"gpu": environment.gpu, "sources": [...]}` for the manifest."""
        self._poll()
        sources = []
        for child in self.children:
            spec = child.spec
            sources.append(
                {
                    "name": spec.source,
                    "file": f"{TELEMETRY_DIR}/{spec.source}.jsonl",
                    "interval_s": spec.interval_s,
                    "simulated": spec.simulated,
                    "warning": child.warning,
                    **self._place(spec.source),
                }
            )
        for name, warning in self.unavailable:
            sources.append(
                {
                    "name": name,
                    "file": None,
                    "interval_s": None,
                    "simulated": False,
                    "warning": warning,
                    **self._place(name),
                }
            )
        return {**self.environment, "sources": sources}

    def _place(self, name: str) -> dict[str, Any]:
        place = self.places.get(name)
        return place.to_manifest() if place is not None else {}
