"""Many machines, played by separate processes: `loadkit run --master` and `loadkit worker`s.

Each worker runs in its own empty directory inside a private mount namespace
where a tmpfs hides the master's output directory, so it has no view of the
run directory: everything it records reaches the master over Locust's channel.
The server is a real Triton; its own statistics count what was sent.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from loadkit import lifeline
from loadkit.load.orchestrator import _free_port
from loadkit.load.summary import summarize_run
from loadkit.rundir import new_histogram, read_interval_log
from loadkit.target import EmbeddedTriton

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
RATE = 100

pytestmark = pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0,
    reason="needs root and unshare(1) for a private mount namespace",
)


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    with EmbeddedTriton(log_path=tmp_path_factory.mktemp("triton") / "triton.log") as t:
        yield t


def _served(triton: EmbeddedTriton) -> int:
    """Requests the server completed for `ranker`, by its own statistics."""
    with urllib.request.urlopen(f"{triton.http_url}/v2/models/ranker/stats", timeout=5) as r:
        stats = json.load(r)["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"]) + int(stats["fail"]["count"])


class Cluster:
    """A master and its workers as separate processes; workers cannot see `out`."""

    def __init__(self, tmp_path: Path, target: str, duration_s: float, workers: int = 2):
        self.out = tmp_path / "master-out"
        self.out.mkdir()
        self.port = _free_port()
        self.master = lifeline.popen(
            [
                sys.executable,
                "-m",
                "loadkit.cli",
                "run",
                str(SCENARIOS / "soak.py"),
                "--target",
                target,
                "--master",
                "--expect-workers",
                str(workers),
                "--master-bind-host",
                "127.0.0.1",
                "--master-bind-port",
                str(self.port),
                "--set",
                f"rate={RATE}",
                "--set",
                f"duration_s={duration_s}",
                "--out",
                str(self.out),
                "--run-id",
                "run",
                "--no-telemetry",
                "--no-progress",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.workers = []
        for i in range(workers):
            home = tmp_path / f"worker-home-{i}"
            home.mkdir()
            # A private mount namespace: a tmpfs over the master's output, checked empty.
            script = (
                f'mount -t tmpfs none {self.out} && [ -z "$(ls -A {self.out})" ] || exit 97; '
                f"cd {home} && exec {sys.executable} -m loadkit.cli worker "
                f"--master-host 127.0.0.1 --master-port {self.port} --connect-timeout 30"
            )
            self.workers.append(
                lifeline.popen(
                    ["unshare", "--mount", "sh", "-c", script],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=home,
                )
            )
        self.homes = [tmp_path / f"worker-home-{i}" for i in range(workers)]

    @property
    def run_dir(self) -> Path:
        return self.out / "run"

    def wait_for_rows(self, rows: int, timeout_s: float = 60.0) -> None:
        """Until every worker's load file in the run directory has `rows` intervals."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            files = sorted((self.run_dir / "load").glob("worker-*.jsonl"))
            if len(files) == len(self.workers) and all(
                len(f.read_text().splitlines()) >= rows for f in files
            ):
                return
            assert self.master.poll() is None, self.output(self.master)
            time.sleep(0.1)
        raise AssertionError(f"no {rows} intervals from every worker within {timeout_s} s")

    @staticmethod
    def output(proc: subprocess.Popen[bytes]) -> str:
        if proc.poll() is None:
            return "(still running)"
        assert proc.stdout is not None
        return proc.stdout.read().decode(errors="replace")[-3000:]

    def close(self) -> None:
        for proc in [self.master, *self.workers]:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Any]:
    made: list[Cluster] = []

    def make(target: str, duration_s: float) -> Cluster:
        made.append(Cluster(tmp_path, target, duration_s))
        return made[-1]

    yield make
    for c in made:
        c.close()


def _worker_histograms(run_dir: Path) -> list[Any]:
    out = []
    for path in sorted((run_dir / "latency").glob("worker-*.hlog")):
        hist = new_histogram()
        for interval in read_interval_log(path):
            if interval.kind == "corrected":
                hist.add(interval.histogram)
        out.append(hist)
    return out


def test_master_writes_one_run_from_workers_that_cannot_see_it(
    triton: EmbeddedTriton, cluster_factory: Any
) -> None:
    # GIVEN a master and two workers, each worker with no view of the master's output
    before = _served(triton)
    cluster = cluster_factory(triton.http_url, duration_s=4.0)
    # WHEN the run ends
    assert cluster.master.wait(90) == 0, cluster.output(cluster.master)
    for worker in cluster.workers:
        assert worker.wait(30) == 0, cluster.output(worker)
    # THEN the run directory holds every request the server served (less the pre-flight's one)
    summary = summarize_run(cluster.run_dir)
    served = _served(triton) - before
    assert summary.status == "complete"
    assert summary.ok + summary.errors == served - 1 == RATE * 4
    # ... the merged percentiles are the merge of the workers' own histograms
    hists = _worker_histograms(cluster.run_dir)
    assert len(hists) == 2 and abs(hists[0].get_total_count() - hists[1].get_total_count()) <= 1
    merged = new_histogram()
    for hist in hists:
        merged.add(hist)
    assert merged.get_total_count() == summary.ok
    for p, key in ((50.0, "p50"), (99.0, "p99"), (99.9, "p999")):
        assert summary.corrected_ms[key] == merged.get_value_at_percentile(p) / 1000.0
    # ... and Locust's own table on the master (workers feed their stats in aggregate) agrees
    log = (cluster.run_dir / "logs" / "locust-master.log").read_text()
    rows = re.findall(r"^\s+Aggregated\s+(\d+)\s+(\d+)\(", log, re.MULTILINE)
    assert rows, log[-2000:]
    assert (int(rows[-1][0]), int(rows[-1][1])) == (summary.ok + summary.errors, summary.errors)
    # ... nothing was written where the workers ran, and the manifest names both with clocks
    for home in cluster.homes:
        assert list(home.iterdir()) == []
    manifest = json.loads((cluster.run_dir / "manifest.json").read_text())
    workers = manifest["distributed"]["workers"]
    assert [w["worker"] for w in workers] == ["worker-0", "worker-1"]
    assert all(abs(w["clock"]["offset_ms"]) < 50 for w in workers)
    assert manifest["distributed"]["lost"] == []
    # ... and the workers' machine (both run on this one) is one host series of the load's
    machines = [s for s in manifest["sources"] if s["name"].startswith("host-worker-")]
    assert len(machines) == 1, manifest["sources"]
    assert (machines[0]["place"], machines[0]["host"]) == ("client", socket.gethostname())
    rows = (cluster.run_dir / machines[0]["file"]).read_text().splitlines()
    assert len(rows) >= 3 and all("cpu_per_core_pct" in row for row in rows), rows[:2]


def test_a_killed_worker_is_reported_and_the_run_completes(
    triton: EmbeddedTriton, cluster_factory: Any
) -> None:
    # GIVEN a run of 8 s over two workers
    duration = 8.0
    cluster = cluster_factory(triton.http_url, duration_s=duration)
    cluster.wait_for_rows(2)  # early: Locust marks it missing ~3 s later, before the end
    # WHEN one worker is killed outright mid-run
    victim = cluster.workers[1]
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    killed_ns = time.time_ns()
    # THEN the run completes, naming the lost worker, when, and the offered rate unsent
    assert cluster.master.wait(90) == 0, cluster.output(cluster.master)
    output = cluster.output(cluster.master)
    manifest = json.loads((cluster.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    lost = manifest["distributed"]["lost"]
    assert len(lost) == 1, manifest["distributed"]
    loss = lost[0]
    assert loss["last_interval_end_ns"] <= killed_ns + 1_000_000_000
    assert loss["detected_ns"] >= killed_ns
    assert loss["offered_per_s"] == pytest.approx(RATE / 2, abs=2)
    assert loss["unsent_estimate"] > 0
    assert any(loss["worker"] in note and "unsent" in note for note in manifest["notes"])
    assert f"lost {loss['worker']} at" in output
    # ... and no data of the surviving worker is lost: every other arrival of the schedule
    survivor = ({"worker-0", "worker-1"} - {loss["worker"]}).pop()
    rows = [
        json.loads(line)
        for line in (cluster.run_dir / "load" / f"{survivor}.jsonl").read_text().splitlines()
    ]
    assert sum(r["offered"] for r in rows) == RATE * duration / 2
    assert sum(r["ok"] for r in rows) == RATE * duration / 2
    assert cluster.workers[0].wait(30) == 0


def test_a_worker_partitioned_from_its_master_is_reported_and_the_run_completes(
    triton: EmbeddedTriton, cluster_factory: Any
) -> None:
    # GIVEN a run of 12 s over two workers
    duration = 12.0
    cluster = cluster_factory(triton.http_url, duration_s=duration)
    cluster.wait_for_rows(2)
    # WHEN one worker stops answering its master (frozen: no heartbeats, no records) for 6 s,
    # long enough for the master to count it lost, then comes back
    victim = psutil.Process(cluster.workers[1].pid)
    frozen = [victim, *victim.children(recursive=True)]  # `loadkit worker` and its Locust
    for proc in frozen:
        proc.send_signal(signal.SIGSTOP)
    frozen_ns = time.time_ns()
    try:
        time.sleep(6.0)
    finally:
        for proc in frozen:
            proc.send_signal(signal.SIGCONT)
    # THEN the run completes, naming the partitioned worker as lost, with no traceback
    assert cluster.master.wait(90) == 0, cluster.output(cluster.master)
    output = cluster.output(cluster.master)
    assert "Traceback" not in output, output
    manifest = json.loads((cluster.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    # (the master names workers in the order they connect, not the order they started:
    # the frozen process may be worker-0 or worker-1)
    lost = manifest["distributed"]["lost"]
    assert len(lost) == 1, manifest["distributed"]
    name = lost[0]["worker"]
    assert lost[0]["last_interval_end_ns"] <= frozen_ns + 1_000_000_000
    assert f"lost {name} at" in output
    # ... and the other worker's data is whole
    (other,) = {"worker-0", "worker-1"} - {name}
    rows = [
        json.loads(line)
        for line in (cluster.run_dir / "load" / f"{other}.jsonl").read_text().splitlines()
    ]
    assert sum(r["offered"] for r in rows) == RATE * duration / 2
    assert sum(r["ok"] for r in rows) == RATE * duration / 2


def test_workers_stop_sending_within_5s_of_the_master_being_killed(
    triton: EmbeddedTriton, cluster_factory: Any
) -> None:
    # GIVEN two workers loading the server for a run meant to last a minute
    cluster = cluster_factory(triton.http_url, duration_s=60.0)
    cluster.wait_for_rows(1)
    # WHEN the master is SIGKILLed (its Locust master dies with it)
    os.kill(cluster.master.pid, signal.SIGKILL)
    killed = time.monotonic()
    # THEN the server sees no request sent more than 5 s later
    last, last_change = _served(triton), time.monotonic()
    while time.monotonic() - killed < 7.0:
        time.sleep(0.2)
        now = _served(triton)
        if now != last:
            last, last_change = now, time.monotonic()
    assert last_change - killed < 5.0, f"requests still served {last_change - killed:.1f} s later"
    for worker in cluster.workers:
        worker.wait(20)  # and the workers exit
