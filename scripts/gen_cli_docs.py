"""Regenerate docs/cli.md from the argument parser (a test checks it is current).

    .venv/bin/python scripts/gen_cli_docs.py
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def render() -> str:
    # A fixed width so the text does not depend on the terminal.
    os.environ["COLUMNS"] = "100"
    from loadkit.cli import build_parser

    parser = build_parser()
    parts = [
        "# CLI reference\n",
        "Generated from the parser by `scripts/gen_cli_docs.py`; "
        "`tests/unit/test_cli_docs.py` fails when it is out of date.\n",
        "```text\n" + parser.format_help().rstrip() + "\n```\n",
    ]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, cmd in sub.choices.items():
        parts.append(f"## loadkit {name}\n")
        parts.append("```text\n" + cmd.format_help().rstrip() + "\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    DOC.write_text(render(), encoding="utf-8")
    print(f"wrote {DOC}", file=sys.stderr)
