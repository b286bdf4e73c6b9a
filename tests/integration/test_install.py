"""Install like a user: a real wheel (not editable) into a fresh venv, used from elsewhere.

The wheel is built from a copy of the checkout; the fresh venv reaches the
dependencies already installed in this one through a `.pth` line (no network,
no 600 MB download), but loadkit itself comes only from the wheel. Then, from
a directory that is not the checkout, `loadkit scenarios` and `loadkit demo`
must work (one demo run, shared with test_demo, see conftest): the built-in
scenarios, the model repository and the report templates all ship inside the package.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.support import BUILD_LOG, REPO, DemoRun, user_env

pytestmark = pytest.mark.integration


def _run(bin_dir: Path, argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=cwd, env=user_env(bin_dir), capture_output=True, text=True, timeout=timeout
    )


def test_the_wheel_is_what_runs(installed: Path, tmp_path: Path) -> None:
    proc = _run(
        installed,
        [str(installed / "python"), "-c", "import loadkit.scenarios as s; print(s.__file__)"],
        tmp_path,
        60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(str(installed.parent)), proc.stdout
    assert not proc.stdout.strip().startswith(str(REPO))


def test_the_wheel_builds_without_warnings_and_ships_its_data(installed: Path) -> None:
    # setuptools warned "Package would be ignored" for each data folder (templates,
    # model repository, traces) matched only by a glob of its parent: 170 lines of
    # noise on a first `make demo`
    said = (installed.parent.parent / BUILD_LOG).read_text()
    for noise in ("would be ignored", "BuildBackendWarning", "SetuptoolsDeprecationWarning"):
        assert noise not in said, said[-3000:]


def test_demo_help_and_target_smoke_run_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    # the help text and a real Triton from the wheel's own model repository
    helped = _run(installed, [str(installed / "loadkit"), "demo", "--help"], tmp_path, 60)
    assert helped.returncode == 0, helped.stderr
    assert "usage: loadkit demo" in helped.stdout
    smoke = _run(installed, [str(installed / "loadkit"), "target", "--smoke"], tmp_path, 180)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert "smoke test passed" in smoke.stdout


def test_scenarios_are_listed_from_any_directory(installed: Path, tmp_path: Path) -> None:
    proc = _run(installed, [str(installed / "loadkit"), "scenarios"], tmp_path, 120)
    assert proc.returncode == 0, proc.stderr
    for name in ("burst_2x", "periodic_bursts", "replay", "soak", "steps_to_knee"):
        assert f"  {name} " in proc.stdout
    assert "cannot be loaded" not in proc.stdout


@pytest.mark.quiet_host  # the demo's story needs the machine to itself (tests/conftest.py)
def test_demo_runs_from_another_directory_and_leaves_nothing_running(demo_run: DemoRun) -> None:
    # GIVEN `loadkit demo` run by a user from a directory that is not the checkout
    # THEN it completes, writes its report under that directory, and stops all it started
    assert demo_run.returncode == 0, demo_run.output[-3000:]
    assert not demo_run.left_running, demo_run.left_running
    assert (demo_run.run_dir / "report.html").is_file()
    assert '"status": "complete"' in (demo_run.run_dir / "manifest.json").read_text()
