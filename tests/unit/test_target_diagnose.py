"""Turning tritonserver logs into one clear error (log excerpts from real 2.51 runs)."""

from __future__ import annotations

import socket

import pytest

from loadkit.errors import TargetError
from loadkit.target import diagnose
from loadkit.target.ports import choose_ports

PORT_LOG = """\
I1129 20:49:24.525055 8185 http_server.cc:4713] "Started HTTPService at 127.0.0.1:18000"
E1129 20:49:24.566301 8185 main.cc:257] "failed to start HTTP service: Unavailable - Socket '127.0.0.1:18000' already in use "
"""
MODEL_LOG = """\
I1129 20:46:49.617422 2997 model_lifecycle.cc:472] "loading: ranker:1"
E1129 20:46:49.648866 2997 model_lifecycle.cc:642] "failed to load 'ranker' version 1: Internal: ModuleNotFoundError: No module named 'numpy'\\n\\nAt:\\n  /tmp/repo/ranker/1/model.py(27): <module>\\n"
+--------+---------+------------------+
| Model  | Version | Status           |
+--------+---------+------------------+
error: creating server: Internal - failed to load all models
"""
LOADER_LOG = (
    "/x/tritonserver: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found "
    "(required by /x/tritonserver)\n"
)


def test_port_conflict_from_log() -> None:
    assert diagnose.port_conflict(PORT_LOG) == ("http", "127.0.0.1:18000")
    error = diagnose.startup_error(PORT_LOG, "ranker", 1, "/tmp/t.log")
    assert (
        error.message
        == "Triton could not start its http service: 127.0.0.1:18000 is already in use"
    )
    assert error.hint and "ss -ltnp" in error.hint


def test_model_failure_keeps_only_the_reason() -> None:
    error = diagnose.startup_error(MODEL_LOG, "ranker", 1, "/tmp/t.log")
    assert error.message == (
        "Triton failed to load model 'ranker': Internal: ModuleNotFoundError: No module named 'numpy'"
    )
    assert error.hint and "numpy" in error.hint


def test_loader_error_is_quoted() -> None:
    error = diagnose.startup_error(LOADER_LOG, "ranker", 1, "/tmp/t.log")
    assert "version `GLIBC_2.34' not found" in error.message
    assert error.hint and "glibc" in error.hint


def test_unknown_failure_shows_the_log_tail_without_tables() -> None:
    error = diagnose.startup_error(
        "line one\n+---+\n| x |\nSegmentation fault\n", "ranker", 139, "/t"
    )
    assert error.message.startswith("tritonserver exited with code 139")
    assert "Segmentation fault" in error.message and "| x |" not in error.message


def test_taken_port_is_refused_before_start() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(TargetError, match="already in use"):
            choose_ports({"http": port, "grpc": 0, "metrics": 0})


def test_ephemeral_ports_are_distinct() -> None:
    ports = choose_ports({"http": 0, "grpc": 0, "metrics": 0})
    assert len(set(ports.values())) == 3 and all(ports.values())
    with pytest.raises(TargetError, match="same port"):
        choose_ports({"http": 9000, "grpc": 9000, "metrics": 0})
