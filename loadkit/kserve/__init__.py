"""What a KServe v2 / Open Inference Protocol server says about itself and its models.

No Locust, no gevent: `loadkit run`'s pre-flight, `loadkit watch` and the
Locust users all read the same metadata through this package.
"""

from loadkit.kserve.datatypes import DATATYPES, numpy_dtype
from loadkit.kserve.metadata import (
    ModelSpec,
    ServerClient,
    ServerRejected,
    ServerUnreachable,
    TensorSpec,
    describe_server,
)

__all__ = [
    "DATATYPES",
    "ModelSpec",
    "ServerClient",
    "ServerRejected",
    "ServerUnreachable",
    "TensorSpec",
    "describe_server",
    "numpy_dtype",
]
