"""The data-movement case's requests: a large `PAYLOAD` attached while the fault's state file says so.

Kept out of the scenario file so that it can be tested without Locust.
"""

from __future__ import annotations

import numpy as np

from loadkit.faults.payload import PayloadState
from loadkit.load.sources import InferRequest, RequestSource
from loadkit.target.config import PAYLOAD_INPUT


class PayloadSource(RequestSource):
    """The requests of `inner`; while the state file's size is > 0, its share of them (spread
    evenly: every 1/share-th) with a `PAYLOAD` of that size.

    One zero-filled array per size, shared by the requests that carry it; a request
    with a payload is encoded at its send (its pre-encoded form lacks the payload).
    """

    def __init__(self, inner: RequestSource, state: PayloadState) -> None:
        self.inner = inner
        self.state = state
        self._arrays: dict[tuple[int, int], np.ndarray] = {}
        self._credit = 0.0  # accumulated share: a payload is due at 1

    def next(self) -> InferRequest:
        request = self.inner.next()
        size = self.state.get()
        if size <= 0 or not request.arrays:
            self._credit = 0.0
            return request
        self._credit += self.state.share
        if self._credit < 1.0 - 1e-9:
            return request
        self._credit -= 1.0
        key = (int(request.arrays[0].shape[0]), size)
        payload = self._arrays.get(key)
        if payload is None:
            self._arrays.clear()
            payload = self._arrays[key] = np.zeros(key, dtype=np.uint8)
        return request._replace(
            names=(*request.names, PAYLOAD_INPUT),
            datatypes=(*request.datatypes, "UINT8"),
            arrays=(*request.arrays, payload),
            wire=None,
        )
