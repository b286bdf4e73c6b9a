"""KServe v2 tensor datatypes and their numpy equivalents.

Written out here (not `tritonclient.utils.triton_to_np_dtype`) so that the
orchestrator and the analysis side can name datatypes without importing a
client library; `BYTES` is numpy `object` (elements are `bytes`), as
tritonclient expects.
"""

from __future__ import annotations

import numpy as np

DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}

INTEGER_TYPES = frozenset(k for k, v in DATATYPES.items() if v.kind in "iu")
FLOAT_TYPES = frozenset(k for k, v in DATATYPES.items() if v.kind == "f")


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype for a KServe v2 datatype; ValueError for one we do not know."""
    try:
        return DATATYPES[datatype.upper()]
    except KeyError:
        raise ValueError(
            f"unsupported datatype {datatype!r} (known: {', '.join(DATATYPES)})"
        ) from None
