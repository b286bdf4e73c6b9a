"""The closed loop that profiles a model sends the same JSON body as Locust's transport."""

from __future__ import annotations

import json

import numpy as np

from loadkit.load.closed_loop import json_body
from loadkit.load.sources import InferRequest


def test_a_bytes_input_goes_as_text_beside_numbers() -> None:
    # GIVEN a request of three datatypes, one of them BYTES (doc_ranker's QUERY)
    request = InferRequest(
        names=("QUERY", "DOC_IDS", "CONTEXT"),
        datatypes=("BYTES", "INT32", "FP32"),
        arrays=(
            np.array([[b"red shoes"]], dtype=object),
            np.array([[3, 7]], dtype=np.int32),
            np.array([[0.5, 0.25, 0.0, 1.0]], dtype=np.float32),
        ),
    )
    # WHEN the closed loop encodes it
    body = json.loads(json_body(request))
    # THEN every tensor is KServe v2 JSON: the text as a string, the numbers as numbers
    tensors = {t["name"]: t for t in body["inputs"]}
    assert tensors["QUERY"] == {"name": "QUERY", "shape": [1, 1], "datatype": "BYTES",
                                "data": ["red shoes"]}  # fmt: skip
    assert tensors["DOC_IDS"]["data"] == [3, 7]
    assert tensors["CONTEXT"]["data"] == [0.5, 0.25, 0.0, 1.0]


def test_a_raw_body_is_sent_as_given() -> None:
    request = InferRequest(names=(), datatypes=(), arrays=(), body=b'{"inputs": []}')
    assert json_body(request) == b'{"inputs": []}'
