"""docs/cli.md is generated from the parser; this keeps it in sync."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cli_reference_is_current() -> None:
    spec = importlib.util.spec_from_file_location(
        "gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    expected = module.render()
    actual = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert actual == expected, "docs/cli.md is stale: run .venv/bin/python scripts/gen_cli_docs.py"


def test_every_subcommand_has_help_that_teaches() -> None:
    import argparse

    from loadkit.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {"demo", "run", "target", "watch", "import", "analyze", "report", "compare"} <= set(
        sub.choices
    )
    for name, cmd in sub.choices.items():
        text = cmd.format_help()
        assert "example" in text.lower(), f"loadkit {name} --help has no example"
