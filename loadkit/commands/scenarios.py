"""`loadkit scenarios`: the built-in scenarios, what each shows and its parameters."""

from __future__ import annotations

import argparse
from typing import Any

HELP = "list the built-in scenarios: what each shows, its parameters"

DESCRIPTION = """\
List the scenarios that ship with loadkit. Run one by name with
`loadkit run NAME --target URL`; `loadkit run NAME --help` explains its
parameters, and `--set name=value` changes them. Your own locustfile runs the
same way by path (docs/scenarios.md shows how to write one).

example:  loadkit scenarios
          loadkit run burst_2x --help
"""


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--path", action="store_true", help="also print where the scenario files are"
    )


def purpose(info: dict[str, Any]) -> str:
    """The first line of a scenario's docstring, without its leading `name:`."""
    first = (info.get("description") or "").strip().splitlines()[:1]
    line = first[0] if first else ""
    prefix = f"{info.get('name')}:"
    return line[len(prefix) :].strip() if line.startswith(prefix) else line.strip()


def own_parameters(info: dict[str, Any]) -> str:
    """`name=default` for the parameters the scenario declares itself (not the common ones)."""
    from loadkit.load.scenario import COMMON_PARAMS

    defaults: dict[str, Any] = info.get("param_defaults") or {}
    return " ".join(
        f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in defaults.items()
        if k not in COMMON_PARAMS
    )


def run(args: argparse.Namespace) -> int:
    from loadkit.load.catalog import builtin_names, builtin_path, scenario_dir
    from loadkit.load.describe import describe_scenarios
    from loadkit.load.scenario import COMMON_PARAMS

    names = builtin_names()
    paths = [builtin_path(name) for name in names]
    infos = describe_scenarios([p for p in paths if p is not None])
    width = max(len(n) for n in names)
    print("built-in scenarios (loadkit run NAME --target URL):")
    for name, info in zip(names, infos, strict=True):
        if "error" in info:
            print(f"  {name:<{width}}  cannot be loaded: {info['error']}")
            continue
        print(f"  {name:<{width}}  {purpose(info)}")
        params = own_parameters(info)
        if params:
            print(f"  {'':<{width}}  {params}")
    print(f"every scenario also takes: {', '.join(COMMON_PARAMS)}")
    print("details: loadkit run NAME --help")
    if args.path:
        print(f"files: {scenario_dir()}")
    return 0
