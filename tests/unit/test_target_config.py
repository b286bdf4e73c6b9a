"""Rendering the ranker's Triton config and repository without starting a server."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from loadkit.errors import UsageError
from loadkit.target.config import (
    DEFAULT_MODEL_PARAMS,
    ModelSettings,
    render_config,
    template_dir,
    write_repository,
)
from loadkit.target.runtime import STUB_PYTHONPATH_ENV, find_runtime, server_environment


def parameters(text: str) -> dict[str, str]:
    return dict(re.findall(r'key: "([^"]+)" value: \{ string_value: "((?:[^"\\]|\\.)*)" \}', text))


def test_defaults_render_a_complete_config() -> None:
    text = render_config(ModelSettings())
    assert "$" not in text.replace("$placeholders", "")  # every placeholder filled
    assert 'name: "ranker"' in text and 'backend: "python"' in text
    assert "max_batch_size: 32" in text
    assert "max_queue_delay_microseconds: 2000" in text
    assert re.search(r"count: 1\s+kind: KIND_CPU", text)
    assert "allow_ragged_batch: true" in text
    assert parameters(text) == DEFAULT_MODEL_PARAMS


def test_launcher_arguments_reach_the_config() -> None:
    settings = ModelSettings(
        max_batch_size=8,
        max_queue_delay_us=25_000,
        instances=3,
        params={"gpu_time_us_per_batch": "5000"},
        sim_gpu_state="/run/sim/gpu.json",
    )
    text = render_config(settings)
    assert "max_batch_size: 8" in text
    assert "max_queue_delay_microseconds: 25000" in text
    assert re.search(r"count: 3\s+kind: KIND_CPU", text)
    params = parameters(text)
    assert params["gpu_time_us_per_batch"] == "5000"  # overridden
    assert params["gpu_time_us_per_item"] == DEFAULT_MODEL_PARAMS["gpu_time_us_per_item"]
    assert params["sim_gpu_state"] == "/run/sim/gpu.json"


def test_parameter_values_are_escaped() -> None:
    text = render_config(ModelSettings(params={"note": 'say "hi"\\now'}))
    assert r'string_value: "say \"hi\"\\now"' in text


@pytest.mark.parametrize(
    "settings",
    [
        ModelSettings(max_batch_size=0),
        ModelSettings(instances=0),
        ModelSettings(max_queue_delay_us=-1),
    ],
)
def test_invalid_settings_are_usage_errors(settings: ModelSettings) -> None:
    with pytest.raises(UsageError):
        render_config(settings)


def test_write_repository_lays_out_a_triton_repository(tmp_path: Path) -> None:
    root = write_repository(tmp_path / "repo", ModelSettings(max_batch_size=4))
    assert (root / "ranker" / "config.pbtxt").read_text().count("max_batch_size: 4") == 1
    shipped = (template_dir() / "1" / "model.py").read_text()
    assert (root / "ranker" / "1" / "model.py").read_text() == shipped
    # The template itself is untouched.
    assert "${max_batch_size}" in (template_dir() / "config.pbtxt").read_text()


def test_server_environment_points_the_stub_at_this_python() -> None:
    runtime = find_runtime()
    env = server_environment(runtime, base={"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/x"})
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    libs = env["LD_LIBRARY_PATH"].split(os.pathsep)
    assert str(runtime.libs) in libs and libs[-1] == "/opt/x"
    assert any("site-packages" in p for p in env[STUB_PYTHONPATH_ENV].split(os.pathsep))
    assert runtime.stub.name == "triton_python_backend_stub" and runtime.stub.is_file()


def test_the_payload_input_is_declared_only_on_request() -> None:
    plain = render_config(ModelSettings())
    assert "PAYLOAD" not in plain and "optional" not in plain
    text = render_config(ModelSettings(payload_input=True))
    block = text[text.index('name: "PAYLOAD"') :]
    block = block[: block.index("}")]
    assert "TYPE_UINT8" in block and "optional: true" in block and "dims: [ -1 ]" in block
    assert (
        text.index('name: "USER_FEATURES"') < text.index('name: "PAYLOAD"') < text.index("output [")
    )


def test_the_extra_models_queue_delay_can_be_replaced(tmp_path: Path) -> None:
    shipped = write_repository(tmp_path / "a", ModelSettings(), ("doc_ranker",))
    assert (
        "max_queue_delay_microseconds: 1000"
        in (shipped / "doc_ranker" / "config.pbtxt").read_text()
    )
    settings = ModelSettings(extra_models_queue_delay_us=0)
    text = (
        write_repository(tmp_path / "b", settings, ("doc_ranker",)) / "doc_ranker" / "config.pbtxt"
    ).read_text()
    assert "max_queue_delay_microseconds: 0\n" in text and "1000" not in text
