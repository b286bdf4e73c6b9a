"""Micro-benchmark: the JSON transport's cost of encoding one KServe v2 body.

    .venv/bin/python bench/json_body.py                  # 1 and 100 candidates, a few seconds
    .venv/bin/python bench/json_body.py --candidates 1,10,100,1000

For the ranker's request (user features + N candidate rows), the time per body
of the standard library's `json.dumps` of `kserve_v2_json` (loadkit before
orjson) and of `kserve_v2_json_bytes` (orjson, numpy arrays unconverted), best
of 5 repeats. It also checks that both bodies carry the same values, each in its
input's datatype.
"""

from __future__ import annotations

import argparse
import json
import timeit

import numpy as np

from loadkit.load.sources import InferRequest, build_source
from loadkit.load.transports import kserve_v2_json, kserve_v2_json_bytes
from loadkit.target.requests import ranker_plan

_DTYPES = {"FP32": np.float32, "FP16": np.float16, "FP64": np.float64}


def _values(body: bytes) -> list[np.ndarray]:
    """Each input's numbers in its own datatype (FP32 compared as FP32)."""
    return [
        np.asarray(i["data"], _DTYPES.get(i["datatype"], np.int64))
        for i in json.loads(body)["inputs"]
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", default="1,100", help="comma-separated candidate counts")
    parser.add_argument("--number", type=int, default=0, help="bodies per repeat (0: auto)")
    args = parser.parse_args()
    print("| candidates | body bytes (json / orjson) | json.dumps us | orjson us | speed-up |")
    print("|---|---|---|---|---|")
    for n in (int(c) for c in args.candidates.split(",")):
        request = build_source(ranker_plan(n), seed=0).next()

        def stdlib(request: InferRequest = request) -> bytes:
            return json.dumps(kserve_v2_json(request)).encode()

        def fast(request: InferRequest = request) -> bytes:
            return kserve_v2_json_bytes(request)

        a, b = stdlib(), fast()
        same = all(np.array_equal(x, y) for x, y in zip(_values(a), _values(b), strict=True))
        if not same:
            raise SystemExit(f"{n} candidates: the two bodies carry different values")
        number = args.number or max(20, 20_000 // n)
        times = [
            min(timeit.repeat(f, number=number, repeat=5)) / number * 1e6 for f in (stdlib, fast)
        ]
        print(
            f"| {n} | {len(a):,} / {len(b):,} | {times[0]:.1f} | {times[1]:.1f} "
            f"| {times[0] / times[1]:.1f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
