"""Install like a user: a real wheel (not editable) into a fresh venv, used from elsewhere.

The wheel is built from a copy of the checkout; the fresh venv reaches the
dependencies already installed in this one through a `.pth` line (no network,
no 600 MB download), but loadkit itself comes only from the wheel. Then, from
a directory that is not the checkout, `loadkit scenarios` and `loadkit demo
--short` must work: the built-in scenarios, the model repository and the
report templates all ship inside the package.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
_NOT_SHIPPED = shutil.ignore_patterns(
    ".git", ".venv", "reports", "build", "*.egg-info", "__pycache__", ".*_cache", "tests", "bench"
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/ of a fresh venv with loadkit installed from its wheel."""
    work = tmp_path_factory.mktemp("install")
    source = work / "src"
    shutil.copytree(REPO, source, ignore=_NOT_SHIPPED, symlinks=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(work / "dist"), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next((work / "dist").glob("loadkit-*.whl"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # The dependencies (and pip) from this venv; .pth files there are not processed,
    # so its editable loadkit stays invisible.
    (purelib / "_loadkit_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-index", "-q"]
        + [str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return venv / "bin"


def _run(bin_dir: Path, argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
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


def test_scenarios_are_listed_from_any_directory(installed: Path, tmp_path: Path) -> None:
    proc = _run(installed, [str(installed / "loadkit"), "scenarios"], tmp_path, 120)
    assert proc.returncode == 0, proc.stderr
    for name in ("burst_2x", "periodic_bursts", "replay", "soak", "steps_to_knee"):
        assert f"  {name} " in proc.stdout
    assert "cannot be loaded" not in proc.stdout


def test_short_demo_runs_from_another_directory(installed: Path, tmp_path: Path) -> None:
    # WHEN a user runs the short demo from a directory that is not the checkout
    proc = _run(
        installed,
        [str(installed / "loadkit"), "demo", "--short", "--no-progress", "--run-id", "wheel"],
        tmp_path,
        280,
    )
    # THEN it completes and writes its report under that directory
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "reports" / "wheel"
    assert (run_dir / "report.html").is_file()
    assert '"status": "complete"' in (run_dir / "manifest.json").read_text()
