"""Request payloads: candidate batches drawn from a seeded generator.

A recommendation request scores `candidates` item ids for one user. Each
Locust user draws from its own generator (seed, user number), so a run's
payloads are reproducible and two users never send identical streams.
"""

from __future__ import annotations

from typing import Any

import numpy as np

USER_DIM = 16  # must match the ranker model's USER_FEATURES dimension
ITEM_ID_SPACE = 1 << 40


class CandidateBatches:
    """Yields (item_ids int64 [1, N], user_features fp32 [1, USER_DIM]) pairs."""

    def __init__(self, candidates: int, seed: int, stream: int = 0, user_dim: int = USER_DIM):
        if candidates < 1:
            from loadkit.errors import UsageError

            raise UsageError(f"candidates must be at least 1, got {candidates}")
        self.candidates = candidates
        self.user_dim = user_dim
        self._rng = np.random.default_rng([seed, stream])

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        ids = self._rng.integers(0, ITEM_ID_SPACE, size=(1, self.candidates), dtype=np.int64)
        user = self._rng.standard_normal((1, self.user_dim), dtype=np.float32)
        return ids, user


def kserve_v2_json(item_ids: np.ndarray, user_features: np.ndarray) -> dict[str, Any]:
    """A KServe v2 / Open Inference Protocol JSON body for the ranker model."""
    return {
        "inputs": [
            {
                "name": "ITEM_IDS",
                "shape": list(item_ids.shape),
                "datatype": "INT64",
                "data": item_ids.ravel().tolist(),
            },
            {
                "name": "USER_FEATURES",
                "shape": list(user_features.shape),
                "datatype": "FP32",
                "data": user_features.ravel().tolist(),
            },
        ]
    }
