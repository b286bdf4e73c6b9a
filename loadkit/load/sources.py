"""Request sources: what each request carries, as named tensors.

A `RequestPlan` fixes, once per run, what is sent: the model, each input's
name, datatype and full shape (batch dimension included), value ranges and
the requested outputs. It is built from the model's metadata and config (the
default), and it is plain JSON, so `loadkit run` resolves it once in its
pre-flight and hands it to every Locust process (`LOADKIT_REQUEST_PLAN`).

A `RequestSource` built from a plan yields `InferRequest`s:

- `SyntheticSource`: seeded values by type, drawn a block of requests at a
  time (one generator call costs as much as drawing ~30 requests): integers
  in a per-input range (default small and non-negative: random 64-bit ids
  break embedding lookups), floats standard normal, BYTES strings of a set
  length, BOOL fair coins;
- `InputDataSource`: real data from perf_analyzer's input-data JSON
  (`loadkit.load.input_data`), steps round-robin;
- `BodySource`: a JSON Lines file of request bodies, replayed as is
  (protocol=json, e.g. a recommendation API in front of the model).

Nothing here knows any model's input names: presets for known models (the
embedded `ranker`) live with those models and register in `loadkit.load.presets`.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from loadkit.errors import UsageError
from loadkit.kserve.datatypes import FLOAT_TYPES, INTEGER_TYPES, numpy_dtype
from loadkit.kserve.metadata import ModelSpec, TensorSpec
from loadkit.load import presets
from loadkit.load.input_data import load_input_data
from loadkit.load.presets import Preset
from loadkit.load.request_options import DEFAULT_STRING_LENGTH, RequestOptions

DEFAULT_INT_RANGE = (0, 99)  # inclusive; small and non-negative, safe for embedding tables
# Draw several requests per generator call; a block stays under this size.
_BLOCK_BYTES = 16 * 1024
_MAX_BLOCK = 64


class InferRequest(NamedTuple):
    """One request: named, typed arrays and the requested outputs, or a raw JSON body.

    A named tuple whose names and datatypes are shared by every request of a
    source: one is built per request, and this is the cheapest way to build it.
    """

    names: tuple[str, ...]
    datatypes: tuple[str, ...]
    arrays: tuple[np.ndarray, ...]
    outputs: tuple[str, ...] = ()
    body: bytes | None = None
    # The request as one transport sends it (an HTTP body, a gRPC message), encoded
    # ahead by `Transport.encode_block` when the source drew it; None: encode at send.
    wire: Any = None

    @property
    def inputs(self) -> tuple[tuple[str, str, np.ndarray], ...]:
        """(name, datatype, array) per input."""
        return tuple(zip(self.names, self.datatypes, self.arrays, strict=True))

    @property
    def size_bytes(self) -> int:
        """The request's data: its tensors' bytes (or its raw body's).

        Recorded beside each sampled request, so the analysis can tell when the
        slow requests are the large ones (data movement), on any protocol.
        """
        if self.body is not None:
            return len(self.body)
        return sum(a.nbytes for a in self.arrays)

    def describe(self) -> str:
        if self.body is not None:
            return f"a {len(self.body)}-byte JSON body"
        return "; ".join(f"{n} {d} {list(a.shape)}" for n, d, a in self.inputs)


def tensors_request(
    inputs: list[tuple[str, str, np.ndarray]], outputs: tuple[str, ...] = ()
) -> InferRequest:
    """An InferRequest from (name, datatype, array) triples."""
    names, datatypes, arrays = zip(*inputs, strict=True) if inputs else ((), (), ())
    return InferRequest(tuple(names), tuple(datatypes), tuple(arrays), outputs)


@dataclass(frozen=True)
class InputPlan:
    name: str
    datatype: str
    shape: tuple[int, ...]  # full request shape, batch dimension included
    int_range: tuple[int, int] | None = None


@dataclass(frozen=True)
class RequestPlan:
    """Everything a Locust process needs to build its source; JSON round-trippable."""

    model: str
    kind: str  # synthetic | input_data | bodies
    inputs: tuple[InputPlan, ...] = ()
    outputs: tuple[str, ...] = ()
    batch_size: int = 1
    string_length: int = DEFAULT_STRING_LENGTH
    input_data: str = ""
    spec: ModelSpec | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "kind": self.kind,
            "inputs": [
                {
                    "name": i.name,
                    "datatype": i.datatype,
                    "shape": list(i.shape),
                    "int_range": list(i.int_range) if i.int_range else None,
                }
                for i in self.inputs
            ],
            "outputs": list(self.outputs),
            "batch_size": self.batch_size,
            "string_length": self.string_length,
            "input_data": self.input_data,
            "spec": self.spec.to_json() if self.spec else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RequestPlan:
        inputs = tuple(
            InputPlan(
                str(i["name"]),
                str(i["datatype"]),
                tuple(int(d) for d in i["shape"]),
                (int(i["int_range"][0]), int(i["int_range"][1])) if i.get("int_range") else None,
            )
            for i in data.get("inputs") or []
        )
        spec = data.get("spec")
        return cls(
            model=str(data["model"]),
            kind=str(data["kind"]),
            inputs=inputs,
            outputs=tuple(str(o) for o in data.get("outputs") or []),
            batch_size=int(data.get("batch_size") or 1),
            string_length=int(data.get("string_length") or DEFAULT_STRING_LENGTH),
            input_data=str(data.get("input_data") or ""),
            spec=ModelSpec.from_json(spec) if spec else None,
        )


# --------------------------------------------------------------------- planning
def matching_preset(spec: ModelSpec, params: Mapping[str, Any]) -> Preset | None:
    """The preset of a known model whose inputs `spec` has exactly, if any."""
    for name in presets.names():
        preset = presets.load(name, params)
        if _signature(preset.spec) == _signature(spec):
            return preset
    return None


def _signature(spec: ModelSpec) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
    return tuple(sorted((t.name, t.datatype, t.shape) for t in spec.inputs))


def _check_names(given: Mapping[str, Any], spec: ModelSpec, flag: str) -> None:
    unknown = sorted(set(given) - {t.name for t in spec.inputs})
    if unknown:
        raise UsageError(
            f"{flag}: model {spec.name!r} has no input {', '.join(map(repr, unknown))}",
            hint=f"it expects: {spec.expects()}",
        )


def resolve_dims(
    spec: ModelSpec, tensor: TensorSpec, given: tuple[int, ...] | None
) -> tuple[int, ...]:
    """The non-batch dimensions to send for `tensor`: its own, or `--shape`'s for -1 dims."""
    dims = tensor.shape
    if given is None:
        if any(d < 0 for d in dims):
            example = ",".join("16" if d < 0 else str(d) for d in dims)
            batch = " (batch dimension excluded)" if spec.batched else ""
            raise UsageError(
                f"input {tensor.name} of model {spec.name!r} has a variable shape "
                f"[{','.join(map(str, dims))}]: loadkit cannot choose its size",
                hint=f"give --shape {tensor.name}:{example}{batch}, or real data with --input-data",
            )
        return dims
    if len(given) != len(dims) or any(d >= 0 and d != g for d, g in zip(dims, given, strict=False)):
        raise UsageError(
            f"--shape {tensor.name}:{','.join(map(str, given))} does not fit the model's "
            f"[{','.join(map(str, dims))}]",
            hint="give every dimension; fixed ones as the model declares them"
            + (" (batch dimension excluded)" if spec.batched else ""),
        )
    return given


def check_batch_size(spec: ModelSpec, batch_size: int) -> None:
    if batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {batch_size}")
    if batch_size == 1:
        return
    if spec.max_batch_size is not None and not spec.batched:
        raise UsageError(
            f"--batch-size {batch_size}: model {spec.name!r} does not batch (max_batch_size 0)",
            hint="leave --batch-size at 1 for this model",
        )
    if spec.max_batch_size and batch_size > spec.max_batch_size:
        raise UsageError(
            f"--batch-size {batch_size} is above model {spec.name!r}'s "
            f"max_batch_size {spec.max_batch_size}"
        )
    if spec.max_batch_size is None:
        raise UsageError(
            f"--batch-size {batch_size}: the server does not say whether {spec.name!r} batches "
            "(no model configuration)",
            hint="give the whole request shape with --shape instead",
        )


def plan_requests(
    spec: ModelSpec, options: RequestOptions, *, protocol: str = "http"
) -> RequestPlan:
    """The plan for `spec`; UsageError naming the input when something does not fit."""
    check_batch_size(spec, options.batch_size)
    if options.string_length < 0:
        raise UsageError(f"string_length must be >= 0, got {options.string_length}")
    outputs = tuple(t.name for t in spec.outputs)
    if options.input_data:
        load_input_data(Path(options.input_data), spec, options)  # validate now, by step
        return RequestPlan(
            spec.name,
            "input_data",
            outputs=outputs,
            batch_size=options.batch_size,
            input_data=str(Path(options.input_data).resolve()),
            spec=spec,
        )
    shapes = dict(options.shapes)
    ranges = dict(options.int_ranges)
    _check_names(shapes, spec, "--shape")
    _check_names(ranges, spec, "--int-range")
    preset = matching_preset(spec, options.params)
    if preset is not None:
        shapes = {**preset.shapes, **shapes}
        ranges = {**preset.int_ranges, **ranges}
    batch = (options.batch_size,) if spec.batched else ()
    inputs = []
    for tensor in spec.inputs:
        if tensor.optional and tensor.name not in shapes:
            continue
        numpy_dtype(tensor.datatype)  # ValueError for an unknown type
        dims = resolve_dims(spec, tensor, shapes.get(tensor.name))
        int_range = None
        if tensor.datatype in INTEGER_TYPES:
            int_range = _fit_range(tensor, ranges.get(tensor.name, DEFAULT_INT_RANGE))
        inputs.append(InputPlan(tensor.name, tensor.datatype, batch + dims, int_range))
    if not inputs:
        raise UsageError(f"model {spec.name!r} declares no inputs: nothing to send")
    return RequestPlan(
        spec.name,
        "synthetic",
        tuple(inputs),
        outputs,
        options.batch_size,
        options.string_length,
        spec=spec,
    )


def _fit_range(tensor: TensorSpec, rng: tuple[int, int]) -> tuple[int, int]:
    info = np.iinfo(numpy_dtype(tensor.datatype))
    lo, hi = rng
    if lo < info.min or hi > info.max:
        raise UsageError(
            f"--int-range {tensor.name}:{lo},{hi} does not fit {tensor.datatype} "
            f"[{info.min}, {info.max}]"
        )
    return lo, hi


def plan_bodies(path: str, model: str) -> RequestPlan:
    """A plan that replays the JSON Lines request bodies in `path` (protocol=json)."""
    load_bodies(Path(path))
    return RequestPlan(model, "bodies", input_data=str(Path(path).resolve()))


def is_perf_analyzer_json(path: Path) -> bool:
    """True for perf_analyzer's `{"data": [...]}` document; False for JSON Lines."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "data" in data


def load_bodies(path: Path) -> list[bytes]:
    """The non-empty lines of a JSON Lines file, each checked to be one JSON value."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read --input-data {path}: {exc.strerror}") from None
    bodies = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except ValueError as exc:
            raise UsageError(
                f"--input-data {path} line {number} is not JSON: {exc}",
                hint="for protocol=json give one request body per line (JSON Lines), "
                'or perf_analyzer\'s {"data": [...]} format',
            ) from None
        bodies.append(line.strip())
    if not bodies:
        raise UsageError(f"--input-data {path} has no request bodies")
    return bodies


# --------------------------------------------------------------------- sources
# Attaches each request's wire form ahead of its send (`Transport.encode_block`).
BlockEncoder = Callable[[list[InferRequest]], list[InferRequest]]


def _as_is(requests: list[InferRequest]) -> list[InferRequest]:
    return requests


class RequestSource(ABC):
    @abstractmethod
    def next(self) -> InferRequest: ...


class SyntheticSource(RequestSource):
    """Seeded synthetic values by datatype, drawn in blocks (see module docstring).

    Each request's arrays are read-only views into the block drawn ahead.
    """

    def __init__(
        self, plan: RequestPlan, seed: int, stream: int = 0, encode: BlockEncoder | None = None
    ):
        self.plan = plan
        self._encode = encode or _as_is
        self._rng = np.random.default_rng([seed, stream])
        row_bytes = sum(
            _element_bytes(i.datatype, plan.string_length) * int(np.prod(i.shape))
            for i in plan.inputs
        )
        self._block = max(1, min(_MAX_BLOCK, _BLOCK_BYTES // max(1, row_bytes)))
        self._requests: list[InferRequest] = []
        self._row = 0
        self._names = tuple(i.name for i in plan.inputs)
        self._datatypes = tuple(i.datatype for i in plan.inputs)
        self._outputs = plan.outputs

    def next(self) -> InferRequest:
        row = self._row
        if row >= len(self._requests):
            self._requests = self._draw_block()
            row = 0
        self._row = row + 1
        return self._requests[row]

    def _draw_block(self) -> list[InferRequest]:
        """The next block's requests; `zip` of the blocks slices rows in C."""
        blocks = [self._draw(i) for i in self.plan.inputs]
        make = InferRequest._make
        names, datatypes, outputs = self._names, self._datatypes, self._outputs
        return self._encode(
            [
                make((names, datatypes, arrays, outputs, None, None))
                for arrays in zip(*blocks, strict=True)
            ]
        )

    def _draw(self, spec: InputPlan) -> np.ndarray:
        size = (self._block, *spec.shape)
        rng = self._rng
        datatype = spec.datatype
        if datatype in INTEGER_TYPES:
            lo, hi = spec.int_range or DEFAULT_INT_RANGE
            dtype = numpy_dtype(datatype)
            values = rng.integers(lo, hi, size=size, dtype=dtype, endpoint=True)
        elif datatype in FLOAT_TYPES:
            if datatype == "FP16":
                values = rng.standard_normal(size, dtype=np.float32).astype(np.float16)
            else:
                values = rng.standard_normal(size, dtype=numpy_dtype(datatype))
        elif datatype == "BOOL":
            values = rng.integers(0, 2, size=size, dtype=np.uint8).astype(np.bool_)
        elif datatype == "BYTES":
            values = _random_strings(rng, size, self.plan.string_length)
        else:
            raise UsageError(f"input {spec.name}: datatype {datatype} is not supported")
        values.flags.writeable = False
        return values


_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)


def _random_strings(rng: np.random.Generator, size: tuple[int, ...], length: int) -> np.ndarray:
    count = int(np.prod(size))
    letters = _ALPHABET[rng.integers(0, len(_ALPHABET), size=(count, length))]
    flat = np.empty(count, dtype=np.object_)
    raw = letters.tobytes()
    flat[:] = [raw[k * length : (k + 1) * length] for k in range(count)]
    return flat.reshape(size)


def _element_bytes(datatype: str, string_length: int) -> int:
    if datatype == "BYTES":
        return string_length + 4
    return int(numpy_dtype(datatype).itemsize)


class InputDataSource(RequestSource):
    """perf_analyzer input-data steps, round-robin; `batch_size` consecutive steps a request."""

    def __init__(self, plan: RequestPlan, stream: int = 0, encode: BlockEncoder | None = None):
        assert plan.spec is not None
        options = RequestOptions(batch_size=plan.batch_size)
        self._steps = load_input_data(Path(plan.input_data), plan.spec, options)
        self._batched = plan.spec.batched
        self._batch = plan.batch_size
        self._outputs = plan.outputs
        self._k = stream % len(self._steps)  # processes (workers) start at different steps
        self._encode = encode or _as_is
        # Batch 1: every step's request, encoded once and sent round-robin.
        single = [self._request([s]) for s in self._steps] if self._batch == 1 else []
        self._single = self._encode(single) if single else []

    def _request(self, steps: list[dict[str, tuple[str, np.ndarray]]]) -> InferRequest:
        inputs = []
        for name, (datatype, array) in steps[0].items():
            if self._batched:
                array = np.stack([s[name][1] for s in steps])
            inputs.append((name, datatype, array))
        return tensors_request(inputs, self._outputs)

    def next(self) -> InferRequest:
        k = self._k
        n = len(self._steps)
        if self._single:
            self._k = (k + 1) % n
            return self._single[k]
        self._k = (k + self._batch) % n
        request = self._request([self._steps[(k + j) % n] for j in range(self._batch)])
        return self._encode([request])[0]


class BodySource(RequestSource):
    """Request bodies from a JSON Lines file, replayed as is, in order."""

    def __init__(self, plan: RequestPlan, stream: int = 0, encode: BlockEncoder | None = None):
        bodies = load_bodies(Path(plan.input_data))
        self._requests = (encode or _as_is)([InferRequest((), (), (), (), body) for body in bodies])
        self._k = stream % len(self._requests)

    def next(self) -> InferRequest:
        k = self._k
        self._k = (k + 1) % len(self._requests)
        return self._requests[k]


def build_source(
    plan: RequestPlan, seed: int, stream: int = 0, encode: BlockEncoder | None = None
) -> RequestSource:
    """The plan's source; `encode` (a transport's `encode_block`) attaches wire forms ahead."""
    if plan.kind == "synthetic":
        return SyntheticSource(plan, seed, stream, encode)
    if plan.kind == "input_data":
        return InputDataSource(plan, stream, encode)
    if plan.kind == "bodies":
        return BodySource(plan, stream, encode)
    raise UsageError(f"unknown request source kind {plan.kind!r}")


def with_model(plan: RequestPlan, model: str) -> RequestPlan:
    return replace(plan, model=model)
