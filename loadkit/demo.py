"""The whole story in one call: real Triton, simulated GPU with a cooling fault, a 2x burst,
telemetry, analysis and the HTML report.

Nothing in the report is written in here: the cooling fault and the burst are
injected, and what the report says about them is what the analyzer found.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadkit.errors import UsageError
from loadkit.load.catalog import builtin_path
from loadkit.recording import Recording
from loadkit.rundir import load_run
from loadkit.rundir.layout import ANALYSIS_FILE, REPORT_FILE

DEMO_SCENARIO = "burst_2x"


@dataclass(frozen=True)
class DemoSettings:
    """The demo's knobs; defaults tell the story in about 90 s on a 2-core machine."""

    out_dir: str = "reports"
    run_id: str | None = None
    base_rate: float = 120.0
    multiplier: float = 2.0
    steady_s: float = 25.0
    rise_s: float = 10.0
    hold_s: float = 15.0
    fall_s: float = 5.0
    recover_s: float = 35.0
    cooling_fault_period_s: float = 10.0
    cooling_fault_duration_s: float = 3.5
    max_queue_delay_us: int = 2000
    max_batch_size: int = 16
    # Simulated accelerator time of one batch. Throttled (x1.8), the batches grow and the
    # P99 of the throttled windows lands far above the SLO, the others well under it: the
    # same verdict (FAIL) and a P99 sawtooth on every run, not a P99 within a few ms of the
    # 50 ms SLO that flips with the host's noise (issue 26: 43.6 ms on one run, 52.7 on
    # the next with 6000 + 400 us). The queueing model (loadkit.testing.synthetic) gives
    # P99 ~29 ms outside the throttled windows and ~72 ms in them; the real host adds
    # 15-25 ms of tail on 2 cores.
    gpu_time_us_per_batch: int = 10000
    gpu_time_us_per_item: int = 400
    seed: int = 1
    show_progress: bool = True

    @property
    def duration_s(self) -> float:
        return self.steady_s + self.rise_s + self.hold_s + self.fall_s + self.recover_s


@dataclass(frozen=True)
class DemoResult:
    run_dir: Path
    report_path: Path | None
    status: str


def find_scenario(name: str = DEMO_SCENARIO) -> Path:
    """The built-in scenario the demo runs (shipped inside the package)."""
    path = builtin_path(name)
    if path is None:
        raise UsageError(
            f"the built-in scenario {name} is missing from this loadkit installation",
            hint="reinstall loadkit: pip install --force-reinstall 'loadkit[target]'",
        )
    return path


def _say(step: str) -> None:
    print(step, file=sys.stderr, flush=True)


def run_demo(
    settings: DemoSettings | None = None,
    say: Callable[[str], None] = _say,
) -> DemoResult:
    """Run the demo end to end; every process started here is stopped before returning."""
    from loadkit.load.orchestrator import TelemetryOptions, run_scenario
    from loadkit.target import EmbeddedTriton
    from loadkit.target.runtime import find_runtime

    s = settings or DemoSettings()
    find_runtime()  # the `target` extra: say how to get it before anything starts
    scenario = find_scenario()
    workdir = Path(tempfile.mkdtemp(prefix="loadkit-demo-"))
    state_path = workdir / "sim_gpu_state.json"

    say(
        f"[1/4] starting the real Triton server (ranker model, dynamic batching "
        f"max_batch_size={s.max_batch_size}, max_queue_delay={s.max_queue_delay_us} us) on 127.0.0.1"
    )
    triton = EmbeddedTriton(
        max_queue_delay_us=s.max_queue_delay_us,
        max_batch_size=s.max_batch_size,
        instances=1,
        sim_gpu_state=state_path,
        log_path=workdir / "tritonserver.log",
        model_params={
            "gpu_time_us_per_batch": s.gpu_time_us_per_batch,
            "gpu_time_us_per_item": s.gpu_time_us_per_item,
        },
    )
    with triton:
        say(f"      Triton ready: {triton.http_url} (pid {triton.pid})")

        def start_gpu(recording: Recording) -> None:
            say(
                f"      simulated GPU: cooling fault every {s.cooling_fault_period_s:g} s "
                f"for {s.cooling_fault_duration_s:g} s (ground truth in events.jsonl)"
            )
            # The recording stops it, after the samplers that read it.
            recording.start_simulated_gpu(
                state_path,
                triton.http_url,
                model=triton.model_name,
                cooling_fault_period_s=s.cooling_fault_period_s,
                cooling_fault_duration_s=s.cooling_fault_duration_s,
                note="GPU is simulated: a thermal model driven by the ranker's real busy time; "
                "throttling really slows the model's (simulated) accelerator time",
                describe=False,  # its schedule is in the manifest's `demo`
            )

        say(
            f"[2/4] running {scenario.name}: {s.base_rate:g}/s steady, {s.multiplier:g}x within "
            f"{s.rise_s:g} s, hold {s.hold_s:g} s, back, recover ({s.duration_s:.0f} s in all)"
        )
        params = {
            "base_rate": s.base_rate,
            "multiplier": s.multiplier,
            "steady_s": s.steady_s,
            "rise_s": s.rise_s,
            "hold_s": s.hold_s,
            "fall_s": s.fall_s,
            "recover_s": s.recover_s,
        }
        run_dir = run_scenario(
            scenario,
            triton.http_url,
            seed=s.seed,
            out_dir=s.out_dir,
            run_id=s.run_id,
            params=params,
            show_progress=s.show_progress,
            before_start=start_gpu,
            extra_manifest={
                "target": {"embedded": True, "model": triton.model_name},
                "environment": {"server": triton.describe()},
                "demo": {
                    "cooling_fault_period_s": s.cooling_fault_period_s,
                    "cooling_fault_duration_s": s.cooling_fault_duration_s,
                },
            },
            telemetry=TelemetryOptions(
                gpu="sim",
                triton_url=triton.http_url,
                metrics_url=triton.metrics_url,
                server_pid=triton.pid,
                extra={"sim_gpu_state": state_path},
            ),
            command_line=list(sys.argv),
        )
        say("      stopping Triton (while the run is analyzed)")
        triton.stop_in_background()
        return _analyze_and_report(run_dir, say)  # leaving `with` waits for Triton to be gone


def _analyze_and_report(run_dir: Path, say: Callable[[str], None]) -> DemoResult:
    from loadkit.analysis.pipeline import analyze_run
    from loadkit.report import html
    from loadkit.rundir.atomic import write_atomic

    run = load_run(run_dir)
    say(f"[3/4] analyzing {run_dir}")
    started = time.monotonic()
    analysis = analyze_run(run)
    analysis.save(run_dir / ANALYSIS_FILE)
    say(f"      analysis done in {time.monotonic() - started:.1f} s")
    say("[4/4] writing the HTML report")
    report = run_dir / REPORT_FILE
    write_atomic(report, html.render(run, analysis))
    return DemoResult(run_dir=run_dir, report_path=report, status=run.status)
