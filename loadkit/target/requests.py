"""The embedded `ranker` model's request preset: what suits it when its inputs match.

Registered in `loadkit.load.presets` through the `loadkit.request_presets`
entry point (pyproject.toml), so the load generator never names this module.

`ITEM_IDS` has a variable length (the candidates a request scores), so a
metadata-built request needs its size: the scenario's `candidates`
parameter gives it. Item ids are hashed by the model, so any int64 is valid:
the preset draws them from a wide range (the generic default is small).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadkit.kserve.metadata import ModelSpec, TensorSpec
from loadkit.target.config import MODEL_NAME, USER_DIM

ITEM_ID_SPACE = 1 << 40
DEFAULT_CANDIDATES = 100


def ranker_spec(max_batch_size: int = 32) -> ModelSpec:
    """The ranker as its server describes it (batch dimension excluded)."""
    return ModelSpec(
        name=MODEL_NAME,
        inputs=(
            TensorSpec("ITEM_IDS", "INT64", (-1,)),
            TensorSpec("USER_FEATURES", "FP32", (USER_DIM,)),
        ),
        outputs=(TensorSpec("SCORES", "FP32", (-1,)),),
        max_batch_size=max_batch_size,
        platform="python",
    )


def ranker_preset(params: Mapping[str, Any]) -> Any:
    from loadkit.errors import UsageError
    from loadkit.load.presets import Preset

    candidates = int(params.get("candidates") or DEFAULT_CANDIDATES)
    if candidates < 1:
        raise UsageError(f"candidates must be at least 1, got {candidates}")
    return Preset(
        spec=ranker_spec(),
        shapes={"ITEM_IDS": (candidates,)},
        int_ranges={"ITEM_IDS": (0, ITEM_ID_SPACE - 1)},
    )


def ranker_plan(candidates: int = DEFAULT_CANDIDATES) -> Any:
    """The `RequestPlan` a run against the ranker uses (for benchmarks and tests)."""
    from loadkit.load.request_options import RequestOptions
    from loadkit.load.sources import plan_requests

    return plan_requests(ranker_spec(), RequestOptions(params={"candidates": candidates}))
