"""The faults around a run (issue 29): the real CLI in its own process against a real Triton.

Each test asserts the one-line message, the exit code, what was kept, and that
no traceback reached the user.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from loadkit.rundir import load_run
from loadkit.target.server import EmbeddedTriton

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SECOND = 1_000_000_000


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadkit.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _phase_ns(run_dir: Path, name: str) -> int | None:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line being written
        if event.get("kind") == "phase" and event.get("name") == name:
            return int(event["t_ns"])
    return None


def _sleep_until_into_the_load(run_dir: Path, proc: subprocess.Popen[str], seconds: float) -> None:
    """Wait for the run's `load-start` phase, then until `seconds` after it."""
    deadline = time.monotonic() + 60
    load_start = None
    while load_start is None and time.monotonic() < deadline and proc.poll() is None:
        load_start = _phase_ns(run_dir, "load-start")
        time.sleep(0.05)
    assert load_start is not None, "the load never started"
    time.sleep(max(0.0, (load_start + seconds * SECOND - time.time_ns()) / 1e9))


def _no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text, text[-3000:]


def test_target_sigkilled_mid_run_is_an_outage_exit_3_and_named_with_its_start(
    tmp_path: Path,
) -> None:
    # GIVEN our own Triton (it is killed) and an 18 s run at 50/s
    with EmbeddedTriton(log_path=tmp_path / "triton.log") as triton:
        argv = [
            sys.executable,
            "-m",
            "loadkit.cli",
            "run",
            str(REPO / "scenarios" / "soak.py"),
            "--target",
            triton.http_url,
            "--set",
            "rate=50",
            "--set",
            "timeout_s=2",
            "--duration",
            "18",
            "--out",
            str(tmp_path),
            "--run-id",
            "killed",
            "--no-telemetry",
            "--no-progress",
        ]
        run_dir = tmp_path / "killed"
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # WHEN the server is SIGKILLed 6 s into the load
            _sleep_until_into_the_load(run_dir, proc, 6)
            os.kill(triton.pid, signal.SIGKILL)
            killed_ns = time.time_ns()
            out, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print(out, err)

    # THEN one line first says the target stopped answering, and the exit status is 3
    _no_traceback(out, err)
    assert out.splitlines()[0].startswith("TARGET UNREACHABLE: The target stopped answering at")
    assert "did not come back" in out.splitlines()[0]
    assert proc.returncode == 3, (out, err)
    assert "ERROR: the target was unreachable for" in err
    # AND everything recorded is kept: a complete run with the errors and the server's words
    run = load_run(run_dir)
    assert run.status == "complete"
    load = run.load_intervals
    assert int(load["ok"].sum()) > 5 * 40 and int(load["errors"].sum()) > 5 * 40

    # AND the analysis names the outage with its start (to the second) as its first finding
    done = _cli("analyze", str(run_dir))
    _no_traceback(done.stdout, done.stderr)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0].startswith("TARGET UNREACHABLE:")
    analysis: dict[str, Any] = json.loads((run_dir / "analysis.json").read_text())
    top = analysis["findings"][0]
    assert top["cause"] == "target_unreachable"
    evidence = {e["name"]: e["value"] for e in top["evidence"]}
    killed_s = (killed_ns - run.start_ns) / 1e9
    assert killed_s - 1.0 <= evidence["start_s"] <= killed_s + 1.5, (killed_s, evidence)
    assert evidence["came_back"] == 0
    assert analysis["headline"].startswith("FAIL. The target stopped answering at")
    print(f"killed at {killed_s:.1f} s; the outage found from {evidence['start_s']:.0f} s")


def _mount_namespace_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs in a mount namespace of its own"
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux) for a mount namespace"
    probe = subprocess.run(
        ["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a new mount namespace: {probe.stderr.strip()}"
    return None


def test_disk_full_mid_run_is_one_line_the_run_aborted_and_what_was_written_kept(
    tmp_path: Path,
) -> None:
    why = _mount_namespace_skip_reason()
    if why:
        pytest.skip(why)
    # GIVEN --out on a 300 KiB tmpfs (in a mount namespace of the test's own) that a
    # 20 s run at 100/s fills in about 12 s
    mnt, kept = tmp_path / "mnt", tmp_path / "kept"
    mnt.mkdir()
    kept.mkdir()
    with EmbeddedTriton(log_path=tmp_path / "triton.log") as triton:
        run = " ".join(
            [
                sys.executable,
                "-m",
                "loadkit.cli",
                "run",
                str(REPO / "scenarios" / "soak.py"),
                "--target",
                triton.http_url,
                "--set rate=100 --duration 20 --no-progress --gpu none",
                f"--out {mnt} --run-id full",
            ]
        )
        script = (
            "mount --make-rprivate / && "
            f"mount -t tmpfs -o size=300k tmpfs {mnt} && "
            f"{{ {run} > {tmp_path}/stdout 2> {tmp_path}/stderr; echo $? > {tmp_path}/rc; }}; "
            # what was kept, copied out of the namespace before the tmpfs goes with it
            f"cp -a {mnt}/full {kept}/"
        )
        done = subprocess.run(
            ["unshare", "--mount", "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    out, err = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    rc = int((tmp_path / "rc").read_text())
    print(out, err)

    # THEN before the run, a warning that the disk may not hold it
    _no_traceback(out, err)
    assert "WARNING: " in err and "free on the disk holding" in err
    # AND one ERROR line: which file, how much was recorded, until when; exit status 2
    errors = [line for line in err.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, err
    line = errors[0]
    assert f"the disk holding {mnt}/full is full while writing " in line
    assert "KiB recorded, load counters until " in line and "of the 20 s run" in line
    assert rc == 2
    # AND the run is marked aborted with the reason, and what was written is kept
    run_dir = kept / "full"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "aborted"
    assert manifest["abort"]["by"] == "disk_full" and manifest["abort"]["message"] in line
    assert not (run_dir / ".loadkit-reserve").exists()
    loaded = load_run(run_dir)
    assert int(loaded.load_intervals["ok"].sum()) > 300
    # AND it analyzes: the headline says why it stopped
    analyzed = _cli("analyze", str(run_dir))
    _no_traceback(analyzed.stdout, analyzed.stderr)
    assert analyzed.returncode == 0, analyzed.stderr[-2000:]
    analysis = json.loads((run_dir / "analysis.json").read_text())
    assert analysis["run"]["status"] == "aborted"
    assert "the disk holding" in analysis["headline"] and "is full" in analysis["headline"]


def test_target_restarted_mid_run_came_back_and_its_counters_reset(tmp_path: Path) -> None:
    # GIVEN a 24 s run at 50/s with Triton's statistics sampled, and a server that is
    # SIGKILLed 5 s into the load and started again on the same ports
    first = EmbeddedTriton(log_path=tmp_path / "triton-1.log")
    first.start()
    ports = {s: first._port(s) for s in ("http", "grpc", "metrics")}
    second: EmbeddedTriton | None = None
    argv = [
        *(sys.executable, "-m", "loadkit.cli", "run", str(REPO / "scenarios" / "soak.py")),
        *("--target", first.http_url, "--set", "rate=50", "--set", "timeout_s=2"),
        *("--duration", "24", "--out", str(tmp_path), "--run-id", "restarted"),
        *("--gpu", "none", "--no-progress", "--max-unreachable", "100"),
    ]
    run_dir = tmp_path / "restarted"
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _sleep_until_into_the_load(run_dir, proc, 5)
        os.kill(first.pid, signal.SIGKILL)
        first.stop()
        time.sleep(2.0)  # the restart takes a while, as a real one does (the outage's length)
        second = EmbeddedTriton(
            log_path=tmp_path / "triton-2.log",
            http_port=ports["http"],
            grpc_port=ports["grpc"],
            metrics_port=ports["metrics"],
        )
        second.start()
        back_ns = time.time_ns()
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        first.stop()
        if second is not None:
            second.stop()
    print(out, err)

    # THEN the first line says the target stopped answering and came back; exit 0
    # (--max-unreachable 100), the run complete, nothing lost before or after
    _no_traceback(out, err)
    first_line = out.splitlines()[0]
    assert first_line.startswith("TARGET UNREACHABLE: The target stopped answering from ")
    assert "it came back at" in first_line
    assert proc.returncode == 0, (out, err)
    run = load_run(run_dir)
    assert run.status == "complete"
    load = run.load_intervals
    after = load[load["t_ns"] > back_ns + SECOND]
    assert int(after["ok"].sum()) > 0  # answers again after the restart

    # AND the analysis: the outage came back, Triton's counters reset and were handled
    done = _cli("analyze", str(run_dir))
    _no_traceback(done.stdout, done.stderr)
    assert done.returncode == 0, done.stderr[-2000:]
    analysis = json.loads((run_dir / "analysis.json").read_text())
    top = analysis["findings"][0]
    evidence = {e["name"]: e["value"] for e in top["evidence"]}
    assert top["cause"] == "target_unreachable" and evidence["came_back"] == 1, [
        (f["cause"], f["confidence"], f["summary"][:160]) for f in analysis["findings"]
    ]
    back_s = (back_ns - run.start_ns) / 1e9
    assert evidence["back_s"] <= back_s + 2.0, (evidence, back_s)
    assert any("counter reset" in n for n in analysis["notes"]), analysis["notes"]


def _opened_a_run_file(pid: int, run_dir: Path) -> bool:
    """The process has a file of the run directory open: the analysis is reading it."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    return any(link.startswith(str(run_dir) + "/") for link in links)


def test_analyze_interrupted_keeps_the_previous_analysis(tmp_path: Path) -> None:
    # GIVEN a 20-minute synthetic run (a few seconds to analyze) with a previous analysis.json
    from loadkit.testing.synthetic import RunSpec, write_run

    run_dir = write_run(RunSpec(duration_s=1200, rate_rps=150), tmp_path)
    previous = run_dir / "analysis.json"
    previous.write_text('{"previous": true}\n')
    # WHEN `loadkit analyze` gets SIGINT (Ctrl-C) while it reads the run. As from a
    # terminal: SIGINT at its default (a test suite started in the background by a
    # non-interactive shell, as CI may be, inherits SIGINT ignored, and Python then
    # never turns it into KeyboardInterrupt: the analysis ran to the end, exit 0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadkit.cli", "analyze", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if _opened_a_run_file(proc.pid, run_dir):
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the analysis finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    # THEN exit 130, one line, no traceback, and the previous analysis.json as it was
    _no_traceback(out, err)
    assert proc.returncode == 130, (out, err)
    assert err.strip().splitlines()[-1].startswith("Interrupted")
    assert previous.read_text() == '{"previous": true}\n'
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]
