"""What the shared integration fixtures hand to the tests (see conftest)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_LOG = "wheel-build.log"  # beside the venv: what `pip wheel` printed
NOT_SHIPPED = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".venv-*",
    "reports",
    "build",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    "tests",
    "bench",
)


def user_env(bin_dir: Path) -> dict[str, str]:
    """The environment of a user whose PATH starts with the fresh venv's bin/."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


@dataclass(frozen=True)
class DemoRun:
    """One finished `loadkit demo` command: where it ran, what it said, what it left running."""

    cwd: Path
    run_dir: Path
    returncode: int
    output: str
    left_running: list[str]
