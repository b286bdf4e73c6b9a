"""Runs the simulated GPU beside Triton: measure busy time, step, publish state.

Every ~100 ms the runner reads Triton's cumulative per-execution compute time
(`batch_stats[*].compute_infer.ns` of the model: the real busy time, which
grows when the model is slowed), steps `SimGpuModel`, and atomically rewrites
the state file (temp + `os.replace`) that both the ranker model (its
`clock_factor`) and `fake_nvml` read. Fault and throttle transitions go to the
run's events log as ground truth (`kind: fault`, `simulated: true`).

It runs in its own process (`python -m loadkit.telemetry.simgpu_runner`); `start_simulated_gpu` writes the
initial state before returning, so Triton can be started right after it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from loadkit import lifeline
from loadkit.rundir.writer import append_event, now_ns
from loadkit.telemetry.http import HttpGetError, KeepAliveGetter
from loadkit.telemetry.process import StopFlag
from loadkit.telemetry.simgpu import (
    CoolingFaultSchedule,
    SimGpuModel,
    SimGpuParams,
    SimGpuState,
    Transition,
)
from loadkit.telemetry.triton_stats import flatten_model_stats

STEP_INTERVAL_S = 0.1

timer = time.monotonic


def write_state(path: Path, state: SimGpuState) -> None:
    """Atomic replace, so readers see the old or the new state, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state.to_json(), f, separators=(",", ":"))
    os.replace(tmp, path)


class BusyMeter:
    """Busy fraction of the model from Triton's cumulative compute time."""

    def __init__(self, triton_url: str | None, model: str) -> None:
        self._http = KeepAliveGetter(triton_url, timeout_s=0.5) if triton_url else None
        self._path = f"/v2/models/{quote(model, safe='')}/stats"
        self._prev_ns: int | None = None
        self.reachable = False

    def busy_ns(self) -> int | None:
        """Cumulative busy ns since the model loaded, or None if Triton is not answering."""
        if self._http is None:
            return None
        try:
            data = self._http.get_json(self._path)
        except HttpGetError:
            self.reachable = False
            return None
        self.reachable = True
        return sum(
            flatten_model_stats(entry)[0]["batch_compute_infer_ns"]
            for entry in data.get("model_stats") or []
        )

    def fraction(self, dt_s: float) -> float:
        cur = self.busy_ns()
        prev, self._prev_ns = self._prev_ns, cur
        if cur is None or prev is None or cur < prev or dt_s <= 0:
            return 0.0  # first reading, Triton down or restarted: no known load
        return (cur - prev) / (dt_s * 1e9)

    def close(self) -> None:
        if self._http is not None:
            self._http.close()


@dataclass(frozen=True)
class SimGpuConfig:
    state_path: str
    triton_url: str | None
    model: str = "ranker"
    run_dir: str | None = None
    params: SimGpuParams = field(default_factory=SimGpuParams)
    faults: CoolingFaultSchedule = field(default_factory=CoolingFaultSchedule)
    step_interval_s: float = STEP_INTERVAL_S


def _log_transitions(
    run_dir: str | None, transitions: list[Transition], model: SimGpuModel
) -> None:
    if run_dir is None:
        return
    for tr in transitions:
        append_event(
            run_dir,
            "fault",
            tr.name,
            action=tr.action,
            simulated=True,
            source="sim_gpu",
            sim_t_s=round(tr.t_s, 3),
            temp_c=round(model.temp_c, 2),
            sm_clock_mhz=model.state.sm_clock_mhz,
        )


def simulate(config: SimGpuConfig, stop: StopFlag) -> None:
    """The runner's loop (the body of the simulated-GPU process)."""
    model = SimGpuModel(config.params, config.faults)
    meter = BusyMeter(config.triton_url, config.model)
    state_path = Path(config.state_path)
    meter.fraction(0.0)  # baseline
    last = timer()
    next_tick = last + config.step_interval_s
    try:
        while not stop.wait(max(0.0, next_tick - timer())):
            now = timer()
            busy = meter.fraction(now - last)
            transitions = model.step(now - last, busy)
            last = now
            write_state(state_path, model.state)
            _log_transitions(config.run_dir, transitions, model)
            next_tick += config.step_interval_s
            if next_tick < timer():
                next_tick = timer() + config.step_interval_s
    finally:
        # Close open ground-truth intervals so every start has an end.
        ends = []
        if model.throttled:
            ends.append(Transition("thermal-throttle", "end", model.t_s))
        if model.fault:
            ends.append(Transition("cooling-fault", "end", model.t_s))
        _log_transitions(config.run_dir, ends, model)
        meter.close()


def config_to_json(config: SimGpuConfig) -> str:
    return json.dumps(asdict(config))


def config_from_json(text: str) -> SimGpuConfig:
    data = json.loads(text)
    data["params"] = SimGpuParams(**data["params"])
    data["faults"] = CoolingFaultSchedule(**data["faults"])
    return SimGpuConfig(**data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadkit.telemetry.simgpu_runner")
    parser.add_argument("--config", required=True, help="SimGpuConfig as JSON")
    args = parser.parse_args(argv)
    stop = StopFlag()
    stop.install()
    simulate(config_from_json(args.config), stop)
    return 0


class SimulatedGpu:
    """Handle on a running simulated GPU process."""

    def __init__(self, config: SimGpuConfig, process: subprocess.Popen[bytes]) -> None:
        self.config = config
        self.process = process

    @property
    def state_path(self) -> Path:
        return Path(self.config.state_path)

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def describe(self) -> dict[str, Any]:
        """For the manifest (`environment.gpu.simulator`)."""
        return {
            "kind": "simulated",
            "state_file": self.config.state_path,
            "model": self.config.model,
            "step_interval_s": self.config.step_interval_s,
            "cooling_fault": asdict(self.config.faults),
            "params": asdict(self.config.params),
        }

    def stop(self) -> None:
        """SIGTERM by PID (the runner logs open intervals' ends), SIGKILL if stuck."""
        for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
            if self.process.poll() is not None:
                return
            try:
                os.kill(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(wait_s)
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> SimulatedGpu:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_simulated_gpu(
    state_path: str | os.PathLike[str],
    triton_url: str | None,
    model: str = "ranker",
    run_dir: str | os.PathLike[str] | None = None,
    cooling_fault_period_s: float | None = None,
    cooling_fault_duration_s: float = 5.0,
    cooling_fault_offset_s: float | None = None,
    params: SimGpuParams | None = None,
    step_interval_s: float = STEP_INTERVAL_S,
) -> SimulatedGpu:
    """Start the simulated GPU; the state file exists (clock_factor 1.0) on return.

    `triton_url` may name a server that is not up yet: until it answers, the
    GPU is idle. The first cooling fault starts one period in (or at
    `cooling_fault_offset_s`). Ground truth goes to `run_dir`'s events log.
    """
    faults = CoolingFaultSchedule(
        period_s=cooling_fault_period_s,
        duration_s=cooling_fault_duration_s,
        offset_s=cooling_fault_offset_s,
    )
    config = SimGpuConfig(
        state_path=str(Path(state_path).resolve()),
        triton_url=triton_url,
        model=model,
        run_dir=str(run_dir) if run_dir is not None else None,
        params=params or SimGpuParams(),
        faults=faults,
        step_interval_s=step_interval_s,
    )
    Path(config.state_path).parent.mkdir(parents=True, exist_ok=True)
    write_state(Path(config.state_path), SimGpuModel(config.params, faults).state)
    argv = [
        sys.executable,
        "-m",
        "loadkit.telemetry.simgpu_runner",
        "--config",
        config_to_json(config),
    ]
    # SIGTERM when we die: the runner logs the open intervals' ends and exits.
    process = lifeline.popen(argv, death_signal=signal.SIGTERM, stdin=subprocess.DEVNULL)
    if run_dir is not None:
        append_event(
            run_dir,
            "note",
            "simulated-gpu",
            message="GPU telemetry is simulated (loadkit thermal/clock model)",
            t_ns=now_ns(),
            cooling_fault_period_s=cooling_fault_period_s,
            cooling_fault_duration_s=cooling_fault_duration_s if cooling_fault_period_s else None,
        )
    return SimulatedGpu(config, process)


if __name__ == "__main__":
    sys.exit(main())
