"""loadkit: load testing and latency forensics for GPU inference services."""

__version__ = "0.1.0"
