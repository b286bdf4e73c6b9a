"""CgroupQuota against a fake cgroupfs and /proc (real throttling: tests/integration)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadkit.faults import cgroup_quota as cq
from loadkit.faults.cgroup_quota import CgroupQuota, locate_cpu_cgroup, quota_value
from loadkit.faults.schedule import FaultSchedule, FaultUnavailable
from tests.unit.faults_fakes import FakeClock

PID = 4321

HYBRID = "12:pids:/\n4:memory:/x\n3:cpu,cpuacct:/pod/ctr\n0::/\n"
PURE_V2 = "0::/system.slice/app.service\n"


def fake_proc(tmp_path: Path, text: str, pid: int = PID) -> Path:
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text(text)
    return proc


def test_locates_v1_cpu_controller_under_a_combined_mount(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    (root / "cpu,cpuacct").mkdir(parents=True)
    (root / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    layout = locate_cpu_cgroup(PID, root, fake_proc(tmp_path, HYBRID))
    assert layout.version == 1
    assert layout.path == root / "cpu,cpuacct" / "pod" / "ctr"


def test_locates_v2_when_it_has_the_cpu_controller(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    layout = locate_cpu_cgroup(PID, root, fake_proc(tmp_path, PURE_V2))
    assert (layout.version, layout.relative) == (2, "/system.slice/app.service")


def test_v2_without_cpu_controller_is_unavailable(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    (root / "unified").mkdir(parents=True)
    (root / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    with pytest.raises(FaultUnavailable, match="not possible here"):
        locate_cpu_cgroup(PID, root, fake_proc(tmp_path, "0::/\n"))


def test_quota_values() -> None:
    assert quota_value(1, 0.3, 100_000) == "30000"
    assert quota_value(1, None, 100_000) == "-1"
    assert quota_value(2, 0.5, 100_000) == "50000 100000"
    assert quota_value(2, None, 100_000) == "max 100000"
    assert quota_value(1, 0.0001, 100_000) == "1000"  # kernel minimum


def test_not_permitted_when_the_cgroup_cannot_be_created(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    (root / "cpu").mkdir(parents=True)
    (root / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    # the target's cgroup directory does not exist: mkdir fails like a read-only cgroupfs
    proc = fake_proc(tmp_path, "1:cpu:/gone/away\n")
    fault = CgroupQuota(PID, FaultSchedule(duration_s=1), cgroup_root=root, proc_root=proc)
    with pytest.raises(FaultUnavailable, match="not permitted here"):
        fault.start()


def test_v1_lifecycle_moves_in_sets_quota_in_windows_and_moves_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a fake v1 hierarchy with the target in the root cpu cgroup
    root = tmp_path / "cgroup"
    mount = root / "cpu"
    mount.mkdir(parents=True)
    (mount / "cpu.cfs_quota_us").write_text("-1\n")
    proc = fake_proc(tmp_path, "1:cpu:/\n0::/\n")
    monkeypatch.setattr(cq, "_process_tree", lambda pid: [pid])
    monkeypatch.setattr(cq, "RMDIR_TIMEOUT_S", 0.0)  # a regular directory never empties
    quotas: list[str] = []
    fault = CgroupQuota(
        PID,
        FaultSchedule(duration_s=2, period_s=6, count=2),
        quota_cores=0.25,
        clock=FakeClock(),
        cgroup_root=root,
        proc_root=proc,
        run_dir=tmp_path,
    )
    real_set = fault._set_quota

    def spy(cores: float | None) -> None:
        real_set(cores)
        assert fault.child is not None
        quotas.append((fault.child / "cpu.cfs_quota_us").read_text())

    monkeypatch.setattr(fault, "_set_quota", spy)
    # WHEN it runs its two windows
    fault.start()
    child = fault.child
    assert child is not None and child.parent == mount
    assert (child / "cgroup.procs").read_text() == str(PID)
    assert (child / "cpu.cfs_period_us").read_text() == "100000"
    assert fault.join(5.0)
    fault.stop()
    # THEN unlimited at first, 0.25 core in each window, unlimited after, moved back
    assert quotas == ["-1", "25000", "-1", "25000", "-1"]
    assert (mount / "cgroup.procs").read_text() == str(PID)
    assert fault.child is None
    text = (tmp_path / "events.jsonl").read_text()
    assert text.count('"name":"cgroup-quota"') == 4 and '"quota_cores":0.25' in text
