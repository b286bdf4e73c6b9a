"""Real request data in perf_analyzer's input-data JSON format, so one file drives both tools.

    {"data": [ {"INPUT_A": [1, 2, 3], "INPUT_B": {"content": [...], "shape": [2, 4]}}, ... ]}

Each step maps every input to a flat row-major list, `{"content": [...],
"shape": [...]}` or `{"b64": "..."}` (raw little-endian bytes; BYTES
elements each with a 4-byte length prefix), optionally as
`{"content": {"b64": ...}, "shape": [...]}`. Shapes exclude the batch
dimension, as perf_analyzer's do; with `--batch-size N` a request stacks N
consecutive steps. A flat list for an input with a variable dimension takes
its shape from `--shape`, or from its length when only one dimension varies.
Every error names the step and the input. Written here because
perf_analyzer's parser is C++ and no Python library reads this format.
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from loadkit.errors import UsageError
from loadkit.kserve.datatypes import numpy_dtype
from loadkit.kserve.metadata import ModelSpec, TensorSpec
from loadkit.load.request_options import RequestOptions

Step = dict[str, tuple[str, np.ndarray]]  # input name -> (datatype, array without batch dim)


def load_input_data(path: Path, spec: ModelSpec, options: RequestOptions) -> list[Step]:
    """Parse and check `path` against the model; UsageError naming step and input."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read --input-data {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"--input-data {path} is not JSON: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise UsageError(
            f'--input-data {path}: expected perf_analyzer\'s {{"data": [step, ...]}}',
            hint="each step maps input names to values; see docs/own-model.md",
        )
    raw_steps = document["data"]
    if not raw_steps:
        raise UsageError(f'--input-data {path}: "data" has no steps')
    if any(isinstance(s, list) for s in raw_steps):
        raise UsageError(
            f"--input-data {path}: a list of lists is several sequence streams; "
            "loadkit sends one stream (a flat list of steps)"
        )
    steps = [_step(path, k, raw, spec, options) for k, raw in enumerate(raw_steps)]
    if options.batch_size > 1:
        first = steps[0]
        for k, step in enumerate(steps):
            for name, (_, array) in step.items():
                if array.shape != first[name][1].shape:
                    raise UsageError(
                        f"--input-data {path} step {k}, input {name}: shape {list(array.shape)} "
                        f"differs from step 0's {list(first[name][1].shape)}",
                        hint="with --batch-size above 1, steps are stacked and need equal shapes",
                    )
    return steps


def _step(path: Path, k: int, raw: Any, spec: ModelSpec, options: RequestOptions) -> Step:
    where = f"--input-data {path} step {k}"
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: a step maps input names to values, got {type(raw).__name__}")
    known = {t.name for t in spec.inputs}
    unknown = sorted(set(raw) - known - {"model"})
    if unknown:
        raise UsageError(
            f"{where}: model {spec.name!r} has no input {', '.join(map(repr, unknown))}",
            hint=f"it expects: {spec.expects()}",
        )
    step: Step = {}
    for tensor in spec.inputs:
        if tensor.name not in raw:
            if tensor.optional:
                continue
            raise UsageError(
                f"{where}: input {tensor.name} is missing",
                hint=f"model {spec.name!r} expects: {spec.expects()}",
            )
        array = _value(f"{where}, input {tensor.name}", raw[tensor.name], tensor, spec, options)
        step[tensor.name] = (tensor.datatype, array)
    return step


def _value(
    where: str, value: Any, tensor: TensorSpec, spec: ModelSpec, options: RequestOptions
) -> np.ndarray:
    shape: list[int] | None = None
    content = value
    if isinstance(value, dict):
        if "shape" in value:
            try:
                shape = [int(d) for d in value["shape"]]
            except (TypeError, ValueError):
                raise UsageError(f'{where}: "shape" must be a list of integers') from None
        if "content" in value:
            content = value["content"]
        elif "b64" in value:
            content = value
        else:
            raise UsageError(f'{where}: expected a list, {{"content", "shape"}} or {{"b64"}}')
    if isinstance(content, dict):
        if "b64" not in content:
            raise UsageError(f'{where}: "content" must be a list or {{"b64": ...}}')
        flat = _from_b64(where, content["b64"], tensor.datatype)
    elif isinstance(content, list):
        flat = _from_list(where, content, tensor.datatype)
    else:
        raise UsageError(f"{where}: expected a list of values, got {type(content).__name__}")
    dims = _dims(where, tensor, spec, options, shape, flat.size)
    if int(np.prod(dims)) != flat.size:
        raise UsageError(
            f"{where}: {flat.size} values do not fill shape {list(dims)} "
            f"({int(np.prod(dims))} values)"
        )
    array = flat.reshape(dims)
    array.flags.writeable = False
    return array


def _dims(
    where: str,
    tensor: TensorSpec,
    spec: ModelSpec,
    options: RequestOptions,
    shape: list[int] | None,
    count: int,
) -> tuple[int, ...]:
    model = tensor.shape
    declared = f"[{','.join(map(str, model))}]"
    if shape is None:
        shape = list(options.shapes.get(tensor.name) or []) or None
    if shape is None:
        variable = [i for i, d in enumerate(model) if d < 0]
        if not variable:
            return tuple(model)
        if len(variable) > 1:
            raise UsageError(
                f"{where}: the model's shape {declared} has several variable dimensions",
                hint='give {"content": [...], "shape": [...]} (batch dimension excluded)',
            )
        fixed = int(np.prod([d for d in model if d >= 0])) if len(model) > 1 else 1
        if fixed == 0 or count % fixed:
            raise UsageError(f"{where}: {count} values do not fit the model's shape {declared}")
        dims = list(model)
        dims[variable[0]] = count // fixed
        return tuple(dims)
    if len(shape) != len(model) or any(
        d >= 0 and d != s for d, s in zip(model, shape, strict=False)
    ):
        batch = " (batch dimension excluded)" if spec.batched else ""
        raise UsageError(
            f"{where}: shape {shape} does not match the model's {declared}{batch}",
            hint=f"model {spec.name!r} expects: {spec.expects()}",
        )
    return tuple(shape)


def _from_list(where: str, content: list[Any], datatype: str) -> np.ndarray:
    flat = np.array(content, dtype=object).ravel() if content else np.array([], dtype=object)
    if datatype == "BYTES":
        out = np.empty(flat.size, dtype=np.object_)
        for i, item in enumerate(flat):
            if isinstance(item, str):
                out[i] = item.encode("utf-8")
            elif isinstance(item, bytes):
                out[i] = item
            else:
                raise UsageError(f"{where}: BYTES elements must be strings, got {item!r}")
        return out
    dtype = numpy_dtype(datatype)
    try:
        return np.asarray(flat.tolist(), dtype=dtype).ravel()
    except (TypeError, ValueError, OverflowError) as exc:
        raise UsageError(f"{where}: values are not {datatype}: {exc}") from None


def _from_b64(where: str, text: Any, datatype: str) -> np.ndarray:
    try:
        raw = base64.b64decode(str(text), validate=True)
    except ValueError as exc:
        raise UsageError(f'{where}: "b64" is not base64: {exc}') from None
    if datatype == "BYTES":
        items: list[bytes] = []
        offset = 0
        while offset < len(raw):
            if offset + 4 > len(raw):
                raise UsageError(f"{where}: BYTES b64 ends inside a 4-byte length prefix")
            (length,) = struct.unpack_from("<I", raw, offset)
            offset += 4
            if offset + length > len(raw):
                raise UsageError(f"{where}: BYTES b64 element of {length} bytes runs past the end")
            items.append(raw[offset : offset + length])
            offset += length
        out = np.empty(len(items), dtype=np.object_)
        out[:] = items
        return out
    dtype = numpy_dtype(datatype).newbyteorder("<")
    if len(raw) % dtype.itemsize:
        raise UsageError(
            f"{where}: {len(raw)} bytes is not a whole number of {datatype} values "
            f"({dtype.itemsize} bytes each)"
        )
    return np.frombuffer(raw, dtype=dtype).astype(numpy_dtype(datatype))
