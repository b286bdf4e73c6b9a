"""Runs the simulated GPU beside Triton: measure busy time, step, publish state.

Every ~100 ms the runner reads Triton's cumulative per-execution compute time
(`batch_stats[*].compute_infer.ns` of the model: the real busy time, which
grows when the model is slowed), steps `SimGpuModel`, and atomically rewrites
the state file (temp + `os.replace`) that both the ranker model (its
`clock_factor`) and `fake_nvml` read. Fault and throttle transitions go to the
run's events log as ground truth (`kind: fault`, `simulated: true`).

Models that share the GPU (`shared_models`) are measured alike: the GPU's
utilization is all of theirs together, and each model's share of the GPU's
time is what the others leave it (`SimGpuState.shares`): a model reads its
share and its kernels take 1/share as long, as kernels of two processes
time-slice one GPU's SMs. Extra devices (`extra_devices`) are GPUs beside it
with a background load of their own (another job), and `reason_bits=False`
hides the clocks-event reasons, as a driver or exporter that does not read them.

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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from loadkit import lifeline
from loadkit.rundir.writer import append_event, now_ns
from loadkit.telemetry.http import HttpGetError, KeepAliveGetter
from loadkit.telemetry.process import StopFlag
from loadkit.telemetry.simgpu import (
    CoolingFaultSchedule,
    PowerCapSchedule,
    SimGpuModel,
    SimGpuParams,
    SimGpuState,
    Transition,
)
from loadkit.telemetry.triton_stats import flatten_model_stats

STEP_INTERVAL_S = 0.1
# A model keeps at least this share of the GPU's time however busy the others are
# (time-slicing gives each process its turn).
MIN_SHARE = 0.25

timer = time.monotonic


def write_state(path: Path, state: SimGpuState) -> None:
    """Atomic replace, so readers see the old or the new state, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state.to_json(), f, separators=(",", ":"))
    os.replace(tmp, path)


class BusyMeter:
    """Busy fraction of each model on the GPU from Triton's cumulative compute time."""

    def __init__(self, triton_url: str | None, model: str, shared: tuple[str, ...] = ()) -> None:
        self._http = KeepAliveGetter(triton_url, timeout_s=0.5) if triton_url else None
        self.models = (model, *shared)
        # One model: its own statistics; several: the server's, every model at once.
        self._path = (
            f"/v2/models/{quote(model, safe='')}/stats" if not shared else "/v2/models/stats"
        )
        self._prev: dict[str, int] | None = None
        self.reachable = False

    def busy_ns(self) -> dict[str, int] | None:
        """Cumulative busy ns per model since it loaded, or None if Triton is not answering."""
        if self._http is None:
            return None
        try:
            data = self._http.get_json(self._path)
        except HttpGetError:
            self.reachable = False
            return None
        self.reachable = True
        out = dict.fromkeys(self.models, 0)
        for entry in data.get("model_stats") or []:
            name = str(entry.get("name", self.models[0]))
            if name in out:
                out[name] += flatten_model_stats(entry)[0]["batch_compute_infer_ns"]
        return out

    def fractions(self, dt_s: float) -> dict[str, float]:
        """Each model's busy share of the last `dt_s` (0 where unknown)."""
        cur = self.busy_ns()
        prev, self._prev = self._prev, cur
        out = dict.fromkeys(self.models, 0.0)
        if cur is None or prev is None or dt_s <= 0:
            return out  # first reading or Triton down: no known load
        for name in self.models:
            delta = cur[name] - prev.get(name, 0)
            if delta >= 0:  # a restart: no known load
                out[name] = delta / (dt_s * 1e9)
        return out

    def fraction(self, dt_s: float) -> float:
        """All the models' busy share together (the GPU's utilization)."""
        return sum(self.fractions(dt_s).values())

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
    # Other models on this GPU: they take its time from one another (`SimGpuState.shares`).
    shared_models: tuple[str, ...] = ()
    power_cap: PowerCapSchedule = field(default_factory=PowerCapSchedule)
    # GPUs beside this one (index 1, 2, ...), each with this background busy fraction.
    extra_devices: tuple[float, ...] = ()
    reason_bits: bool = True


def shares(busy: dict[str, float], last: dict[str, float] | None = None) -> dict[str, float]:
    """Each model's share of the GPU's time: what the other models' work leaves it.

    A model's work is its busy time x the share it had (`last`; 1 where unknown): a
    model slowed to half its speed is busy twice as long for the same kernels, and
    counting that time whole would let two models squeeze each other to the floor.
    """
    work = {name: b * (last or {}).get(name, 1.0) for name, b in busy.items()}
    total = sum(work.values())
    return {name: round(max(MIN_SHARE, 1.0 - (total - own)), 4) for name, own in work.items()}


def beside(config: SimGpuConfig) -> list[SimGpuModel]:
    """The GPUs beside the model's (index 1, 2, ...), each with a UUID of its own."""
    base = config.params.uuid
    return [
        SimGpuModel(replace(config.params, uuid=f"{base[:-1]}{(int(base[-1], 16) + i) % 16:x}"))
        for i in range(1, len(config.extra_devices) + 1)
    ]


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


def _published(
    config: SimGpuConfig,
    model: SimGpuModel,
    others: list[SimGpuModel],
    busy: dict[str, float],
    last_shares: dict[str, float] | None = None,
) -> SimGpuState:
    """The state file's content: this GPU, the GPUs beside it, the models' shares."""
    state = model.state
    state.reasons_supported = config.reason_bits
    state.devices = []
    for extra in others:
        extra.state.reasons_supported = config.reason_bits
        state.devices.append(extra.state.to_json())
    state.shares = shares(busy, last_shares) if config.shared_models else {}
    return state


def simulate(config: SimGpuConfig, stop: StopFlag) -> None:
    """The runner's loop (the body of the simulated-GPU process)."""
    model = SimGpuModel(config.params, config.faults, config.power_cap)
    others = beside(config)
    meter = BusyMeter(config.triton_url, config.model, config.shared_models)
    state_path = Path(config.state_path)
    meter.fractions(0.0)  # baseline
    state = model.state
    last = timer()
    next_tick = last + config.step_interval_s
    try:
        while not stop.wait(max(0.0, next_tick - timer())):
            now = timer()
            busy = meter.fractions(now - last)
            transitions = model.step(now - last, sum(busy.values()))
            for extra, background in zip(others, config.extra_devices, strict=True):
                extra.step(now - last, background)
            last = now
            state = _published(config, model, others, busy, state.shares)
            write_state(state_path, state)
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
        if model.capped:
            ends.append(Transition("power-cap", "end", model.t_s))
        _log_transitions(config.run_dir, ends, model)
        meter.close()


def config_to_json(config: SimGpuConfig) -> str:
    return json.dumps(asdict(config))


def config_from_json(text: str) -> SimGpuConfig:
    data = json.loads(text)
    data["params"] = SimGpuParams(**data["params"])
    data["faults"] = CoolingFaultSchedule(**data["faults"])
    if "power_cap" in data:
        data["power_cap"] = PowerCapSchedule(**data["power_cap"])
    for key in ("shared_models", "extra_devices"):
        if key in data:
            data[key] = tuple(data[key])
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
            "power_cap": asdict(self.config.power_cap),
            "shared_models": list(self.config.shared_models),
            "extra_devices": list(self.config.extra_devices),
            "reason_bits": self.config.reason_bits,
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
    *,
    shared_models: tuple[str, ...] = (),
    power_cap: PowerCapSchedule | None = None,
    extra_devices: tuple[float, ...] = (),
    reason_bits: bool = True,
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
        shared_models=tuple(shared_models),
        power_cap=power_cap or PowerCapSchedule(),
        extra_devices=tuple(extra_devices),
        reason_bits=reason_bits,
    )
    Path(config.state_path).parent.mkdir(parents=True, exist_ok=True)
    initial = SimGpuModel(config.params, faults, config.power_cap)
    extras = beside(config)
    write_state(Path(config.state_path), _published(config, initial, extras, {}))
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
