"""The CLI layer: help that teaches, errors as ERROR/HINT lines with documented exit codes."""

from __future__ import annotations

import pytest

from loadkit import cli
from loadkit.errors import EXIT_RUN_FORMAT


def test_help_lists_commands_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert "exit codes:" in out
    assert "loadkit demo" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("loadkit ")


def test_loadkit_error_becomes_error_and_hint_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from loadkit.errors import RunFormatError

    def failing(args: object) -> int:
        raise RunFormatError("reports/x has no manifest.json", hint="pass a run directory")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda only=None: parser)
    # Route any subcommand to the failing runner.
    args = parser.parse_args([])
    args._run = failing
    monkeypatch.setattr(parser, "parse_args", lambda argv=None: args)
    assert cli.main([]) == EXIT_RUN_FORMAT
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "ERROR: reports/x has no manifest.json",
        "HINT: pass a run directory",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["capacity", "--target", "http://127.0.0.1:1", "--slo", "p99=50ms"],
        ["sweep", "capacity", "--target", "http://127.0.0.1:1", "--vary", "instances=1,2"],
        ["tune", "soak", "--target", "http://127.0.0.1:1", "--slo", "p99=50ms"],
        ["run", "soak", "--target", "http://127.0.0.1:1"],
    ],
)
def test_every_command_that_sends_load_takes_the_request_options(argv: list[str]) -> None:
    # GIVEN a model with a variable dimension (the pre-flight's hint says "give --shape")
    from loadkit.commands.options import scenario_params

    args = cli.build_parser().parse_args(
        [*argv, "--model", "doc_ranker", "--shape", "DOC_IDS:16", "--int-range", "DOC_IDS:0,999",
         "--set", "shape=IGNORED:1", "--set", "rate=20"]
    )  # fmt: skip
    # THEN the scenario gets them as parameters, the flag over --set
    params = scenario_params(args)
    assert params["model"] == "doc_ranker" and params["shape"] == "DOC_IDS:16"
    assert params["int_range"] == "DOC_IDS:0,999" and params["rate"] == "20"
