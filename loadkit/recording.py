"""One recording: its run directory, its samplers and simulated GPU, its manifest's
environment, sources and notes.

In the spirit of Locust's `Environment`: `run` (the orchestrator), `watch`,
`demo`, standalone Locust and `import` set up and finish a recording through
this one object instead of each wiring a `RunWriter`, a `SamplerSet` and a
simulated GPU by hand.

    recording = Recording.create(kind="watch", scenario=..., target=...)
    with recording:                       # leaving: stop samplers, finalize
        recording.start_samplers(gpu="auto", triton_url=url)
        ...                               # Ctrl-C here: `aborted`, all data kept

Recording side of the layers: it imports the run directory's writer and the
telemetry supervisor (lazily: standalone Locust loads this under gevent and
starts no samplers), never the analysis.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from loadkit.environment import run_environment
from loadkit.rundir.layout import TELEMETRY_DIR
from loadkit.rundir.schema import Source, TargetLocation
from loadkit.rundir.segments import series_files
from loadkit.rundir.writer import RunWriter, read_manifest_raw

if TYPE_CHECKING:
    from loadkit.telemetry.simgpu_runner import SimulatedGpu

SIMULATED_TELEMETRY_NOTE = "GPU telemetry is simulated"


class Samplers(Protocol):
    """What a recording needs of its sampler set (`telemetry.supervisor.SamplerSet`)."""

    def wait_started(self, timeout_s: float = ...) -> bool: ...

    def stop(self) -> None: ...

    def manifest_info(self) -> dict[str, Any]: ...


def imported_environment() -> dict[str, Any]:
    """`manifest.environment` of data recorded elsewhere: no host or GPU of ours to describe."""
    return {"host": {}, "gpu": {"kind": "imported", "devices": []}}


class Recording:
    """Owns one run directory while it is recorded: create, samplers, manifest merges, finish.

    The manifest's `environment`, `sources` and `notes` are written here only;
    series files and events are written by whoever records them (samplers,
    Locust processes, importers) into `path`.
    """

    def __init__(self, writer: RunWriter, target_location: TargetLocation | None = None) -> None:
        self.writer = writer
        # Whether the target runs on this machine: the samplers' places and `--gpu auto`.
        self.target_location = target_location
        self.samplers: Samplers | None = None
        self.simulated_gpu: SimulatedGpu | None = None
        self._describe_simulator = False
        self._note_simulated = False

    # --- creating -------------------------------------------------------
    @classmethod
    def create(
        cls,
        *,
        environment: Mapping[str, Any] | None = None,
        server: dict[str, Any] | None = None,
        target_location: TargetLocation | None = None,
        **run: Any,
    ) -> Recording:
        """A new run directory (`status: running`).

        `run`: `RunWriter.create`'s keywords (out_dir, run_id, kind, scenario,
        target, slo, command_line). `environment` defaults to this host's
        (`environment.run_environment`); `server` is the target's metadata
        (`environment.server`), when it was read; `target_location` whether the
        target runs on this machine (`loadkit.placement.locate_target`):
        `environment.target_location`, and what the samplers started here read.
        """
        environment = dict(environment) if environment is not None else run_environment()
        if server is not None:
            environment["server"] = server
        if target_location is not None:
            environment["target_location"] = target_location.to_manifest()
        return cls(RunWriter.create(environment=environment, **run), target_location)

    @classmethod
    def join(cls, run_dir: str | os.PathLike[str]) -> Recording:
        """An existing run directory, to add sources and notes to (`loadkit import --run`)."""
        path = Path(run_dir)
        return cls(RunWriter(path, read_manifest_raw(path)))

    @property
    def path(self) -> Path:
        return self.writer.path

    @property
    def manifest(self) -> dict[str, Any]:
        return self.writer.manifest

    # --- the manifest ---------------------------------------------------
    def update(self, **changes: Any) -> None:
        """Set top-level manifest keys (held to the schema before anything is written)."""
        self.writer.update(**changes)

    def merge(self, extra: Mapping[str, Any]) -> None:
        """Merge `extra` into the manifest: dicts one level deep, lists extended."""
        changes: dict[str, Any] = {}
        for key, value in extra.items():
            current = self.manifest.get(key)
            if isinstance(current, dict) and isinstance(value, Mapping):
                changes[key] = {**current, **value}
            elif isinstance(current, list) and isinstance(value, list):
                changes[key] = current + value
            else:
                changes[key] = value
        self.update(**changes)

    def set_environment(self, **parts: Any) -> None:
        """Set parts of `environment` (`server=...`, `gpu=...`), keeping the others."""
        self.merge({"environment": parts})

    def add_note(self, note: str) -> None:
        self.writer.add_note(note)

    def add_source(self, source: dict[str, Any]) -> None:
        """One entry of `sources` (an imported file; samplers' come from `record_sources`)."""
        self.writer.add_source(source)

    def event(self, kind: str, name: str, **attrs: Any) -> None:
        self.writer.event(kind, name, **attrs)

    def rename_series(self, old: str, new: str) -> None:
        """Move a finished series aside: `telemetry/<old>*` files (segments included) become
        `<new>*`, and its `sources` entries name the new file."""
        folder = self.path / TELEMETRY_DIR
        for path in series_files(folder).get(old, []):
            path.rename(folder / (new + path.name[len(old) :]))
        sources = []
        for source in self.manifest.get("sources") or []:
            if Source.from_dict(source).series == old:
                source = {**source, "name": new}
                if source.get("file"):
                    source["file"] = f"{TELEMETRY_DIR}/{new}.jsonl"
            sources.append(source)
        self.update(sources=sources)

    # --- telemetry ------------------------------------------------------
    def start_simulated_gpu(
        self,
        state_path: str | os.PathLike[str],
        triton_url: str | None,
        *,
        note: str,
        describe: bool = True,
        **options: Any,
    ) -> SimulatedGpu:
        """Start the simulated GPU (stopped by `finish`, after the samplers that read it).

        `note` says in the manifest what the simulation drives; `describe` puts
        its parameters in `environment.gpu.simulator`. `options` are those of
        `telemetry.simgpu_runner.start_simulated_gpu` (model, cooling fault).
        """
        from loadkit.telemetry.simgpu_runner import start_simulated_gpu

        if self.simulated_gpu is not None:
            raise RuntimeError("this recording already runs a simulated GPU")
        self.simulated_gpu = start_simulated_gpu(
            state_path, triton_url, run_dir=self.path, **options
        )
        self._describe_simulator = describe
        self.add_note(note)
        return self.simulated_gpu

    def start_samplers(
        self, *, wait_s: float | None = None, note_simulated: bool = False, **options: Any
    ) -> Samplers:
        """Start the sampler set (`SamplerSet.start` keywords) and record its sources.

        `wait_s`: wait up to that long for every sampler to open its source
        first, so the sources' warnings are in the manifest from the start.
        `note_simulated`: a simulated GPU adds the note "GPU telemetry is simulated".
        The recording's `target_location`, when it has one, is passed on unless
        `options` hold one.
        """
        from loadkit.telemetry.supervisor import SamplerSet

        if self.target_location is not None:
            options.setdefault("target_location", self.target_location)
        samplers = SamplerSet.start(self.path, **options)
        return self.adopt_samplers(samplers, wait_s=wait_s, note_simulated=note_simulated)

    def adopt_samplers(
        self, samplers: Samplers, *, wait_s: float | None = None, note_simulated: bool = False
    ) -> Samplers:
        """Make an already started sampler set this recording's (stopped by `finish`)."""
        self.samplers = samplers
        self._note_simulated = note_simulated
        try:
            if wait_s is not None:
                samplers.wait_started(wait_s)
            self.record_sources()
        except BaseException:
            self.stop_telemetry()
            raise
        return samplers

    def record_sources(self) -> None:
        """`environment.gpu` and `sources` from the samplers, in one manifest write."""
        if self.samplers is None:
            return
        info = self.samplers.manifest_info()
        if not info:
            return
        changes: dict[str, Any] = {}
        env = dict(self.manifest.get("environment") or {})
        if "gpu" in info:
            env["gpu"] = dict(info["gpu"])
            if self.simulated_gpu is not None and self._describe_simulator:
                env["gpu"]["simulator"] = self.simulated_gpu.describe()
            changes["environment"] = env
        changes["sources"] = info.get("sources", [])
        if self._note_simulated and (info.get("gpu") or {}).get("kind") == "simulated":
            notes = list(self.manifest.get("notes") or [])
            if SIMULATED_TELEMETRY_NOTE not in notes:
                notes.append(SIMULATED_TELEMETRY_NOTE)
            changes["notes"] = notes
        self.update(**changes)

    def stop_telemetry(self) -> None:
        """Stop the samplers (their last sources recorded), then the simulated GPU; idempotent."""
        try:
            if self.samplers is not None:
                self.samplers.stop()
                self.record_sources()
        finally:
            self.samplers = None
            gpu, self.simulated_gpu = self.simulated_gpu, None
            if gpu is not None:
                gpu.stop()

    # --- finishing ------------------------------------------------------
    def finish(self, status: str = "complete") -> None:
        """Stop the telemetry, close the series, mark the run `complete` or `aborted`.

        Safe to call twice. Everything written so far stays: a recording that
        ends on Ctrl-C is a shorter run, not a lost one.
        """
        try:
            self.stop_telemetry()
        finally:
            self.writer.finalize(status)

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.finish("aborted" if exc_type is not None else "complete")
