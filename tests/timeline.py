"""When each test ran, and on which worker: where pass 1's wall clock goes.

With LOADKIT_TEST_TIMELINE=FILE every test appends one JSON line (worker, test id,
start and end in Unix seconds, set-up and teardown included) to FILE. `--durations`
gives each test's length but not when it ran, so it cannot show a worker idle at the
end of pass 1 while another finishes a long module (docs/testing.md).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Generator

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    path = os.environ.get("LOADKIT_TEST_TIMELINE")
    start = time.time()
    yield
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        line = {"worker": worker, "test": item.nodeid, "start": start, "end": time.time()}
        with open(path, "a", encoding="utf-8") as timeline:  # one short append per test
            timeline.write(json.dumps(line) + "\n")
