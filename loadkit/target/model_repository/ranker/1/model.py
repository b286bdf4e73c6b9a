"""`ranker`: a small recommendation ranking model for Triton's Python backend.

It scores candidate items for a user: each item id is hashed into a fixed
embedding table (sparse-id lookup, as real rankers do), combined with a
projection of the user's dense features, and passed through a two-layer MLP.
All weights come from a fixed seed, so scores are deterministic across runs.

Because loadkit's embedded target usually runs where no GPU exists, each batch
also *sleeps* for a simulated accelerator time (`gpu_time_us_per_batch` +
`gpu_time_us_per_item` x batch size): like a real GPU kernel, it takes wall
time without taking the CPU. If `sim_gpu_state` names a JSON file with
`{"clock_factor": f}` (written by loadkit's simulated GPU), that time is divided
by f, so simulated throttling really slows the model down; where the simulated GPU
is shared with other models, its `{"shares": {"<model>": s}}` is the share of the
GPU's time the others leave this model, and that time is divided by s too. If `slowdown_state`
names a JSON file with `{"factor": f}` (written by loadkit's model-slowdown
fault), that time is multiplied by f: the model itself slows, with no GPU,
CPU or cgroup signal.

Inputs (per request; the leading batch dimension is Triton's):
  ITEM_IDS       INT64 [B, N]  candidate item ids (any int64; hashed)
  USER_FEATURES  FP32  [B, F]  dense user features (F = 16)
Output:
  SCORES         FP32  [B, N]  relevance score in (0, 1) per candidate
"""

import json
import os
import sys
import time

try:
    import numpy as np
except ImportError:
    # The stub embeds an isolated interpreter that ignores PYTHONPATH; loadkit's
    # launcher passes its own sys.path here for when the stub is not running
    # loadkit's Python installation (see loadkit/target/runtime.py).
    extra = os.environ.get("LOADKIT_STUB_PYTHONPATH", "").split(os.pathsep)
    sys.path[:0] = [p for p in extra if p and p not in sys.path]
    import numpy as np

import triton_python_backend_utils as pb_utils

TABLE_BITS = 16
TABLE_ROWS = 1 << TABLE_BITS
EMBED_DIM = 16
USER_DIM = 16
HIDDEN = 64
SEED = 20240601
HASH_MULT = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing
STATE_REREAD_S = 0.1


class ClockFactor:
    """Reads a factor from a JSON state file, at most every 100 ms, by mtime.

    The simulated GPU's `{"clock_factor": f}` (0 < f <= 1), a model-slowdown
    fault's `{"factor": f}` (f >= 1), or a nested key (a tuple: `("shares", name)`).
    A missing, partial or nonsense file means "no slowdown" (1.0): the writer may
    rewrite the file at any moment.
    """

    def __init__(self, path, key="clock_factor", low=0.0, high=1.0):
        self.path = path or None
        self.keys = (key,) if isinstance(key, str) else tuple(key)
        self.low, self.high = low, high
        self.factor = 1.0
        self._checked = 0.0
        self._mtime = None

    def get(self):
        if self.path is None:
            return 1.0
        now = time.monotonic()
        if now - self._checked < STATE_REREAD_S:
            return self.factor
        self._checked = now
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError:
            self._mtime, self.factor = None, 1.0
            return self.factor
        if mtime == self._mtime:
            return self.factor
        try:
            with open(self.path, encoding="utf-8") as fh:
                value = json.load(fh)
        except (OSError, ValueError):
            return self.factor  # torn write: keep the last good value, retry soon
        self._mtime = mtime
        try:
            for key in self.keys:
                value = value[key]
            value = float(value)
        except (KeyError, TypeError, ValueError):
            self.factor = 1.0  # not in this state (e.g. a GPU of its own): no slowdown
            return self.factor
        self.factor = value if self.low < value <= self.high else 1.0
        return self.factor


def _param(config, name, default):
    value = config.get("parameters", {}).get(name, {}).get("string_value", "")
    return value if value != "" else default


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.gpu_us_per_batch = float(_param(config, "gpu_time_us_per_batch", "2000"))
        self.gpu_us_per_item = float(_param(config, "gpu_time_us_per_item", "250"))
        self.clock = ClockFactor(_param(config, "sim_gpu_state", ""))
        # The share of the simulated GPU's time other models leave this one (1: its own).
        name = args.get("model_name", "ranker")
        self.share = ClockFactor(_param(config, "sim_gpu_state", ""), ("shares", name))
        # The model itself slowing (GC, data-dependent work): no GPU or host signal.
        self.slowdown = ClockFactor(_param(config, "slowdown_state", ""), "factor", 0.999, 100.0)
        rng = np.random.default_rng(SEED)
        # Scales chosen so scores spread over (0, 1) instead of all sitting near 0.5.
        self.table = rng.standard_normal((TABLE_ROWS, EMBED_DIM), dtype=np.float32) * 0.5
        self.w_user = rng.standard_normal((USER_DIM, EMBED_DIM), dtype=np.float32) / 4.0
        self.w1 = rng.standard_normal((3 * EMBED_DIM, HIDDEN), dtype=np.float32) / 3.0
        self.b1 = np.zeros(HIDDEN, dtype=np.float32)
        self.w2 = rng.standard_normal((HIDDEN, 1), dtype=np.float32) / 4.0
        self.w2 -= self.w2.mean()  # centre the logits: ReLU outputs are all positive

    def _score(self, ids, user):
        """ids [B, N] int64, user [B, F] fp32 -> scores [B, N] fp32."""
        rows = (ids.astype(np.uint64) * HASH_MULT) >> np.uint64(64 - TABLE_BITS)
        item = self.table[rows.astype(np.int64)]  # [B, N, D]
        u = np.tanh(user @ self.w_user)[:, None, :]  # [B, 1, D]
        u = np.broadcast_to(u, item.shape)
        x = np.concatenate([item, u, item * u], axis=-1)  # [B, N, 3D]
        h = np.maximum(x @ self.w1 + self.b1, 0.0)
        logits = (h @ self.w2)[..., 0]
        return (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)

    def execute(self, requests):
        responses = []
        batch_size = 0
        for request in requests:
            try:
                ids = pb_utils.get_input_tensor_by_name(request, "ITEM_IDS").as_numpy()
                user = pb_utils.get_input_tensor_by_name(request, "USER_FEATURES").as_numpy()
                if ids.ndim != 2 or user.ndim != 2 or ids.shape[0] != user.shape[0]:
                    raise ValueError(
                        f"expected ITEM_IDS [B, N] and USER_FEATURES [B, {USER_DIM}], "
                        f"got {list(ids.shape)} and {list(user.shape)}"
                    )
                batch_size += ids.shape[0]
                scores = self._score(ids, user.astype(np.float32, copy=False))
                out = pb_utils.Tensor("SCORES", scores)
                responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
            except Exception as exc:  # one bad request must not fail its batch-mates
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
        # The simulated kernel comes on top of the real numpy work above.
        simulated_us = self.gpu_us_per_batch + self.gpu_us_per_item * batch_size
        if simulated_us > 0:
            stretch = self.slowdown.get() / (self.clock.get() * self.share.get())
            time.sleep(simulated_us / 1e6 * stretch)
        return responses
