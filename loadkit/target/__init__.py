"""The embedded target: a real Triton server serving loadkit's `ranker` model on 127.0.0.1.

Modules: `runtime` (find and prepare the wheel's tritonserver), `config` (render
the model repository), `ports`, `diagnose` (log -> one clear error), `server`
(`EmbeddedTriton`: start, wait ready, stop), `smoke` (one request per protocol).
"""

from loadkit.target.server import EmbeddedTriton

__all__ = ["EmbeddedTriton"]
