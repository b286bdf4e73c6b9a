"""The run directory's schema in code (loadkit/rundir/schema.py) against docs/run-format.md."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from loadkit.rundir import RunWriter, load_run, write_manifest
from loadkit.rundir.schema import (
    CLOCK_EVENT_REASONS,
    HOST_COUNTERS,
    MANIFEST_KEYS,
    REASON_COLUMNS,
    TRITON_COUNTERS,
    Environment,
    GpuRow,
    HostRow,
    LoadRow,
    Manifest,
    MetricRow,
    RequestRow,
    TritonStatsRow,
    decode_reasons,
    delta_key,
    row_fields,
    row_problems,
)
from loadkit.telemetry.importers import DCGM_FIELDS, DMON_COLUMNS, QUERY_FIELDS
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


def _documented_fields(text: str) -> set[str]:
    """The field names in the backticked spans of a row's description in the docs."""
    text = re.sub(
        r"reason_\* \(bools: ([\w, ]+)\)",
        lambda m: ", ".join(f"reason_{n}" for n in m.group(1).split(", ")),
        text,
    )
    names: set[str] = set()
    for span in re.findall(r"`([^`]+)`", text):
        if "/" in span:  # a path, not fields
            continue
        span = re.sub(r"\([^)]*\)|:\s*\{[^}]*\}", "", span)  # remarks, nested objects
        tokens = re.findall(r"[\w*<>]+", span)
        names |= {t for t in tokens if re.fullmatch(r"[a-z][a-z0-9_]*", t)}
    return names - {"true", "null"}


def _series_doc(title: str) -> tuple[str, list[str]]:
    """A streaming file's row spec (`{...}` line) and its bullets' leading field names."""
    section = _section(title)
    spec = next(line for line in section.splitlines() if line.startswith("`{"))
    bullets = re.findall(r"^- `(\w+)`", section, re.M)
    return spec, bullets


def _telemetry_cell(file: str) -> str:
    row = next(
        line
        for line in _section("`telemetry/<source>.jsonl`").splitlines()
        if f"| `{file}` |" in line
    )
    return row.split("|")[3]


def test_the_documented_rows_are_the_schemas():
    spec, bullets = _series_doc("`load/<process>.jsonl`")
    assert _documented_fields(spec) | set(bullets) == set(row_fields(LoadRow))
    spec, _ = _series_doc("`requests/<process>.jsonl`")
    assert _documented_fields(spec) == set(row_fields(RequestRow))
    gpu = _documented_fields(_telemetry_cell("gpu.jsonl")) | {"t_ns"}
    assert gpu == set(row_fields(GpuRow))
    # Counters are documented once with "every cumulative counter also has `<name>_delta`".
    host = _documented_fields(_telemetry_cell("host.jsonl"))
    assert set(HOST_COUNTERS) <= host
    assert host | {"t_ns"} | {delta_key(c) for c in HOST_COUNTERS} == set(row_fields(HostRow))
    stats = _documented_fields(_telemetry_cell("triton_stats.jsonl"))
    assert set(TRITON_COUNTERS) <= stats
    deltas = {delta_key(c) for c in TRITON_COUNTERS}
    assert stats | deltas == set(row_fields(TritonStatsRow))
    assert _documented_fields(_telemetry_cell("metrics.jsonl")) == set(row_fields(MetricRow))
    assert set(REASON_COLUMNS) <= set(row_fields(GpuRow))


def test_the_importers_map_onto_gpu_row_fields():
    targets = {
        key for table in (DMON_COLUMNS, QUERY_FIELDS, DCGM_FIELDS) for key, _ in table.values()
    }
    assert targets - set(row_fields(GpuRow)) == set()


SERIES_ROWS = (
    ("load/*.jsonl", LoadRow),
    ("requests/*.jsonl", RequestRow),
    ("telemetry/gpu.jsonl", GpuRow),
    ("telemetry/host.jsonl", HostRow),
    ("telemetry/triton_stats.jsonl", TritonStatsRow),
)


def _assert_schema_rows(path: Path) -> None:
    for pattern, row_type in SERIES_ROWS:
        rows = [json.loads(line) for f in path.glob(pattern) for line in f.read_text().splitlines()]
        assert rows, pattern
        assert {tuple(row_problems(r, row_type)) for r in rows} == {()}, pattern


def test_the_synthetic_builder_writes_schema_rows(tmp_path):
    _assert_schema_rows(write_run(RunSpec(duration_s=3, rate_rps=20), tmp_path, "rows"))


def test_the_benchmarks_long_run_builder_writes_schema_rows(tmp_path):
    from bench.analysis_scale import write_scale_run

    _assert_schema_rows(write_scale_run(tmp_path, 3, rate=40))


def test_write_manifest_holds_the_manifest_to_the_schema(tmp_path):
    writer = RunWriter.create(out_dir=tmp_path, run_id="m", kind="load")
    missing = {k: v for k, v in writer.manifest.items() if k != "status"}
    with pytest.raises(ValueError, match=r"missing \['status'\]"):
        write_manifest(writer.path, missing)
    with pytest.raises(ValueError, match=r"unknown \['statsu'\]"):
        writer.update(statsu="complete")
    on_disk = json.loads((writer.path / "manifest.json").read_text())
    assert on_disk["status"] == "running" and "statsu" not in on_disk
    assert "statsu" not in writer.manifest
    writer.finalize()  # the refused key did not stay behind to refuse every later write


def test_gpu_device_limits_read_under_the_rows_names_in_old_and_new_manifests() -> None:
    from loadkit.rundir.schema import Gpu

    old = Gpu.from_dict(
        {"kind": "nvml", "devices": [{"index": 0, "slowdown_temp_c": 87, "max_sm_clock_mhz": 1980}]}
    )
    new = Gpu.from_dict(
        {"kind": "nvml", "devices": [{"index": 0, "temp_slowdown_c": 87, "sm_clock_max_mhz": 1980}]}
    )
    assert (
        old.devices
        == new.devices
        == ({"index": 0, "temp_slowdown_c": 87, "sm_clock_max_mhz": 1980},)
    )
