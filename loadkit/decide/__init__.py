"""Deciding: what to change and how much the server holds, from runs made for it.

The third job beside measuring (`loadkit.load`) and explaining (`loadkit.analysis`):
a configuration sweep (`sweep`) loads each configuration on the server, measures
it, and restores the original. It reads both the orchestrator and the analysis,
which never import each other, so it sits above both; `loadkit.commands` only
parses and prints (docs/architecture.md).
"""
