"""Starts and stops the sampler processes of one run, and describes them.

`SamplerSet.start(...)` decides which sources exist (GPU: real NVML, the
simulated GPU, or none; host always; Triton statistics and metrics when a URL
is given), starts one `python -m loadkit.telemetry.process` per source and returns at
once. `stop()` stops and reaps them by PID. `manifest_info()` is what the
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loadkit import lifeline
from loadkit.errors import UsageError
from loadkit.rundir.layout import TELEMETRY_DIR
from loadkit.telemetry.gpu import DEFAULT_GPU_INTERVAL_S, GPU_CHOICES, probe_fake_nvml, probe_nvml
from loadkit.telemetry.host import DEFAULT_HOST_INTERVAL_S
from loadkit.telemetry.process import SamplerSpec
from loadkit.telemetry.prom_metrics import DEFAULT_METRICS_INTERVAL_S, TRITON_PATTERNS
from loadkit.telemetry.simgpu_runner import SIM_GPU_STATE_FILE
from loadkit.telemetry.triton_stats import DEFAULT_TRITON_STATS_INTERVAL_S

DEFAULT_RATES_HZ: dict[str, float] = {
    "gpu": 1.0 / DEFAULT_GPU_INTERVAL_S,
    "host": 1.0 / DEFAULT_HOST_INTERVAL_S,
    "triton_stats": 1.0 / DEFAULT_TRITON_STATS_INTERVAL_S,
    "metrics": 1.0 / DEFAULT_METRICS_INTERVAL_S,
}
STOP_GRACE_S = 3.0
KILL_WAIT_S = 30.0  # after SIGKILL: the kernel still has to schedule the exit

log = logging.getLogger(__name__)


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
    gpu_info: dict[str, Any]
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
    ) -> SamplerSet:
        """Start the samplers for one run; returns while they start up.

        `rates` are in Hz per source (`gpu`, `host`, `triton_stats`, `metrics`).
        `sim_gpu_state` (for `gpu="sim"`) defaults to `<run_dir>/sim_gpu_state.json`.
        """
        if gpu not in GPU_CHOICES:
            raise UsageError(
                f"unknown GPU telemetry mode {gpu!r}",
                hint=f"choose one of {', '.join(GPU_CHOICES)}",
            )
        run_dir = Path(run_dir)
        (run_dir / TELEMETRY_DIR).mkdir(parents=True, exist_ok=True)
        hz = dict(DEFAULT_RATES_HZ)
        for name, value in (rates or {}).items():
            if value is None or value <= 0:
                raise UsageError(f"sampling rate for {name!r} must be positive, got {value}")
            hz[name] = float(value)

        specs: list[SamplerSpec] = []
        warnings: list[str] = []
        gpu_info, gpu_spec = _gpu_choice(gpu, run_dir, sim_gpu_state, server_pid, hz["gpu"])
        if gpu_info.get("warning"):
            warnings.append(gpu_info["warning"])
            print(f"WARNING: telemetry gpu: {gpu_info['warning']}", file=sys.stderr, flush=True)
        if gpu_spec is not None:
            specs.append(gpu_spec)
        specs.append(SamplerSpec("host", "host", 1.0 / hz["host"], {"server_pid": server_pid}))
        if triton_url:
            specs.append(
                SamplerSpec(
                    "triton_stats",
                    "triton_stats",
                    1.0 / hz["triton_stats"],
                    {"url": triton_url, "models": triton_models},
                )
            )
        if metrics_url:
            specs.append(
                SamplerSpec(
                    "metrics",
                    "metrics",
                    1.0 / hz["metrics"],
                    {"url": metrics_url, "patterns": list(metrics_patterns or TRITON_PATTERNS)},
                )
            )

        sset = cls(run_dir=run_dir, gpu_info=gpu_info, warnings=warnings)
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
                    "simulated": spec.kind == "gpu-sim",
                    "warning": child.warning,
                }
            )
        gpu = {k: v for k, v in self.gpu_info.items() if k != "warning"}
        if self.gpu_info.get("warning"):
            sources.append(
                {
                    "name": "gpu",
                    "file": None,
                    "interval_s": None,
                    "simulated": False,
                    "warning": self.gpu_info["warning"],
                }
            )
        return {"gpu": gpu, "sources": sources}


def _gpu_choice(
    gpu: str,
    run_dir: Path,
    sim_state: Path | None,
    server_pid: int | None,
    rate_hz: float,
) -> tuple[dict[str, Any], SamplerSpec | None]:
    """environment.gpu (plus a `warning` key) and the GPU sampler spec, if any."""
    interval = 1.0 / rate_hz
    if gpu == "none":
        return {"kind": "none", "devices": []}, None
    if gpu == "sim":
        state = Path(sim_state) if sim_state else run_dir / SIM_GPU_STATE_FILE
        devices, why = probe_fake_nvml(state)
        if devices is None:
            return {"kind": "none", "devices": [], "warning": why}, None
        spec = SamplerSpec(
            "gpu", "gpu-sim", interval, {"state_path": str(state), "server_pid": server_pid}
        )
        return {"kind": "simulated", "simulated": True, "devices": devices}, spec
    devices, why = probe_nvml()
    if devices is None:
        # Even when NVML was asked for explicitly, a missing driver is a warning: the
        # rest of the run (latency, host, server telemetry) is still worth having.
        return {"kind": "none", "devices": [], "warning": f"{why} [--gpu {gpu}]"}, None
    spec = SamplerSpec("gpu", "gpu-nvml", interval, {"server_pid": server_pid})
    return {"kind": "nvml", "simulated": False, "devices": devices}, spec
