"""Turn a tritonserver log into one clear TargetError (pure functions, unit-tested).

Triton's log is long, full of tables, and its real reason is often one line in
the middle; users should not have to read it to learn that a port was taken.
"""

from __future__ import annotations

import re

from loadkit.errors import TargetError

_PORT_IN_USE = re.compile(
    r"failed to start (\w+) service: .*?Socket '([^']+)' already in use", re.I
)
_LOADER = re.compile(
    r"(error while loading shared libraries: .*|version `GLIBC[^']*' not found.*"
    r"|cannot execute binary file.*|Exec format error.*)"
)
_MODEL_FAILED = re.compile(r"failed to load '([^']+)' version \d+: (.*)")
_STUB_FAILED = re.compile(r"Failed to initialize Python stub(?: for auto-complete)?: (.*)")


def log_tail(text: str, lines: int = 15) -> str:
    """The last `lines` informative lines (Triton's ASCII tables dropped)."""
    kept = [
        line.rstrip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("|", "+"))
    ]
    return "\n".join(kept[-lines:])


def _first_line(reason: str) -> str:
    # Triton logs the reason JSON-escaped ("...\n\nAt:\n  model.py(12)"): keep its first line.
    reason = reason.replace("\\n", "\n").strip().strip('"').strip()
    return reason.splitlines()[0].strip() if reason else reason


def port_conflict(text: str) -> tuple[str, str] | None:
    """(service, address) of a port Triton could not bind, if the log says so."""
    match = _PORT_IN_USE.search(text)
    return (match.group(1).lower(), match.group(2)) if match else None


def loader_error(text: str) -> str | None:
    """The dynamic loader's message (missing library, too old glibc), if any."""
    match = _LOADER.search(text)
    return match.group(1).strip() if match else None


def model_failure(text: str, model: str) -> str | None:
    """Triton's reason for failing to load `model`, first line only."""
    for match in _MODEL_FAILED.finditer(text):
        if match.group(1) == model:
            return _first_line(match.group(2))
    stub = _STUB_FAILED.search(text)
    return _first_line(stub.group(1)) if stub else None


def startup_error(text: str, model: str, returncode: int | None, log_path: str) -> TargetError:
    """The most specific error the log supports for a server that did not become ready."""
    conflict = port_conflict(text)
    if conflict:
        service, address = conflict
        return TargetError(
            f"Triton could not start its {service} service: {address} is already in use",
            hint="choose another port (e.g. --http-port 0 picks a free one) or stop the "
            f"process listening there (ss -ltnp | grep {address.rsplit(':', 1)[-1]})",
        )
    loader = loader_error(text)
    if loader:
        return TargetError(
            f"the tritonserver binary cannot start on this machine: {loader}",
            hint="the nvidia-pytriton wheel needs glibc >= 2.35 (e.g. Ubuntu 22.04+, Debian 12+) "
            "on x86_64 or aarch64",
        )
    reason = model_failure(text, model)
    if reason:
        hint = f"full server log: {log_path}"
        if "numpy" in reason:
            hint = (
                "the Python backend stub could not import numpy from loadkit's Python; "
                f"see loadkit/target/runtime.py and {log_path}"
            )
        return TargetError(f"Triton failed to load model '{model}': {reason}", hint=hint)
    status = f"exited with code {returncode}" if returncode is not None else "is still starting"
    tail = log_tail(text, 8)
    return TargetError(
        f"tritonserver {status}; last log lines:\n{tail}" if tail else f"tritonserver {status}",
        hint=f"full server log: {log_path}",
    )
