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
# Draw several requests' payloads per generator call (each call costs ~8 us, as much as
# drawing 30 requests at once); a block stays under this size, so an idle user costs nothing.
_BLOCK_BYTES = 16 * 1024
_MAX_BLOCK = 64


class CandidateBatches:
    """Yields (item_ids int64 [1, N], user_features fp32 [1, USER_DIM]) pairs.

    The arrays are read-only views into a block drawn ahead for the next few requests.
    """

    def __init__(self, candidates: int, seed: int, stream: int = 0, user_dim: int = USER_DIM):
        if candidates < 1:
            from loadkit.errors import UsageError

            raise UsageError(f"candidates must be at least 1, got {candidates}")
        self.candidates = candidates
        self.user_dim = user_dim
        self._rng = np.random.default_rng([seed, stream])
        row_bytes = 8 * candidates + 4 * user_dim
        self._block = max(1, min(_MAX_BLOCK, _BLOCK_BYTES // row_bytes))
        self._ids = np.empty((0, candidates), dtype=np.int64)
        self._users = np.empty((0, user_dim), dtype=np.float32)
        self._row = 0

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        row = self._row
        if row >= len(self._ids):
            self._draw()
            row = 0
        self._row = row + 1
        return self._ids[row : row + 1], self._users[row : row + 1]

    def _draw(self) -> None:
        size = self._block
        self._ids = self._rng.integers(
            0, ITEM_ID_SPACE, size=(size, self.candidates), dtype=np.int64
        )
        self._users = self._rng.standard_normal((size, self.user_dim), dtype=np.float32)
        self._ids.flags.writeable = False
        self._users.flags.writeable = False


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
