"""The Jinja2 environment every HTML reporter uses: autoescape on, strict undefined."""

from __future__ import annotations

from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined


@cache
def environment() -> Environment:
    """Autoescape is on for every template: all text from outside (model names,
    labels, error messages, findings) is escaped; nothing is marked safe."""
    return Environment(
        loader=PackageLoader("loadkit.report", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=False,
        lstrip_blocks=False,
    )
