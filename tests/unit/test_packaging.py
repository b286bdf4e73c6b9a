"""What `pip install .` ships, and what works without the `target` extra."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from loadkit import cli
from loadkit.errors import EXIT_TARGET

REPO = Path(__file__).resolve().parents[2]


def test_every_package_is_listed_in_pyproject() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "loadkit").rglob("__init__.py")
        if "model_repository" not in init.parts  # the models' own model.py are not packages
    }
    on_disk.add("loadkit.scenarios")
    # Folders of data that Python could import (an identifier's name) are packages
    # too, or setuptools warns "Package would be ignored" on every install.
    for root, top in (
        (REPO / "loadkit", ("loadkit",)),
        (REPO / "scenarios", ("loadkit", "scenarios")),
    ):
        for folder in root.rglob("*"):
            parts = folder.relative_to(root).parts
            if (
                folder.is_dir()
                and all(p.isidentifier() for p in parts)
                and "__pycache__" not in parts
            ):
                on_disk.add(".".join(top + parts))
    missing = sorted(on_disk - set(config["packages"]))
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml"
    assert config["package-dir"]["loadkit.scenarios"] == "scenarios"
    assert (REPO / "scenarios" / "__init__.py").is_file()


@pytest.mark.parametrize("command", [["target"], ["target", "--smoke"], ["demo", "--short"]])
def test_target_commands_without_the_extra_say_how_to_get_it(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an install without nvidia-pytriton (None in sys.modules blocks the import)
    monkeypatch.setitem(sys.modules, "pytriton", None)
    # WHEN the user asks for the embedded target
    code = cli.main(command)
    # THEN one ERROR line and one HINT line say what to install, and nothing started
    err = capsys.readouterr().err.splitlines()
    assert code == EXIT_TARGET
    assert err[0].startswith("ERROR: the embedded Triton target is not installed")
    assert err[1].startswith("HINT: ") and "pip install 'loadkit[target]'" in err[1]
    assert len(err) == 2


def test_nothing_but_the_target_needs_nvidia_pytriton() -> None:
    # every module imports with pytriton blocked: analysis-only installs work
    code = (
        "import sys, pkgutil, importlib\n"
        "sys.modules['pytriton'] = None\n"
        "import loadkit, loadkit.scenarios\n"
        "for m in pkgutil.walk_packages(loadkit.__path__, 'loadkit.'):\n"
        "    if '.scenarios.' not in m.name and 'model_repository' not in m.name:\n"
        "        importlib.import_module(m.name)\n"
        "from loadkit import cli\n"
        "sys.exit(cli.main(['scenarios']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "burst_2x" in proc.stdout
