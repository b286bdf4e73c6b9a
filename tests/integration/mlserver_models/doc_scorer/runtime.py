"""`doc_scorer` for MLServer: the same inputs as the Triton test model `doc_ranker`.

QUERY BYTES [1], DOC_IDS INT32 [-1] (ids in [0, 999]), CONTEXT FP32 [4];
SCORES FP32 [N]. MLServer has no configuration endpoint and no batch
dimension of its own: shapes are exactly what the request carries.
"""

import zlib

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.errors import MLServerError
from mlserver.types import InferenceRequest, InferenceResponse

DOC_COUNT = 1000


class DocScorer(MLModel):
    async def load(self) -> bool:
        rng = np.random.default_rng(20261201)
        self.docs = rng.standard_normal((DOC_COUNT, 4), dtype=np.float32)
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        inputs = {i.name: i for i in payload.inputs}
        missing = {"QUERY", "DOC_IDS", "CONTEXT"} - set(inputs)
        if missing:
            raise MLServerError(f"missing input(s) {sorted(missing)}", status_code=400)
        ids = NumpyCodec.decode_input(inputs["DOC_IDS"]).astype(np.int64).ravel()
        ctx = NumpyCodec.decode_input(inputs["CONTEXT"]).astype(np.float32).ravel()
        if ids.size and (ids.min() < 0 or ids.max() >= DOC_COUNT):
            raise MLServerError(f"DOC_IDS outside [0, {DOC_COUNT - 1}]", status_code=400)
        query = inputs["QUERY"].data.root if hasattr(inputs["QUERY"].data, "root") else []
        seed = zlib.crc32(repr(query).encode())
        bias = np.random.default_rng(seed).standard_normal(4).astype(np.float32)
        scores = 1.0 / (1.0 + np.exp(-(self.docs[ids] @ (ctx[:4] + bias))))
        return InferenceResponse(
            model_name=self.name,
            outputs=[NumpyCodec.encode_output("SCORES", scores.astype(np.float32))],
        )
