"""The data-movement case's requests: a large `PAYLOAD` attached while the fault's state file says so.

Kept out of the scenario file so that it can be tested without Locust.
"""

from __future__ import annotations

import numpy as np

from loadkit.faults.payload import PayloadState
from loadkit.load.sources import InferRequest, RequestSource
from loadkit.target.config import PAYLOAD_INPUT


class PayloadSource(RequestSource):
    """The requests of `inner`, each with a `PAYLOAD` of the state file's size while it is > 0.

    One zero-filled array per size, shared by the requests that carry it; a request
    with a payload is encoded at its send (its pre-encoded form lacks the payload).
    """

    def __init__(self, inner: RequestSource, state: PayloadState) -> None:
        self.inner = inner
        self.state = state
        self._arrays: dict[tuple[int, int], np.ndarray] = {}

    def next(self) -> InferRequest:
        request = self.inner.next()
        size = self.state.get()
        if size <= 0 or not request.arrays:
            return request
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
