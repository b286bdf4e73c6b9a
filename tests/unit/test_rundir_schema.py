"""The run directory's schema in code (loadkit/rundir/schema.py) against docs/run-format.md."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from loadkit.rundir import RunWriter, load_run
from loadkit.rundir.schema import (
    CLOCK_EVENT_REASONS,
    MANIFEST_KEYS,
    Environment,
    Manifest,
    decode_reasons,
)
from loadkit.testing.synthetic import RunSpec, write_run

DOC = Path(__file__).resolve().parents[2] / "docs" / "run-format.md"


def _section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _manifest_doc_keys() -> list[str]:
    """The first column of the manifest table: `a`, `b` or `environment.host` per row."""
    keys = []
    for line in _section("`manifest.json`").splitlines():
        if line.startswith("| `"):
            keys += re.findall(r"`([\w.]+)`", line.split("|")[1])
    return keys


def test_the_documented_manifest_keys_are_the_schemas():
    documented = {k.split(".")[0] for k in _manifest_doc_keys()}
    # A new manifest key is a field of loadkit.rundir.schema.Manifest and a row of the docs' table.
    assert documented - set(MANIFEST_KEYS) == set(), "documented, not in schema.Manifest"
    assert set(MANIFEST_KEYS) - documented == set(), "in schema.Manifest, not documented"
    environment = {k.split(".")[1] for k in _manifest_doc_keys() if k.startswith("environment.")}
    assert environment == {f.name for f in dataclasses.fields(Environment)}


def test_the_documented_reason_bits_are_the_schemas():
    gpu_row = next(
        line
        for line in _section("`telemetry/<source>.jsonl`").splitlines()
        if "`gpu.jsonl`" in line
    )
    documented = re.search(r"reason_\* \(bools: ([\w, ]+)\)", gpu_row)
    assert documented is not None
    assert documented.group(1).split(", ") == list(CLOCK_EVENT_REASONS)
    assert decode_reasons(0x60) == {
        f"reason_{n}": n in ("sw_thermal", "hw_thermal") for n in CLOCK_EVENT_REASONS
    }


def test_writers_and_the_synthetic_builder_write_only_schema_keys(tmp_path):
    writer = RunWriter.create(out_dir=tmp_path / "w", run_id="w", kind="load")
    assert set(writer.manifest) <= set(MANIFEST_KEYS)
    run = load_run(write_run(RunSpec(duration_s=4, rate_rps=50), tmp_path, "schema"))
    assert set(run.manifest) <= set(MANIFEST_KEYS)
    info = run.info
    assert info.target is not None and info.target.model == "ranker"
    assert info.environment.server.models["ranker"]["max_batch_size"] == 8
    assert info.environment.gpu.kind == "simulated" and info.simulated
    assert [s.name for s in info.sources] == ["gpu", "host", "triton_stats"]


def test_a_manifest_with_wrong_types_reads_as_absent():
    m = Manifest.from_dict(
        {"environment": {"server": {"models": {"a": "x"}}, "host": []}, "target": "url"}
    )
    assert m.target is None and m.environment.server.models == {}
    assert m.environment.host.memory_bytes is None and m.kind == "load"
