"""The `loadkit` command: a thin layer over one module per subcommand.

Each module in `loadkit/commands/` exposes `HELP` (one line), `DESCRIPTION`
(the longer `--help` text), `prepare_parser(parser)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from loadkit import __version__
from loadkit.errors import EXIT_INTERRUPTED, LoadkitError

# Order is the order shown in `loadkit --help`: the story from demo to report.
COMMANDS: dict[str, str] = {
    "demo": "loadkit.commands.demo",
    "run": "loadkit.commands.run",
    "worker": "loadkit.commands.worker",
    "scenarios": "loadkit.commands.scenarios",
    "target": "loadkit.commands.target",
    "watch": "loadkit.commands.watch",
    "agent": "loadkit.commands.agent",
    "import": "loadkit.commands.import_",
    "oncall": "loadkit.commands.oncall",
    "analyze": "loadkit.commands.analyze",
    "report": "loadkit.commands.report",
    "compare": "loadkit.commands.compare",
    "capacity": "loadkit.commands.capacity",
    "sweep": "loadkit.commands.sweep",
    "tune": "loadkit.commands.tune",
}

EPILOG = """\
exit codes: 0 ok, 1 SLO failed (--fail-on-slo) or run stopped by --abort-on,
2 bad input, 3 target/server failed, 4 unreadable run directory, 130 interrupted (data kept).

start here:  loadkit demo        (real Triton on 127.0.0.1, burst test, report)
"""


def _available_commands(only: str | None = None) -> dict[str, ModuleType]:
    modules: dict[str, ModuleType] = {}
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:
            continue
        modules[name] = importlib.import_module(module_name)
    return modules


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI; with `only`, just that subcommand (imports nothing else: faster start)."""
    parser = argparse.ArgumentParser(
        prog="loadkit",
        description="Load testing and latency forensics for GPU inference services "
        "(Triton Inference Server and other KServe v2 servers).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"loadkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in _available_commands(only).items():
        cmd_parser = sub.add_parser(
            name,
            help=module.HELP,
            description=getattr(module, "DESCRIPTION", module.HELP),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.prepare_parser(cmd_parser)
        cmd_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C while the command's modules were still loading
        print("Interrupted.", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # Every command module imports its own stack (pandas, scipy, ...): build only the one
    # asked for, so `loadkit run` answers a bad target in seconds, not after the analysis.
    parser = build_parser(words[0] if words and words[0] in COMMANDS else None)
    args = parser.parse_args(words)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0
    try:
        return int(args._run(args))
    except LoadkitError as err:
        print(f"ERROR: {err.message}", file=sys.stderr)
        if err.hint:
            print(f"HINT: {err.hint}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("Interrupted; data recorded so far is kept.", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
