"""Render the shipped `ranker` model repository into a directory Triton can serve.

The package ships a template (`model_repository/ranker/config.pbtxt`); each
embedded server gets its own rendered copy, so two servers with different
batching settings never share (or race on) one config file.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from string import Template

from loadkit.errors import UsageError

MODEL_NAME = "ranker"
# Other shipped models, served on request (`EmbeddedTriton(extra_models=...)`,
# `loadkit target --model NAME`): their config is static, not a template.
EXTRA_MODELS = ("doc_ranker",)
USER_DIM = 16  # must match USER_DIM in model_repository/ranker/1/model.py

# Simulated accelerator time: a batch of 8 takes 2000 + 8 * 250 us = 4 ms.
DEFAULT_MODEL_PARAMS: dict[str, str] = {
    "gpu_time_us_per_batch": "2000",
    "gpu_time_us_per_item": "250",
}


@dataclass(frozen=True)
class ModelSettings:
    """What the launcher may change about the model: batching, instances, parameters."""

    max_batch_size: int = 32
    max_queue_delay_us: int = 2000
    instances: int = 1
    params: Mapping[str, str] = field(default_factory=dict)
    sim_gpu_state: str | None = None
    # An optional `PAYLOAD` input (UINT8 [-1]) the model ignores: requests that carry a
    # large one make Triton copy it (compute_input) without more model work (the
    # diagnosis benchmark's data-movement case). Off: the model's inputs are unchanged.
    payload_input: bool = False
    # The shipped extra models' configurations are static; this replaces their
    # max_queue_delay_microseconds (None: as shipped). doc_ranker's 1 ms wait for
    # batches of 4-8 is itself a batching-window finding at tens to hundreds of req/s.
    extra_models_queue_delay_us: int | None = None
    # Parameters for the shipped extra models (their static configs have none), e.g.
    # doc_ranker's simulated accelerator time; with them, `sim_gpu_state` too, so that
    # the extra models share the simulated GPU with the ranker. Empty: as shipped.
    extra_models_params: Mapping[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        if self.max_batch_size < 1:
            raise UsageError(
                f"max batch size must be at least 1, got {self.max_batch_size}",
                hint="the ranker uses Triton's dynamic batcher, which needs batching enabled",
            )
        if self.max_queue_delay_us < 0:
            raise UsageError(f"max queue delay must be >= 0 us, got {self.max_queue_delay_us}")
        if self.instances < 1:
            raise UsageError(f"instances must be at least 1, got {self.instances}")

    def parameters(self) -> dict[str, str]:
        """Model parameters as Triton passes them to the Python model (all strings)."""
        merged = dict(DEFAULT_MODEL_PARAMS)
        merged.update({str(k): str(v) for k, v in self.params.items()})
        if self.sim_gpu_state:
            merged["sim_gpu_state"] = str(self.sim_gpu_state)
        return merged


# The optional input a `payload_input` ranker declares (after USER_FEATURES).
PAYLOAD_INPUT = "PAYLOAD"
_PAYLOAD_INPUT_PBTXT = (
    ",\n  {\n"
    "    # Optional, ignored by the model: bytes a client may attach (an image, a\n"
    "    # prefetched feature blob) that Triton still copies to the model.\n"
    f'    name: "{PAYLOAD_INPUT}"\n'
    "    data_type: TYPE_UINT8\n"
    "    dims: [ -1 ]\n"
    "    optional: true\n"
    "    allow_ragged_batch: true\n"
    "  }"
)


def template_dir() -> Path:
    """The shipped model directory (`.../loadkit/target/model_repository/ranker`)."""
    return Path(str(resources.files("loadkit.target") / "model_repository" / MODEL_NAME))


def _pbtxt_string(value: str) -> str:
    # JSON string escaping is a valid protobuf text-format string literal for our values.
    return json.dumps(value, ensure_ascii=True)


def render_config(settings: ModelSettings) -> str:
    """Return the `config.pbtxt` text for these settings (no files touched)."""
    settings.validate()
    params = ",\n".join(
        f"  {{ key: {_pbtxt_string(k)} value: {{ string_value: {_pbtxt_string(v)} }} }}"
        for k, v in sorted(settings.parameters().items())
    )
    template = Template((template_dir() / "config.pbtxt").read_text(encoding="utf-8"))
    return template.substitute(
        max_batch_size=settings.max_batch_size,
        max_queue_delay_us=settings.max_queue_delay_us,
        instances=settings.instances,
        user_dim=USER_DIM,
        extra_inputs=_PAYLOAD_INPUT_PBTXT if settings.payload_input else "",
        parameters=params,
    )


def _parameters_block(params: Mapping[str, str]) -> str:
    entries = ",\n".join(
        f"  {{ key: {_pbtxt_string(k)} value: {{ string_value: {_pbtxt_string(v)} }} }}"
        for k, v in sorted(params.items())
    )
    return f"\nparameters [\n{entries}\n]\n"


def write_repository(dest: Path, settings: ModelSettings, extra_models: Sequence[str] = ()) -> Path:
    """Create `dest/ranker/{config.pbtxt,1/model.py}` (and each extra model's copy).

    Returns `dest` (the repository root).
    """
    text = render_config(settings)
    model_dir = dest / MODEL_NAME
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template_dir() / "1" / "model.py", model_dir / "1" / "model.py")
    (model_dir / "config.pbtxt").write_text(text, encoding="utf-8")
    for name in extra_models:
        if name not in EXTRA_MODELS:
            raise UsageError(
                f"no shipped model {name!r}",
                hint=f"shipped: {', '.join((MODEL_NAME, *EXTRA_MODELS))}",
            )
        source = template_dir().parent / name
        shutil.copytree(
            source, dest / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
        )
        if settings.extra_models_queue_delay_us is not None:
            config = dest / name / "config.pbtxt"
            text = re.sub(
                r"max_queue_delay_microseconds: \d+",
                f"max_queue_delay_microseconds: {int(settings.extra_models_queue_delay_us)}",
                config.read_text(encoding="utf-8"),
            )
            config.write_text(text, encoding="utf-8")
        if settings.extra_models_params:
            params = {str(k): str(v) for k, v in settings.extra_models_params.items()}
            if settings.sim_gpu_state:
                params.setdefault("sim_gpu_state", str(settings.sim_gpu_state))
            config = dest / name / "config.pbtxt"
            config.write_text(
                config.read_text(encoding="utf-8") + _parameters_block(params), encoding="utf-8"
            )
    return dest
