"""In CI a skip for a missing part fails the run and names the part (tests/missing_parts.py).

Each case runs a real pytest in a subprocess on a small test file: one test that
skips the way the integration tests do when Prometheus is missing, one module
skipped whole, and one platform skip that stays a skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

TESTS = """
import pytest

def test_needs_prometheus():
    pytest.skip("Debian's prometheus is not installed (scripts/setup.sh --with-prometheus)")

@pytest.mark.platform_skip
def test_needs_timerfd():
    pytest.skip("no timerfd on this platform")

def test_runs():
    assert True
"""

WHOLE_MODULE = """
import pytest
websocket = pytest.importorskip("no_such_module_here", reason="websocket-client is not installed")

def test_unreached():
    assert True
"""


def _pytest(tmp_path: Path, name: str, text: str, require: str | None) -> str:
    (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "LOADKIT_TEST_REQUIRE_PARTS"}
    if require is not None:
        env["LOADKIT_TEST_REQUIRE_PARTS"] = require
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "tests.missing_parts",
         "-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts=", name],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False,
    )  # fmt: skip
    return f"rc={result.returncode}\n{result.stdout}"


def test_under_ci_a_missing_part_fails_and_is_named(tmp_path: Path) -> None:
    out = _pytest(tmp_path, "test_parts.py", TESTS, "1")
    assert out.startswith("rc=1\n"), out
    assert "1 failed, 1 passed, 1 skipped" in out, out
    assert "a part this test needs is missing: Debian's prometheus is not installed" in out, out
    # a platform skip stays a skip
    assert "SKIPPED" in out and "no timerfd on this platform" in out, out


def test_under_ci_a_module_skipped_whole_fails_and_is_named(tmp_path: Path) -> None:
    out = _pytest(tmp_path, "test_whole.py", WHOLE_MODULE, "1")
    assert out.startswith("rc=2\n"), out  # a collection error: pytest stops, CI fails
    assert "a part this module needs is missing: websocket-client is not installed" in out, out


def test_a_developers_run_still_skips_with_the_reason(tmp_path: Path) -> None:
    out = _pytest(tmp_path, "test_parts.py", TESTS, None)
    assert out.startswith("rc=0\n"), out
    assert "1 passed, 2 skipped" in out, out
    assert "Debian's prometheus is not installed" in out, out
    out = _pytest(tmp_path, "test_whole.py", WHOLE_MODULE, "0")
    assert out.startswith("rc=5\n") and "1 skipped" in out, out  # nothing else ran: exit 5
