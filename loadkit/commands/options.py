"""Command-line options several commands share, spelled and explained once."""

from __future__ import annotations

import argparse

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
