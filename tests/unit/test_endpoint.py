"""The one URL rule (loadkit/endpoint.py) and the commands that apply it before anything runs."""

from __future__ import annotations

import time

import pytest

from loadkit.cli import main
from loadkit.endpoint import HTTP_SCHEMES, parse_endpoint
from loadkit.errors import EXIT_USAGE, UsageError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://127.0.0.1:8000", ("http", "127.0.0.1", 8000, "")),
        ("https://triton.example.com", ("https", "triton.example.com", 443, "")),
        ("HTTP://host:1/", ("http", "host", 1, "")),
        ("grpc://10.0.0.7:8001", ("grpc", "10.0.0.7", 8001, "")),
        ("127.0.0.1:8001", ("grpc", "127.0.0.1", 8001, "")),
        ("http://[::1]:8000", ("http", "::1", 8000, "")),
        ("http://host:8000/v2/recs", ("http", "host", 8000, "/v2/recs")),
    ],
)
def test_accepted_urls(text: str, expected: tuple[str, str, int, str]) -> None:
    e = parse_endpoint(text)
    assert (e.scheme, e.host, e.port, e.path) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ftp://127.0.0.1:8000", "scheme 'ftp' is not one loadkit speaks"),
        ("http://:8000", "no valid host"),
        ("http://bad host:8000", "no valid host"),
        ("http://127.0.0.1:99999", "port is not a number in 1..65535"),
        ("http://127.0.0.1:80x", "port is not a number in 1..65535"),
        ("http://127.0.0.1:0", "port is not a number in 1..65535"),
        ("grpc://127.0.0.1", "has no port"),
        ("127.0.0.1", "has no port"),
        ("", "is empty"),
        ("http://h:1/?x=1", "no ?query"),
    ],
)
def test_refused_urls_name_the_problem_and_the_accepted_forms(text: str, says: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_endpoint(text)
    assert says in info.value.message and "--target" in info.value.message
    assert info.value.hint == (
        "accepted: http://HOST:PORT, https://HOST:PORT, grpc://HOST:PORT, HOST:PORT (gRPC)"
    )


def test_an_http_only_url_refuses_grpc() -> None:
    with pytest.raises(UsageError, match="scheme 'grpc'"):
        parse_endpoint("grpc://h:1", "--triton", HTTP_SCHEMES, "http")
    assert parse_endpoint("h:8000", "--triton", HTTP_SCHEMES, "http").scheme == "http"


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "soak", "--target", "ftp://127.0.0.1:8000"],
        ["run", "soak", "--target", "http://127.0.0.1:8000", "--triton-stats", "grpc://h:1"],
        ["run", "soak", "--target", "http://127.0.0.1:8000", "--triton-metrics", "h:99999"],
        ["watch", "--duration", "5", "--triton", "ftp://127.0.0.1:8000"],
    ],
)
def test_commands_refuse_a_bad_url_at_once_with_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    assert main(argv) == EXIT_USAGE
    assert time.monotonic() - started < 5  # no connection attempt, no timeout
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines[0].startswith("ERROR: --") and lines[1].startswith("HINT: accepted: http://")
    assert "Traceback" not in err
