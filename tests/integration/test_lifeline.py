"""Every process loadkit starts dies with its parent, SIGKILL included; stop signals work.

Real processes and real signals: the parent is SIGKILLed (no handler, no
atexit can run), then within 2 s no descendant may remain and, for a load
test, no request may reach the target any more (counted at the server, by
Triton's own statistics).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from loadkit.target.server import EmbeddedTriton

pytestmark = pytest.mark.integration

DEATH_S = 2.0  # every descendant gone, and no more requests, within this


def _which(pids: list[int]) -> list[str]:
    """What each process left running is (its command line and state), for the failure message."""
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            out.append(f"{pid} [{p.status()}] {' '.join(p.cmdline())[:300]}")
        except psutil.Error:
            out.append(f"{pid} (gone by now)")
    return out


def _alive(pids: set[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return sorted(alive)


def _descendants(pid: int) -> set[int]:
    try:
        return {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def _kill_and_watch(
    proc: subprocess.Popen, seen: set[int], add_descendants: bool = True
) -> tuple[float, list[int]]:
    """SIGKILL the parent; (seconds until none of `seen` was left, those left after DEATH_S)."""
    if add_descendants:
        seen |= _descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = time.monotonic()
    while _alive(seen) and time.monotonic() - killed < DEATH_S:
        time.sleep(0.05)
    return time.monotonic() - killed, _alive(seen)


def _cleanup(pids: set[int]) -> None:
    for pid in _alive(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _python(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


# ------------------------------------------------------------------ the mechanism
def test_a_sampler_that_flushes_on_its_parents_death_still_exits_within_a_second() -> None:
    # GIVEN a parent whose child has SIGTERM as its death signal (a telemetry
    # sampler: it flushes first) and is stuck in a call that outlasts the signal
    # (a sleep resumes after the handler, PEP 475; like a sample in flight)
    parent = _python(
        """
        import signal, sys, time
        from loadkit import lifeline
        child = lifeline.popen([sys.executable, "-c", (
            "import time\\n"
            "from loadkit.telemetry.process import StopFlag\\n"
            "StopFlag().install()\\n"
            "print('ready', flush=True)\\n"
            "time.sleep(120)\\n"
        )], death_signal=signal.SIGTERM)
        print(child.pid, flush=True)
        time.sleep(120)
        """
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert parent.stdout.readline().strip() == "ready"  # its handler is installed
        # WHEN the parent is SIGKILLed
        os.kill(parent.pid, signal.SIGKILL)
        killed = time.monotonic()
        time.sleep(0.3)
        # THEN the child caught the SIGTERM (it would be gone at once otherwise) ...
        assert _alive({child}) == [child], "the sampler did not catch its death signal"
        # ... and is gone by ORPHAN_EXIT_S (1 s), although its call had 2 minutes left
        while _alive({child}) and time.monotonic() - killed < DEATH_S:
            time.sleep(0.05)
        assert not _alive({child}), f"still running {DEATH_S} s after: {_which([child])}"
    finally:
        _cleanup({child, parent.pid})


def test_child_forked_from_a_finished_thread_lives_until_its_parent_dies() -> None:
    # GIVEN a parent that starts a child from a short-lived thread (PDEATHSIG
    # would fire when that thread ends, were it forked there)
    parent = _python(
        """
        import sys, threading, time
        from loadkit import lifeline
        out = []
        t = threading.Thread(target=lambda: out.append(
            lifeline.popen([sys.executable, "-c", "import time; time.sleep(120)"])))
        t.start(); t.join()
        print(out[0].pid, flush=True)
        time.sleep(120)
        """
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        time.sleep(1.0)
        assert _alive({child}) == [child], "the child died with the thread that started it"
        # WHEN the parent is SIGKILLed THEN the child follows within 2 s
        took, left = _kill_and_watch(parent, {child})
        assert not left, f"still running {DEATH_S} s after the parent's SIGKILL: {_which(left)}"
    finally:
        _cleanup({child, parent.pid})


def test_group_guard_kills_the_grandchildren_and_release_disarms_it() -> None:
    # GIVEN a child leading a process group with a grandchild (as tritonserver and its stubs)
    parent = _python(
        """
        import json, sys, time
        import psutil
        from loadkit import lifeline

        def group_with_grandchild():
            leader = lifeline.popen(["sh", "-c", "sleep 120 & wait"], start_new_session=True)
            while not psutil.Process(leader.pid).children():
                time.sleep(0.01)
            return leader.pid, psutil.Process(leader.pid).children()[0].pid

        leader, grandchild = group_with_grandchild()
        guard = lifeline.GroupGuard(leader)
        kept, kept_grandchild = group_with_grandchild()
        lifeline.GroupGuard(kept).release()
        print(json.dumps([leader, grandchild, guard.pid, kept, kept_grandchild]), flush=True)
        time.sleep(120)
        """
    )
    assert parent.stdout is not None
    leader, grandchild, watcher, kept, kept_grandchild = json.loads(parent.stdout.readline())
    group = {grandchild, leader, watcher}
    try:
        # the released group's leader dies too (by PDEATHSIG), so it is watched with the rest:
        # checked once right after the guarded group went, it could still be exiting
        took, left = _kill_and_watch(parent, group | {kept}, add_descendants=False)
        assert not left, f"still running {DEATH_S} s after the parent's SIGKILL: {_which(left)}"
        # the released guard did nothing: only PDEATHSIG reached its leader, not the grandchild
        assert _alive({kept_grandchild}) == [kept_grandchild]
    finally:
        _cleanup(group | {kept, kept_grandchild, parent.pid})


# ------------------------------------------------------------------ loadkit's commands
@pytest.fixture(scope="module")
def triton() -> Iterator[EmbeddedTriton]:
    with EmbeddedTriton(max_batch_size=16, model_params={"gpu_time_us_per_batch": 1000}) as t:
        yield t


def _requests_served(server: EmbeddedTriton) -> int:
    with urllib.request.urlopen(f"{server.http_url}/v2/models/ranker/stats", timeout=5) as r:
        stats = json.loads(r.read())["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"]) + int(stats["fail"]["count"])


def _loadkit(*argv: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loadkit.cli", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **kwargs,  # type: ignore[arg-type]
    )


def _wait_for_load(proc: subprocess.Popen[str], run_dir: Path, seen: set[int], n: int) -> None:
    """Until `n` Locust processes have recorded latency (load is flowing)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        seen |= _descendants(proc.pid)
        hlogs = list((run_dir / "latency").glob("*.hlog")) if run_dir.exists() else []
        if sum(1 for h in hlogs if h.stat().st_size > 1500) >= n:
            return
        time.sleep(0.2)
    raise AssertionError("no load was recorded within 90 s")


@pytest.mark.parametrize("workers", [0, 2])
def test_sigkill_of_loadkit_run_stops_the_load_at_once(
    triton: EmbeddedTriton, tmp_path: Path, workers: int
) -> None:
    # GIVEN `loadkit run` loading a real Triton (one Locust process, or master + workers)
    proc = _loadkit(
        "run",
        "soak",
        "--target",
        triton.http_url,
        "--set",
        "rate=100",
        "--duration",
        "120",
        "--workers",
        str(workers),
        "--no-progress",
        "--out",
        str(tmp_path),
        "--run-id",
        "killed",
    )
    seen: set[int] = set()
    try:
        _wait_for_load(proc, tmp_path / "killed", seen, max(1, workers))
        assert _requests_served(triton) > 0
        # WHEN it is SIGKILLed mid-run
        took, left = _kill_and_watch(proc, seen)
        # THEN within 2 s nothing it started runs, and no request reaches the target
        assert len(seen) >= 3 + workers, f"expected Locust and samplers among {seen}"
        assert not left, f"still running {DEATH_S} s after SIGKILL: {_which(left)}"
        time.sleep(max(0.0, DEATH_S - took))
        served = _requests_served(triton)
        time.sleep(2.0)
        assert _requests_served(triton) == served, "requests still arrive after the kill"
    finally:
        _cleanup(seen)


def _banner(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("Press Ctrl-C"):
            break
    return "".join(lines)


def test_sigkill_of_loadkit_target_leaves_no_tritonserver(tmp_path: Path) -> None:
    proc = _loadkit("target", "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
    seen: set[int] = set()
    try:
        banner = _banner(proc)
        server_pid = int(banner.split("pid ")[1].split(")")[0])
        seen |= _descendants(proc.pid)
        assert server_pid in seen
        assert len(seen) >= 3, f"expected tritonserver, its stub and the watcher: {seen}"
        took, left = _kill_and_watch(proc, seen)
        assert not left, f"still running {DEATH_S} s after SIGKILL: {_which(left)}"
    finally:
        _cleanup(seen)


def test_sigkill_of_loadkit_demo_leaves_nothing_running(tmp_path: Path) -> None:
    proc = _loadkit(
        "demo", "--short", "--no-progress", "--out", str(tmp_path), "--run-id", "killed"
    )
    seen: set[int] = set()
    try:
        _wait_for_load(proc, tmp_path / "killed", seen, 1)
        took, left = _kill_and_watch(proc, seen)
        # tritonserver + stub + watcher, sim GPU, Locust, samplers
        assert len(seen) >= 7, seen
        assert not left, f"still running {DEATH_S} s after SIGKILL: {_which(left)}"
    finally:
        _cleanup(seen)


def _sigint_ignored(pid: int) -> bool:
    # after exec (the shell sets the disposition between fork and exec)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] != b"sleep":
        assert time.monotonic() < deadline, "the background sleep did not start"
        time.sleep(0.01)
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGINT - 1) & 1)
    return False


def test_kill_int_stops_loadkit_target_started_in_the_background(tmp_path: Path) -> None:
    # GIVEN `loadkit target` started in the background by a script: the shell
    # starts background jobs with SIGINT ignored (a `sleep` beside it shows it)
    log = tmp_path / "out.txt"
    script = (
        f"{sys.executable} -m loadkit.cli target --http-port 0 --grpc-port 0 "
        f"--metrics-port 0 > {log} 2>&1 & echo $!; sleep 60 & echo $!; wait"
    )
    shell = subprocess.Popen(
        ["bash", "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert shell.stdout is not None
    target, sibling = int(shell.stdout.readline()), int(shell.stdout.readline())
    seen: set[int] = {target, sibling}
    try:
        assert _sigint_ignored(sibling), "the shell did not ignore SIGINT in background jobs"
        deadline = time.monotonic() + 60
        while "Press Ctrl-C" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and psutil.pid_exists(target), log.read_text()
            time.sleep(0.1)
        seen |= _descendants(target)
        # WHEN it gets SIGINT (kill -INT)
        os.kill(target, signal.SIGINT)
        # THEN it stops, and its server with it
        stopped = time.monotonic() + 30
        while _alive({target}) and time.monotonic() < stopped:
            time.sleep(0.1)
        assert not _alive({target}), "loadkit target ignored SIGINT"
        assert not _alive(seen - {sibling}), _alive(seen)
        assert "stopping Triton" in log.read_text()
    finally:
        _cleanup(seen)
        shell.kill()
        shell.wait()
