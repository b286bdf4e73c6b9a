"""The importer registry: `loadkit import` detects, lists and dispatches formats from it
alone, so an importer added to it (one module, one entry) is read end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadkit.cli import main
from loadkit.commands import import_
from loadkit.telemetry import importers
from loadkit.telemetry.importers import Importer, ImportOptions, ImportResult


def test_every_entry_is_named_once_and_listed_in_the_help() -> None:
    assert len(set(importers.FORMATS)) == len(importers.REGISTRY)
    assert set(importers.FORMATS) == {"dmon", "query-gpu", "dcgm", "prom-range", "locust", "k6"}
    for importer in importers.REGISTRY:
        assert f"  {importer.name:<11} {importer.usage}" in import_.DESCRIPTION


def _parse_words(text: str, options: ImportOptions) -> ImportResult:
    result = ImportResult("words", "words")
    for line in text.splitlines()[1:]:
        t, word = line.split()
        result.rows.append({"t_ns": int(t), "word": word, "imported_from": "words"})
    return result


WORDS = Importer(
    name="words",
    usage="a test format",
    detect=lambda head: head.startswith("#words"),
    parse=_parse_words,
)


def test_a_registered_importer_is_detected_and_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importers, "REGISTRY", (WORDS, *importers.REGISTRY))
    monkeypatch.setattr(importers, "BY_NAME", {**importers.BY_NAME, "words": WORDS})
    monkeypatch.setattr(importers, "FORMATS", (*importers.FORMATS, "words"))
    source = tmp_path / "w.txt"
    source.write_text("#words\n1000000000 hello\n2000000000 world\n")
    assert main(["import", str(source), "--out", str(tmp_path), "--run-id", "w"]) == 0
    run_dir = tmp_path / "w"
    rows = [json.loads(x) for x in (run_dir / "telemetry" / "words.jsonl").read_text().split()]
    assert [r["word"] for r in rows] == ["hello", "world"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (manifest["start_ns"], manifest["end_ns"]) == (10**9, 2 * 10**9)
    assert manifest["sources"][0]["imported_from"]["format"] == "words"
    again = tmp_path / "again.txt"
    again.write_text("1 x\n")  # no header: only --format says what it is
    assert main(["import", str(again), "--format", "words", "--run", str(run_dir)]) == 0
    assert (run_dir / "telemetry" / "words-words.jsonl").exists()
