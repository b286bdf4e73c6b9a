"""`doc_ranker`: scores documents for a text query (a second test model for loadkit).

Inputs (per request; the leading batch dimension is Triton's):
  QUERY    BYTES [B, 1]  the query text (UTF-8)
  DOC_IDS  INT32 [B, N]  candidate document ids, each in [0, DOC_COUNT)
  CONTEXT  FP32  [B, 4]  dense context features
Output:
  SCORES   FP32  [B, N]  relevance score in (0, 1) per document

Like a real embedding lookup, an id outside the table is an error that names
the input and the valid range: this is what random 64-bit ids run into.
"""

import os
import sys
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


class TritonPythonModel:
    def initialize(self, args):
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
                scores = self._score(query, ids, ctx.astype(np.float32, copy=False))
                out = pb_utils.Tensor("SCORES", scores)
                responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
            except Exception as exc:  # one bad request must not fail its batch-mates
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
        return responses
