"""Command-line options several commands share, spelled and explained once."""

from __future__ import annotations

import argparse
from typing import Any

from loadkit.errors import UsageError


def add_seed_and_output(
    parser: argparse.ArgumentParser, *, directory: str = "run directory", default_name: str
) -> None:
    """`--seed`, `--out`, `--run-id` of a command that records (run, capacity, sweep)."""
    parser.add_argument("--seed", type=int, default=0, help="seed for arrivals and payloads")
    parser.add_argument("--out", default="reports", help=f"parent of the {directory}")
    parser.add_argument(
        "--run-id", help=f"{directory.split()[0]} directory name (default: {default_name})"
    )


def add_overrides(parser: argparse.ArgumentParser | argparse._ArgumentGroup, help: str) -> None:
    """`--set NAME=VALUE` (repeatable) into `args.overrides`."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE", help=help
    )


def parse_overrides(items: list[str]) -> dict[str, str]:
    """`--set NAME=VALUE` items into scenario parameters."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set {item!r} is not NAME=VALUE", hint="e.g. --set base_rate=50")
        out[name.strip()] = value.strip()
    return out


def add_server_host(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--server-host local|remote`: where the server runs, when its address does not say."""
    from loadkit.placement import SERVER_HOST_CHOICES, SERVER_HOST_HELP

    parser.add_argument("--server-host", choices=SERVER_HOST_CHOICES, help=SERVER_HOST_HELP)


def add_server_telemetry(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--scrape FAMILY=URL` and `--agent URL`: the server's GPU and host read on its machine.

    Every command that records runs against a server (run, capacity, sweep, tune): where
    loadkit runs on another machine, only these make the server's evidence the server's.
    """
    from loadkit.telemetry.scrape import SCRAPE_FLAG_FAMILIES

    parser.add_argument(
        "--scrape",
        action="append",
        default=[],
        metavar="FAMILY=URL",
        help="scrape one of the server's exporters every second, as the server's gpu or host "
        f"series (repeatable); families: {', '.join(SCRAPE_FLAG_FAMILIES)}; e.g. "
        "node=http://gpu-host:9100/metrics, dcgm=http://gpu-host:9400/metrics, "
        'cadvisor=http://gpu-host:8080/metrics{container="triton"}',
    )
    parser.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="URL",
        help="a `loadkit agent` on the server's host (the URL it printed): its GPUs at 10 Hz "
        "and its host, server process and cgroup every second, as the server's gpu and host "
        "series; e.g. http://gpu-host:9477",
    )
    parser.add_argument(
        "--agent-token-file",
        metavar="FILE",
        help="the bearer token the --agent asks for (the file its --token-file reads)",
    )


def server_telemetry(args: argparse.Namespace) -> dict[str, Any]:
    """`TelemetryOptions.extra` for `--scrape`/`--agent` (empty without them); bad flags raise."""
    from loadkit.telemetry.scrape import SCRAPE_OPTION, parse_scrapes

    scrapes = parse_scrapes(
        getattr(args, "scrape", []),
        getattr(args, "agent", []),
        agent_token_file=getattr(args, "agent_token_file", None),
    )
    return {SCRAPE_OPTION: scrapes} if scrapes else {}


def token_from_file(path: str | None, flag: str) -> str | None:
    """The bearer token of a `--...-token-file FILE` (None without one); UsageError if unreadable."""
    from loadkit.telemetry.http import read_bearer_token

    if path is None:
        return None
    try:
        return read_bearer_token(path)
    except ValueError as exc:
        raise UsageError(f"{flag} {exc}", hint="a file that holds the token, one line") from None


def add_request_options(parser: argparse.ArgumentParser) -> None:
    """What to send (`--model`, `--shape`, `--input-data`, ...): every command that loads a model.

    One group, so that the hint of a request error ("give --shape ...") holds for
    `run`, `capacity`, `sweep` and `tune` alike.
    """
    req = parser.add_argument_group(
        "requests (default: built from the model's metadata and config on the server)"
    )
    req.add_argument("--model", help="model name (default: the server's only model)")
    req.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2",
        help="dimensions for an input with variable (-1) dims, batch excluded (repeatable)",
    )
    req.add_argument(
        "--int-range",
        action="append",
        default=[],
        metavar="NAME:LO,HI",
        help="inclusive range of an integer input's synthetic values (default 0,99; repeatable)",
    )
    req.add_argument(
        "--string-length", type=int, metavar="N", help="length of synthetic BYTES strings (16)"
    )
    req.add_argument(
        "--input-data",
        metavar="FILE",
        help="real data: perf_analyzer's input-data JSON, or (protocol json) JSON Lines bodies",
    )
    req.add_argument(
        "--batch-size", type=int, metavar="N", help="rows per request (max_batch_size > 0; 1)"
    )


def request_overrides(args: argparse.Namespace) -> dict[str, str]:
    """The request flags as scenario parameters (the same names `--set` takes)."""
    out: dict[str, str] = {}
    if args.model:
        out["model"] = args.model
    if args.shape:
        out["shape"] = " ".join(args.shape)
    if args.int_range:
        out["int_range"] = " ".join(args.int_range)
    if args.string_length is not None:
        out["string_length"] = str(args.string_length)
    if args.input_data:
        out["input_data"] = args.input_data
    if args.batch_size is not None:
        out["batch_size"] = str(args.batch_size)
    return out


def scenario_params(args: argparse.Namespace) -> dict[str, str]:
    """`--set` and the request flags as one set of scenario parameters (a flag wins)."""
    return {**parse_overrides(args.overrides), **request_overrides(args)}
