"""Fixtures shared by integration modules: the installed wheel, and one full demo run from it.

The demo is the slowest thing CI does (about 100 s), so it runs once per session, as a
user runs it: the `loadkit demo` command of a wheel installed into a fresh venv, from a
directory that is not the checkout. test_install checks that it ran from there;
test_demo checks the story its report tells.
"""

from __future__ import annotations

import json
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from loadkit.target.server import EmbeddedTriton
from tests.integration.support import BUILD_LOG, NOT_SHIPPED, REPO, DemoRun, user_env

# A test's `with EmbeddedTriton(...)` returns while the server unloads its model and exits
# (about 2.4 s, 56 s of pass 1 in all): the next test starts meanwhile, on fresh ports. An
# explicit stop() still waits (test_target's checks of what a stop leaves behind).
EmbeddedTriton.exit_waits = False

# Runs a command as the child of a subreaper, so that anything the command leaves
# running re-parents to this wrapper (not to init) and can be listed, then killed.
_SUBREAPED = r"""
import ctypes, json, subprocess, sys
import psutil
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
rc = subprocess.call(sys.argv[1:], stdout=sys.stderr, stderr=sys.stderr)
left = [p for p in psutil.Process().children(recursive=True) if p.status() != "zombie"]
names = [f"{p.pid} {' '.join(p.cmdline())[:200]}" for p in left]
for p in left:
    p.kill()
print(json.dumps({"rc": rc, "left": names}))
"""


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/ of a fresh venv with loadkit installed from its wheel; the build's output in ../../BUILD_LOG."""
    work = tmp_path_factory.mktemp("install")
    source = work / "src"
    shutil.copytree(REPO, source, ignore=NOT_SHIPPED, symlinks=True)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(work / "dist"), str(source)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # What the build said, for test_install (pip shows setuptools' warnings even with -q).
    (work / BUILD_LOG).write_text(build.stdout + build.stderr)
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


@pytest.fixture(scope="session")
def demo_run(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """`loadkit demo --short` (60 s), run from the wheel in a directory of its own.

    --short tells the full demo's story (8 spike episodes, their 7 s period confirmed,
    the burst and its recovery) in 60 s instead of 90: pass 2 runs alone, so those 30 s
    were 30 s of `make test` (issue 55). The full-length default is run by hand before a
    release (docs/testing.md)."""
    cwd = tmp_path_factory.mktemp("elsewhere")
    proc = subprocess.run(
        [sys.executable, "-c", _SUBREAPED, str(installed / "loadkit")]
        + ["demo", "--short", "--no-progress", "--run-id", "demo-test"],
        cwd=cwd,
        env=user_env(installed),
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    verdict = json.loads(proc.stdout.strip().splitlines()[-1])
    return DemoRun(
        cwd=cwd,
        run_dir=cwd / "reports" / "demo-test",
        returncode=verdict["rc"],
        output=proc.stderr,
        left_running=verdict["left"],
    )
