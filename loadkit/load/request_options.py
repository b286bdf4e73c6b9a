"""What the user said about the requests: `--shape`, `--int-range`, `--batch-size`, `--input-data`.

Parsed once from the scenario's parameters; the request planner
(`loadkit.load.sources`) and the input-data reader (`loadkit.load.input_data`)
both read it, so it has a module of its own that imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loadkit.errors import UsageError

DEFAULT_STRING_LENGTH = 16


@dataclass(frozen=True)
class RequestOptions:
    """What the user said about the requests (`--shape`, `--int-range`, ...)."""

    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    int_ranges: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    string_length: int = DEFAULT_STRING_LENGTH
    batch_size: int = 1
    input_data: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)  # the scenario's, for presets

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> RequestOptions:
        length = params.get("string_length")
        return cls(
            shapes=parse_shapes(str(params.get("shape") or "")),
            int_ranges=parse_int_ranges(str(params.get("int_range") or "")),
            string_length=DEFAULT_STRING_LENGTH if length is None else int(length),
            batch_size=int(params.get("batch_size") or 1),
            input_data=str(params.get("input_data") or ""),
            params=dict(params),
        )


def _entries(text: str, flag: str) -> list[tuple[str, str]]:
    out = []
    for item in text.replace(";", " ").split():
        name, sep, value = item.rpartition(":")
        if not sep or not name or not value:
            raise UsageError(f"{flag} {item!r} is not NAME:VALUES", hint=f"e.g. {flag} NAME:16")
        out.append((name, value))
    return out


def parse_shapes(text: str) -> dict[str, tuple[int, ...]]:
    """`"A:16 B:2,3"` (as `--shape` gives them) -> {A: (16,), B: (2, 3)}."""
    shapes = {}
    for name, value in _entries(text, "--shape"):
        try:
            dims = tuple(int(d) for d in value.split(","))
        except ValueError:
            raise UsageError(f"--shape {name}:{value}: dimensions must be integers") from None
        if any(d < 1 for d in dims):
            raise UsageError(f"--shape {name}:{value}: dimensions must be at least 1")
        shapes[name] = dims
    return shapes


def parse_int_ranges(text: str) -> dict[str, tuple[int, int]]:
    """`"A:0,999"` -> {A: (0, 999)} (inclusive)."""
    ranges = {}
    for name, value in _entries(text, "--int-range"):
        try:
            lo, hi = (int(v) for v in value.split(","))
        except ValueError:
            raise UsageError(
                f"--int-range {name}:{value} is not LO,HI", hint="e.g. 0,9999"
            ) from None
        if hi < lo:
            raise UsageError(f"--int-range {name}:{value}: HI is below LO")
        ranges[name] = (lo, hi)
    return ranges
