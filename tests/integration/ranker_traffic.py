"""Another client than loadkit: a paced tritonclient loop against the embedded ranker.

Production windows (`import --prometheus`, `loadkit oncall`) are tested on traffic that
loadkit did not send, as perf_analyzer or a service in front of the model would.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from loadkit.target.config import MODEL_NAME, USER_DIM


def paced_requests(
    url: str,
    rate_per_s: float,
    until: float,
    sent: list[int],
    failed: list[str],
    stop: threading.Event | None = None,
) -> None:
    """A request every 1/rate_per_s s until the monotonic time `until` (or `stop` is set);
    each success appends to `sent`, each failure's words to `failed`."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url.removeprefix("http://"))
    rng = np.random.default_rng(threading.get_ident() % 2**32)
    step = 1.0 / rate_per_s
    next_at = time.monotonic()
    try:
        while next_at < until and not (stop is not None and stop.is_set()):
            items = httpclient.InferInput("ITEM_IDS", [1, 100], "INT64")
            items.set_data_from_numpy(rng.integers(0, 1 << 40, size=(1, 100), dtype=np.int64))
            user = httpclient.InferInput("USER_FEATURES", [1, USER_DIM], "FP32")
            user.set_data_from_numpy(rng.random((1, USER_DIM), dtype=np.float32))
            try:
                client.infer(MODEL_NAME, [items, user])
                sent.append(1)
            except Exception as exc:  # recorded, asserted on by the caller
                failed.append(str(exc))
            next_at += step
            time.sleep(max(0.0, next_at - time.monotonic()))
    finally:
        client.close()
