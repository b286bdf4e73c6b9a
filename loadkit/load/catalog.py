"""The built-in scenarios shipped with loadkit, and what a scenario argument names.

The repository's top-level `scenarios/` folder is installed as the package
`loadkit.scenarios` (pyproject `package-dir`), so a built-in is found the same
way from a checkout, an editable install or a wheel, whatever the working
directory. `loadkit run burst_2x` and `loadkit run ./my_scenario.py` both work.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from loadkit.errors import UsageError

PACKAGE = "loadkit.scenarios"


def scenario_dir() -> Path:
    """The folder holding the built-in scenario files."""
    return Path(str(resources.files(PACKAGE)))


def builtin_names() -> list[str]:
    """Names of the built-in scenarios (file stems), sorted."""
    return sorted(p.stem for p in scenario_dir().glob("*.py") if not p.name.startswith("_"))


def builtin_path(name: str) -> Path | None:
    """The file of built-in scenario `name` (with or without `.py`), or None."""
    stem = name[:-3] if name.endswith(".py") else name
    if not stem or "/" in stem or stem.startswith("_"):
        return None
    path = scenario_dir() / f"{stem}.py"
    return path if path.is_file() else None


def resolve_scenario(arg: str | os.PathLike[str]) -> Path:
    """A scenario file for `arg`: an existing path, else a built-in scenario's name."""
    path = Path(arg)
    if path.is_file():
        return path
    builtin = builtin_path(os.fspath(arg))
    if builtin is not None:
        return builtin
    if builtin_path(path.name) is not None:
        hint = (
            f"{path.name} is a built-in scenario: `loadkit run {path.stem} ...` finds it anywhere"
        )
    else:
        hint = (
            f"built-in scenarios: {', '.join(builtin_names())} (`loadkit scenarios` lists "
            "them), or give the path of a locustfile"
        )
    raise UsageError(f"no scenario file or built-in scenario named {str(arg)!r}", hint=hint)
