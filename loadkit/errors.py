"""The small family of errors that `loadkit.cli.main` turns into `ERROR:`/`HINT:` lines.

Exit codes (documented in README "Exit codes"):
  0  success
  1  the run failed its SLO (only with --fail-on-slo), or --abort-on stopped it
  2  bad input: command line, scenario, file the user gave us
  3  the target or a server we started could not be started or reached
  4  a run directory could not be read
  130 interrupted (Ctrl-C); data recorded so far is kept
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_SLO_FAILED = 1
EXIT_USAGE = 2
EXIT_TARGET = 3
EXIT_RUN_FORMAT = 4
EXIT_INTERRUPTED = 130


class LoadkitError(Exception):
    """An error the user can act on: a one-line message and an optional hint."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(LoadkitError):
    """Bad command line or input file."""

    exit_code = EXIT_USAGE


class TargetError(LoadkitError):
    """The server under test (or the embedded one) failed to start or answer."""

    exit_code = EXIT_TARGET


class RunFormatError(LoadkitError):
    """A run directory is missing, unreadable or of an unknown schema version."""

    exit_code = EXIT_RUN_FORMAT


class SloFailed(LoadkitError):
    """Raised by `analyze --fail-on-slo` so CI pipelines can gate a launch."""

    exit_code = EXIT_SLO_FAILED
