"""`doc_ranker`: scores documents for a text query (a second test model for loadkit).

Inputs (per request; the leading batch dimension is Triton's):
  QUERY    BYTES [B, 1]  the query text (UTF-8)
  DOC_IDS  INT32 [B, N]  candidate document ids, each in [0, DOC_COUNT)
  CONTEXT  FP32  [B, 4]  dense context features
Output:
  SCORES   FP32  [B, N]  relevance score in (0, 1) per document

Like a real embedding lookup, an id outside the table is an error that names
the input and the valid range: this is what random 64-bit ids run into.

As shipped it has no accelerator time. With the parameters `gpu_time_us_per_batch`
/ `gpu_time_us_per_item` (loadkit's `extra_models_params`) each batch also sleeps
that long, as the ranker does, and with `sim_gpu_state` that time is divided by the
simulated GPU's clock factor and by this model's share of the GPU's time
(`{"shares": {"doc_ranker": s}}`): two models on one simulated GPU delay each other.
"""

import json
import os
import sys
import time
import zlib

try:
    import numpy as np
except ImportError:
    # See ranker/1/model.py: the stub's isolated interpreter may need loadkit's sys.path.
    extra = os.environ.get("LOADKIT_STUB_PYTHONPATH", "").split(os.pathsep)
    sys.path[:0] = [p for p in extra if p and p not in sys.path]
    import numpy as np

import triton_python_backend_utils as pb_utils

DOC_COUNT = 1000
EMBED_DIM = 8
CONTEXT_DIM = 4
SEED = 20261201


STATE_REREAD_S = 0.1


class GpuShare:
    """The simulated GPU's clock factor x this model's share of its time (1.0: unknown).

    Re-read at most every 100 ms; a torn or missing file keeps the last value.
    """

    def __init__(self, path, name):
        self.path, self.name = path or None, name
        self.factor, self._checked = 1.0, 0.0

    def get(self):
        now = time.monotonic()
        if self.path is None or now - self._checked < STATE_REREAD_S:
            return self.factor
        self._checked = now
        try:
            with open(self.path, encoding="utf-8") as fh:
                state = json.load(fh)
            clock = float(state.get("clock_factor", 1.0))
            share = float((state.get("shares") or {}).get(self.name, 1.0))
        except (OSError, ValueError, TypeError, AttributeError):
            return self.factor
        factor = clock * share
        self.factor = factor if 0.0 < factor <= 1.0 else 1.0
        return self.factor


def _param(config, name, default):
    value = config.get("parameters", {}).get(name, {}).get("string_value", "")
    return value if value != "" else default


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.gpu_us_per_batch = float(_param(config, "gpu_time_us_per_batch", "0"))
        self.gpu_us_per_item = float(_param(config, "gpu_time_us_per_item", "0"))
        self.gpu = GpuShare(_param(config, "sim_gpu_state", ""), args.get("model_name", "doc_ranker"))
        rng = np.random.default_rng(SEED)
        self.docs = rng.standard_normal((DOC_COUNT, EMBED_DIM), dtype=np.float32)
        self.w_ctx = rng.standard_normal((CONTEXT_DIM, EMBED_DIM), dtype=np.float32) / 2.0

    def _score(self, query, ids, ctx):
        rows = []
        for b in range(ids.shape[0]):
            text = query[b, 0]
            text = text if isinstance(text, bytes) else str(text).encode("utf-8")
            q = np.random.default_rng(zlib.crc32(text)).standard_normal(EMBED_DIM)
            v = q.astype(np.float32) + ctx[b] @ self.w_ctx
            rows.append(self.docs[ids[b]] @ v / np.sqrt(EMBED_DIM))
        return (1.0 / (1.0 + np.exp(-np.stack(rows)))).astype(np.float32)

    def execute(self, requests):
        responses = []
        batch_size = 0
        for request in requests:
            try:
                query = pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy()
                ids = pb_utils.get_input_tensor_by_name(request, "DOC_IDS").as_numpy()
                ctx = pb_utils.get_input_tensor_by_name(request, "CONTEXT").as_numpy()
                if ids.size and (ids.min() < 0 or ids.max() >= DOC_COUNT):
                    bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
                    raise ValueError(
                        f"DOC_IDS value {bad} is outside [0, {DOC_COUNT - 1}] "
                        f"(the document table has {DOC_COUNT} rows)"
                    )
                batch_size += ids.shape[0]
                scores = self._score(query, ids, ctx.astype(np.float32, copy=False))
                out = pb_utils.Tensor("SCORES", scores)
                responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
            except Exception as exc:  # one bad request must not fail its batch-mates
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
        simulated_us = self.gpu_us_per_batch + self.gpu_us_per_item * batch_size
        if simulated_us > 0:  # the simulated kernel, on the GPU it may share
            time.sleep(simulated_us / 1e6 / self.gpu.get())
        return responses
