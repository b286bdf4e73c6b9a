"""Where each series was sampled, as the analysis hands it on (analysis.json's `run.sources`).

Every telemetry series has a place: `server` (the machine or container the target
runs on), `client` (a machine sending load) or `unknown` (a run that did not know
where its target was, or one recorded before places were). The places come from the
manifest (`loadkit.rundir.schema.Source`, decided at recording time by
`loadkit.placement`); this module turns them into the analysis' model and the one
line the summary and the report print, and answers "is this series the server's?"
for whoever needs to ask (`place_of`, `is_server_side`).

The causes read the telemetry of one side (`sources_at`): a server cause the series
sampled on the server's machine, and those of unknown place (an older run, an imported
file: read as they were before places were); a cause of the load machine itself, the
series sampled on a load machine (`client`). A series whose part was sampled elsewhere
(`host`'s process part) loses that part's fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from loadkit.analysis import sources as telemetry_sources
from loadkit.analysis.model import RunInfo, SeriesPlace, TargetPlace
from loadkit.rundir.schema import (
    LOCAL_SUFFIX,
    PLACE_CLIENT,
    PLACE_SERVER,
    PLACE_UNKNOWN,
    SERIES_PARTS,
    Manifest,
    field_place,
    series_kind,
)

# The two sides a reader can want: the server's machine, or a machine sending load.
SERVER_SIDE = PLACE_SERVER
CLIENT_SIDE = PLACE_CLIENT


def target_place(info: Manifest) -> TargetPlace:
    location = info.environment.target_location
    return TargetPlace(location.local, location.how, location.host, location.address)


def series_places(info: Manifest) -> tuple[SeriesPlace, ...]:
    """Where each telemetry series of the run was sampled, from its manifest's `sources`."""
    loadkit_host = info.environment.host.hostname
    return tuple(
        SeriesPlace(
            name=s.series or "?",
            place=s.place,
            host=s.host,
            loadkit_host=s.host is not None and s.host == loadkit_host,
            parts=dict(s.parts),
            recorded=not s.place_inferred,
            file=s.file,
            warning=s.warning,
        )
        for s in info.sources
    )


def _entry(places: Iterable[SeriesPlace], series: str) -> SeriesPlace | None:
    """A series' entry: the one with a file wins over one that only says why there is none."""
    entries = [p for p in places if p.name == series]
    return next((p for p in entries if p.file is not None), entries[0] if entries else None)


def place_of(places: Iterable[SeriesPlace], series: str, field: str | None = None) -> str:
    """The place of a series (or of one of its fields: `host`'s `cgroup_*` are its process part)."""
    entry = _entry(places, series)
    if entry is None:
        return PLACE_UNKNOWN
    return field_place(series, entry.place, entry.parts, field)


def part_place(places: Iterable[SeriesPlace], series: str, part: str | None = None) -> str:
    """The place of one part of a series (`SERIES_PARTS`: host's `process`); None: the rest of it."""
    entry = _entry(places, series)
    if entry is None:
        return PLACE_UNKNOWN
    return entry.place if part is None else entry.parts.get(part, entry.place)


def on_loadkit_machine(places: Iterable[SeriesPlace], series: str) -> bool:
    """Whether a series was sampled on the machine loadkit ran on (and its generator with it).

    A run that recorded no places ran everything on one machine (as every run did
    before places were).
    """
    entry = _entry(places, series)
    return entry is None or entry.loadkit_host


def side_of(place: str) -> str:
    """Whose machine a series of this place describes, as the causes read it.

    `unknown` reads as the server's: a run that did not know where its target was,
    or one recorded before places were, is analyzed as it always was.
    """
    return CLIENT_SIDE if place == PLACE_CLIENT else SERVER_SIDE


def sampled_at(places: Iterable[SeriesPlace], name: str, side: str) -> bool:
    """Whether a series (`gpu`) or a part of it (`host.process`; `host`: the machine's part)
    was sampled on `side` (unknown counts as the server's: `side_of`), itself or as this
    machine's copy beside the server's (`host-local`)."""
    series, _, part = name.partition(".")
    places = tuple(places)
    if side_of(part_place(places, series, part or None)) == side:
        return True
    local = series + LOCAL_SUFFIX
    return _entry(places, local) is not None and (
        side_of(part_place(places, local, part or None)) == side
    )


def series_at(places: Iterable[SeriesPlace], series: str, side: str) -> str:
    """The name `series` was recorded under on `side`: itself, or this machine's copy
    (`host-local`) where the server's copy holds the name (`sources_at` reads the same)."""
    places = tuple(places)
    local = series + LOCAL_SUFFIX
    if side_of(part_place(places, series)) != side and _entry(places, local) is not None:
        if side_of(part_place(places, local)) == side:
            return local
    return series


def sources_at(
    sources: Mapping[str, Any], places: Iterable[SeriesPlace], side: str
) -> dict[str, Any]:
    """The aligned series of the machine on `side`, each without its parts sampled elsewhere.

    A series with no part on `side` is None, as if it had not been recorded. The
    server's own statistics (a source whose series describe no machine) stay.
    """
    places = tuple(places)
    out: dict[str, Any] = {}
    for name, series in sources.items():
        entry = telemetry_sources.BY_NAME.get(name)
        parts = (None, *SERIES_PARTS.get(name, {}))
        elsewhere = [p for p in parts if side_of(part_place(places, name, p)) != side]
        if series is None or not elsewhere or (entry is not None and not entry.machine):
            out[name] = series
        elif len(elsewhere) == len(parts) or entry is None or entry.without_part is None:
            out[name] = None
        else:
            for part in elsewhere:
                series = entry.without_part(series, part)
            out[name] = series
    # A series recorded twice (the server's scraped copy, and this machine's as
    # `<name>-local`): a side that does not see the server's copy reads its own.
    for name in list(out):
        kind = series_kind(name)
        if name.endswith(LOCAL_SUFFIX) and out[name] is not None and out.get(kind) is None:
            out[kind] = out[name]
    return out


def is_server_side(places: Iterable[SeriesPlace], series: str, field: str | None = None) -> bool:
    """Whether a series (or field) was sampled on the server's machine (not `client`/`unknown`)."""
    return place_of(places, series, field) == PLACE_SERVER


def where(entry: SeriesPlace, *, say_inferred: bool = True) -> str:
    """ "server: gpu-box", "client: loadgen-1, loadkit's machine; process part: server"."""
    text = entry.place
    if entry.host:
        text += f": {entry.host}" + (", loadkit's machine" if entry.loadkit_host else "")
    differing = {part: p for part, p in entry.parts.items() if p != entry.place}
    for part, p in sorted(differing.items()):
        text += f"; {part} part: {p}"
    if say_inferred and not entry.recorded:
        text += "; inferred"
    return text


def target_sentence(location: TargetPlace | None) -> str:
    """ "target: not on loadkit's machine (address of another host 198.18.0.2)"."""
    if location is None or location.how == "not recorded":
        return "target: location not recorded"
    if location.local is None:
        where = "not known whether it ran on loadkit's machine"
    else:
        where = "on loadkit's machine" if location.local else "not on loadkit's machine"
    said = " ".join(v for v in (location.how, location.address) if v)
    return f"target: {where} ({said})"


def telemetry_sentence(run: RunInfo) -> str | None:
    """One line: each series and the machine it comes from; None when the run has none.

    `telemetry: gpu (server: gpu-box), host (client: loadgen-1, loadkit's machine),
    triton_stats (server: gpu-box)`; a source asked for and not recorded says so
    (`gpu: not recorded`).
    """
    if not run.sources:
        return None
    # A run recorded before places were: said once, not after every series.
    legacy = not any(s.recorded for s in run.sources)
    recorded = [
        f"{s.name} ({where(s, say_inferred=not legacy)})" for s in run.sources if s.file is not None
    ]
    missing = [f"{s.name}: not recorded" for s in run.sources if s.file is None]
    head = "telemetry (places inferred: the run did not record them)" if legacy else "telemetry"
    return f"{head}: " + ", ".join(recorded + missing)


def placement_lines(run: RunInfo) -> list[str]:
    """Where the target and each series were: one line when all of it was this machine.

    `target and telemetry: this machine (vm): gpu, host, triton_stats` says once what
    the two lines `target: on loadkit's machine (...)` and `telemetry: gpu (server: vm,
    loadkit's machine), ...` would each repeat; anything else keeps both lines.
    """
    telemetry = telemetry_sentence(run)
    if telemetry is None:
        return []
    location = run.target_location
    recorded = [s for s in run.sources if s.file is not None]
    hosts = {s.host for s in recorded}
    all_here = (
        location is not None
        and location.local is True
        and recorded
        and len(hosts) == 1
        and all(
            s.recorded and s.loadkit_host and s.place == PLACE_SERVER and not s.parts_elsewhere
            for s in recorded
        )
    )
    if not all_here:
        return [target_sentence(location), telemetry]
    missing = "".join(f"; {s.name}: not recorded" for s in run.sources if s.file is None)
    names = ", ".join(s.name for s in recorded)
    return [f"target and telemetry: this machine ({hosts.pop()}): {names}{missing}"]


__all__ = [
    "CLIENT_SIDE",
    "SERVER_SIDE",
    "is_server_side",
    "part_place",
    "place_of",
    "placement_lines",
    "sampled_at",
    "series_places",
    "side_of",
    "sources_at",
    "target_place",
    "target_sentence",
    "telemetry_sentence",
    "where",
]
