"""Synthetic run directories with known causes, for tests, reports and the diagnosis benchmark.

`write_run(spec, out_dir)` simulates an open-model load against one Triton
model instance behind a dynamic batcher (batches form when `max_batch_size`
requests wait or the oldest has waited `max_queue_delay`), with injected faults
(bursts, GPU clock drops, CPU saturation, cgroup throttling, connection churn,
process stalls), and writes what loadkit's recorders would have written: HDR
interval logs, load counters, request samples, GPU/host/Triton telemetry, phase
events and ground-truth fault events, through the real writers
(`RunWriter`, `IntervalLogWriter`, `JsonlWriter`). The simulation is a queueing
model, not a measurement, but every number in it follows from the model, so
the signatures the analyzer looks for appear for the reasons they appear in life.

Everything is seeded: the same spec writes the same run.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from loadkit.rundir import IntervalLogWriter, JsonlWriter, RunWriter, new_histogram
from loadkit.rundir.layout import HDR_HIGHEST_US, LATENCY_DIR, LOAD_DIR, REQUESTS_DIR
from loadkit.rundir.schema import (
    REASON_GPU_IDLE,
    REASON_HW_THERMAL,
    REASON_SW_POWER_CAP,
    REASON_SW_THERMAL,
    GpuRow,
    HostRow,
    LoadRow,
    RequestRow,
    TritonStatsRow,
    decode_reasons,
    delta_key,
)
from loadkit.rundir.writer import append_event, write_manifest

NS = 1_000_000_000
DEFAULT_START_NS = 1_764_449_000 * NS


@dataclass(frozen=True)
class Burst:
    """Arrival rate multiplied by `factor` between `start_s` and `end_s` (phase events)."""

    start_s: float
    end_s: float
    factor: float = 2.0


@dataclass(frozen=True)
class ClockDrop:
    """GPU SM clock divided by `factor` (compute time multiplied by it).

    `kind`: "thermal" (hot, thermal reason bits), "power" (power at the limit,
    power-cap bit) or "other" (no reason bit, e.g. a clock lock).
    """

    start_s: float
    end_s: float
    factor: float = 1.8
    kind: str = "thermal"


@dataclass(frozen=True)
class FaultWindow:
    """A fault active between `start_s` and `end_s`; `strength` is fault-specific."""

    start_s: float
    end_s: float
    strength: float = 1.0


@dataclass(frozen=True)
class ErrorWindow:
    """Requests sent between `start_s` and `end_s` fail with `kind` (a failures.py kind).

    `refused`/`reset` fail at once (the target is down), `timeout` after the
    scenario's timeout_s; the others after a normal answer's time.
    """

    start_s: float
    end_s: float
    kind: str = "refused"


@dataclass(frozen=True)
class RunSpec:
    """What to simulate. Times are seconds since the run start."""

    duration_s: float = 90.0
    rate_rps: float = 200.0
    steps: tuple[tuple[float, float], ...] = ()  # (start_s, rate) load steps, phase "step"
    seed: int = 1
    max_batch_size: int = 8
    max_queue_delay_us: int = 2000
    compute_us_per_batch: float = 3000.0
    compute_us_per_item: float = 600.0
    compute_noise: float = 0.08  # lognormal sigma of compute time
    bursts: tuple[Burst, ...] = ()
    clock_drops: tuple[ClockDrop, ...] = ()
    cpu_saturations: tuple[FaultWindow, ...] = ()  # strength: mean extra client delay, ms
    cgroup_quotas: tuple[FaultWindow, ...] = ()  # strength: server slowdown factor - 1
    # The load machine's container capped (loadkit's own cgroup): strength = mean extra
    # client delay, ms, as `cpu_saturations`; the host series' cgroup counters throttle,
    # its cores stay idle, the server is untouched.
    client_quotas: tuple[FaultWindow, ...] = ()
    churns: tuple[FaultWindow, ...] = ()  # strength: probability a request opens a connection
    # A slow path between client and server (a proxy, a congested link): strength = extra ms
    # of a request's round trip, half on the way there and half back; no host signal.
    network_delays: tuple[FaultWindow, ...] = ()
    stalls: tuple[FaultWindow, ...] = ()  # server process stopped (SIGSTOP)
    # The load generator shares the stalled server's host: as the server drains its
    # backlog after a stall, the generator's loop is held for this share of the stall's
    # length, and arrivals due then go out late (load rows record the dispatch lag).
    drain_send_lag: float = 0.0
    # the model itself slows (GC, data-dependent work): compute x strength, no telemetry signal
    model_slowdowns: tuple[FaultWindow, ...] = ()
    # host-device copies grow (large payloads, unpinned memory): strength = extra ms of
    # compute_input + compute_output per request in the batch; compute_infer unchanged
    data_movements: tuple[FaultWindow, ...] = ()
    # Another model on the same server (NEIGHBOUR_MODEL) busy on the shared accelerator:
    # strength = its share of the accelerator's time in the window; this model's compute
    # takes 1 / (1 - share) as long there, and Triton's statistics report both models.
    neighbour_bursts: tuple[FaultWindow, ...] = ()
    # ... and, at flat traffic, holding this share of it at full speed all run: its batches
    # slow with the device (clock drops, quotas) as this model's do, its demand unchanged
    # (a slowdown shared by every model). Its share is in this model's usual compute.
    neighbour_share: float = 0.0
    request_bytes: int = 2048  # each sampled request's recorded size
    payload_bytes: int = 0  # added to the size of a request sent in a data-movement window
    error_rate: float = 0.0
    error_windows: tuple[ErrorWindow, ...] = ()  # requests fail with a kind (an outage, 503s)
    max_queue_size: int | None = None  # the model config's default_queue_policy
    timeout_s: float = 10.0
    sources: tuple[str, ...] = ("gpu", "host", "triton_stats")
    processes: int = 1  # Locust processes (each writes its own latency/load/requests files)
    gpu_interval_s: float = 0.1
    host_interval_s: float = 1.0
    stats_interval_s: float = 1.0
    telemetry_gaps: tuple[tuple[float, float], ...] = ()  # no telemetry rows in these spans
    counter_reset_s: float | None = None  # cumulative counters restart from 0 here
    cores: int = 8
    slo: dict[str, Any] | None = None
    gpu_kind: str = "simulated"
    gpu_mem_drift_bytes_per_s: float = 0.0
    rss_drift_bytes_per_s: float = 0.0
    request_samples_per_s: int = 40
    status: str = "complete"
    record_gaps: bool = True  # load rows carry `completion_gaps`, as the recorder writes them
    # The server threads' run delay (schedstat) in ms per second: recorded when set, and
    # multiplied by `run_delay_rise` in the CPU-saturation windows (a neighbour at the
    # server's own priority gets its fair share: 1.5-2x; one at nice -10: 7-27x).
    run_delay_ms_per_s: float | None = None
    run_delay_rise: float = 1.0
    # Where the target ran (docs/telemetry.md, "Where each series was sampled"). None: the
    # manifest records no places (the legacy rules read every series of the embedded
    # target's run as the server's). True: the target on this machine; False: on another
    # (TARGET_HOST), this machine being the load machine (LOAD_HOST). The series are placed
    # as a recording places them: gpu and host on this machine, host's process part the
    # server's only with `server_pid`, triton_stats the server's.
    target_local: bool | None = None
    server_pid: bool = False


def periodic_clock_drops(
    period_s: float,
    length_s: float,
    *,
    first_s: float,
    until_s: float,
    factor: float = 1.8,
    kind: str = "thermal",
    jitter_s: float = 0.0,
    seed: int = 0,
) -> tuple[ClockDrop, ...]:
    """Clock drops every `period_s` (± uniform jitter) lasting `length_s`."""
    rng = np.random.default_rng(seed)
    drops = []
    t = first_s
    while t + length_s <= until_s:
        start = t + (rng.uniform(-jitter_s, jitter_s) if jitter_s else 0.0)
        drops.append(ClockDrop(start, start + length_s, factor, kind))
        t += period_s
    return tuple(drops)


def demo_spec(seed: int = 1) -> RunSpec:
    """The demo's story: 2x burst at 40-60 s, thermal throttling every ~15 s for ~4 s (1.8x)."""
    return RunSpec(
        duration_s=90.0,
        rate_rps=300.0,
        seed=seed,
        max_batch_size=8,
        max_queue_delay_us=2000,
        compute_us_per_batch=3000.0,
        compute_us_per_item=500.0,
        bursts=(Burst(40.0, 60.0, 2.0),),
        clock_drops=periodic_clock_drops(
            15.0, 4.0, first_s=8.0, until_s=90.0, factor=1.8, jitter_s=0.5, seed=seed
        ),
    )


# --- simulation ------------------------------------------------------------------


def _in_any(t: float, windows: tuple[Any, ...]) -> Any:
    for w in windows:
        if w.start_s <= t < w.end_s:
            return w
    return None


def _rate_at(spec: RunSpec, t: float) -> float:
    rate = spec.rate_rps
    for start, step_rate in spec.steps:
        if t >= start:
            rate = step_rate
    burst = _in_any(t, spec.bursts)
    return rate * (burst.factor if burst else 1.0)


@dataclass
class Simulated:
    """Per-request and per-batch outcome of the simulation (seconds since start)."""

    intended: np.ndarray
    sent: np.ndarray
    done: np.ndarray
    ok: np.ndarray
    connection_new: np.ndarray
    queue_s: np.ndarray
    batch_start: np.ndarray
    batch_end: np.ndarray
    batch_size: np.ndarray
    process: np.ndarray
    batch_compute_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    batch_io_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # input + output copies
    error_kind: np.ndarray | None = None  # per failed request (None: all "http_503")


def _arrivals(spec: RunSpec, rng: np.random.Generator) -> np.ndarray:
    dt = 0.01
    times: list[np.ndarray] = []
    for k in range(int(round(spec.duration_s / dt))):
        t0 = k * dt
        n = rng.poisson(_rate_at(spec, t0 + dt / 2) * dt)
        if n:
            times.append(t0 + rng.uniform(0, dt, n))
    return np.sort(np.concatenate(times)) if times else np.zeros(0)


def _stall_end(t: float, spec: RunSpec) -> float:
    stall = _in_any(t, spec.stalls)
    return stall.end_s if stall else t


def _client_delays(spec: RunSpec, intended: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Extra client time per request: a saturated or capped load machine sends and reads late."""
    client_extra = np.zeros(len(intended))
    for i, t in enumerate(intended):
        sat = _in_any(t, spec.cpu_saturations) or _in_any(t, spec.client_quotas)
        if sat:
            client_extra[i] = rng.exponential(sat.strength / 1000.0)
    return client_extra


def _new_connections(
    spec: RunSpec, intended: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Which requests open a connection (rarely, often under churn) and the handshake they pay."""
    n = len(intended)
    conn_new = np.zeros(n, dtype=bool)
    handshake = np.zeros(n)
    for i, t in enumerate(intended):
        churn = _in_any(t, spec.churns)
        p = churn.strength if churn else 0.002
        if rng.random() < p:
            conn_new[i] = True
            handshake[i] = rng.uniform(0.004, 0.012)  # TCP + HTTP/2 setup, first request slow
    return conn_new, handshake


def _path_delays(spec: RunSpec, intended: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each request's extra round trip on a slow network path (none outside its windows)."""
    path = np.zeros(len(intended))
    for i, t in enumerate(intended):
        slow_path = _in_any(t, spec.network_delays)
        if slow_path:
            path[i] = slow_path.strength / 1000.0 * float(rng.uniform(0.8, 1.2))
    return path


def _batch_time(
    spec: RunSpec,
    t_start: float,
    size: int,
    rng: np.random.Generator,
    io_rng: np.random.Generator,
) -> tuple[float, float]:
    """(copies' time, end) of a batch: its compute under the faults active when it starts."""
    compute = (spec.compute_us_per_batch + spec.compute_us_per_item * size) / 1e6
    compute *= float(rng.lognormal(0.0, spec.compute_noise))
    drop = _in_any(t_start, spec.clock_drops)
    if drop:
        compute *= drop.factor
    slow = _in_any(t_start, spec.model_slowdowns)
    if slow:
        compute *= slow.strength
    neighbour = _in_any(t_start, spec.neighbour_bursts)
    if neighbour:
        compute /= 1.0 - neighbour.strength
    quota = _in_any(t_start, spec.cgroup_quotas)
    if quota:
        compute *= 1.0 + quota.strength * float(rng.uniform(0.5, 1.5))
    # compute_input + compute_output, recorded in every run as Triton always reports them:
    # a small copy per request, part of the batch's usual time (so a run without data
    # movement keeps its timing), and in a movement window the extra copies on top. Their
    # noise has its own generator: the compute and arrival draws stay the same.
    io = min(size * 0.00005 * float(io_rng.lognormal(0.0, spec.compute_noise)), compute / 2)
    compute -= io
    moving = _in_any(t_start, spec.data_movements)
    if moving:
        io += size * moving.strength / 1000.0 * float(io_rng.lognormal(0.0, spec.compute_noise))
    end = t_start + compute + io
    for stall in spec.stalls:  # stopped mid-batch: the batch finishes after SIGCONT
        if t_start < stall.start_s < end:
            end += stall.end_s - stall.start_s
    return io, end


@dataclass
class _Served:
    """The server's side: when each request's batch ended, how long it queued, and the batches."""

    server_done: np.ndarray
    queue_s: np.ndarray
    batch_start: list[float] = field(default_factory=list)
    batch_end: list[float] = field(default_factory=list)
    batch_size: list[int] = field(default_factory=list)
    batch_compute: list[float] = field(default_factory=list)
    batch_io: list[float] = field(default_factory=list)


def _serve(
    spec: RunSpec, at_server: np.ndarray, rng: np.random.Generator, io_rng: np.random.Generator
) -> _Served:
    """The dynamic batcher: a batch starts when `max_batch_size` wait or the oldest waited long."""
    n = len(at_server)
    order = np.argsort(at_server, kind="stable")
    arr = at_server[order].tolist()
    delay = spec.max_queue_delay_us / 1e6
    bmax = spec.max_batch_size
    served = _Served(server_done=np.zeros(n), queue_s=np.zeros(n))
    queue: deque[int] = deque()
    t = 0.0
    i = 0
    while i < n or queue:
        if not queue:
            t = max(t, arr[i])
        while i < n and arr[i] <= t:
            queue.append(i)
            i += 1
        if len(queue) < bmax:
            k = bmax - len(queue)
            t_full = arr[i + k - 1] if i + k - 1 < n else math.inf
            t_start = max(t, min(t_full, arr[queue[0]] + delay))
        else:
            t_start = t
        t_start = _stall_end(t_start, spec)
        while i < n and arr[i] <= t_start:
            queue.append(i)
            i += 1
        size = min(bmax, len(queue))
        batch = [queue.popleft() for _ in range(size)]
        io, end = _batch_time(spec, t_start, size, rng, io_rng)
        for j in batch:
            served.queue_s[order[j]] = t_start - arr[j]
            served.server_done[order[j]] = end
        served.batch_start.append(t_start)
        served.batch_end.append(end)
        served.batch_size.append(size)
        served.batch_compute.append(end - t_start - io)
        served.batch_io.append(io)
        t = end
    return served


def _failures(
    spec: RunSpec,
    intended: np.ndarray,
    sent: np.ndarray,
    done: np.ndarray,
    ok: np.ndarray,
) -> np.ndarray:
    """Fail the requests of the error windows and those past the client's timeout, in place.

    Returns each request's error kind (meaningful where `ok` is False); `done` moves
    to when the client saw the failure.
    """
    kinds = np.full(len(intended), "http_503", dtype=object)
    for i, t in enumerate(intended):
        window = _in_any(t, spec.error_windows)
        if window is None:
            continue
        ok[i] = False
        kinds[i] = window.kind
        if window.kind in ("refused", "reset"):
            done[i] = sent[i] + 0.0005
        elif window.kind == "timeout":
            done[i] = sent[i] + spec.timeout_s
    # The client gives up at its timeout: a request not answered by then (caught in a stall
    # longer than the timeout, or a backlog) fails as a timeout at sent + timeout_s.
    late = ok & (done - sent > spec.timeout_s)
    ok[late] = False
    kinds[late] = "timeout"
    done[late] = sent[late] + spec.timeout_s
    return kinds


def simulate(spec: RunSpec) -> Simulated:
    """Run the queueing model: open-model arrivals, one dynamically batched model instance."""
    rng = np.random.default_rng(spec.seed)
    io_rng = np.random.default_rng(spec.seed + 2000)  # the copies' noise (compute_input/output)
    intended = _arrivals(spec, rng)
    n = len(intended)
    # Client side: CPU saturation delays the send and the handling of the response.
    client_extra = _client_delays(spec, intended, rng)
    conn_new, handshake = _new_connections(spec, intended, rng)
    sent = intended + client_extra * 0.5
    for stall in spec.stalls if spec.drain_send_lag else ():
        held_until = stall.end_s + spec.drain_send_lag * (stall.end_s - stall.start_s)
        held = (intended >= stall.end_s) & (intended < held_until)
        sent[held] = np.maximum(sent[held], held_until)
    path = _path_delays(spec, intended, rng)
    at_server = sent + 0.0002 + handshake + path / 2
    served = _serve(spec, at_server, rng, io_rng)
    done = served.server_done + 0.0003 + client_extra * 0.5 + path / 2 + rng.exponential(0.0002, n)
    ok = rng.random(n) >= spec.error_rate
    kinds = _failures(spec, intended, sent, done, ok)
    process = rng.integers(0, spec.processes, n) if spec.processes > 1 else np.zeros(n, int)
    return Simulated(
        intended=intended,
        sent=sent,
        done=done,
        ok=ok,
        connection_new=conn_new,
        queue_s=served.queue_s,
        batch_start=np.array(served.batch_start),
        batch_end=np.array(served.batch_end),
        batch_size=np.array(served.batch_size, dtype=int),
        process=process,
        batch_compute_s=np.array(served.batch_compute),
        batch_io_s=np.array(served.batch_io),
        error_kind=kinds,
    )


# --- writing ----------------------------------------------------------------------------


def _ns(spec_start_ns: int, t: float) -> int:
    return spec_start_ns + int(round(t * NS))


def _in_gap(t: float, spec: RunSpec) -> bool:
    return any(a <= t < b for a, b in spec.telemetry_gaps)


def _model_config(spec: RunSpec) -> dict[str, Any]:
    # As Triton's /v2/models/<m>/config returns it (64-bit ints are JSON strings).
    batching: dict[str, Any] = {"max_queue_delay_microseconds": str(spec.max_queue_delay_us)}
    if spec.max_queue_size is not None:
        batching["default_queue_policy"] = {"max_queue_size": str(spec.max_queue_size)}
    return {
        "name": "ranker",
        "backend": "python",
        "max_batch_size": spec.max_batch_size,
        "dynamic_batching": batching,
    }


def completion_gaps(
    sent: np.ndarray, done: np.ndarray, min_s: float = 0.05
) -> list[tuple[float, float]]:
    """Spans (s) with requests in flight and none completing, as `LatencyRecorder` finds them."""
    events = sorted([(float(t), 1) for t in sent] + [(float(t), -1) for t in done])
    out: list[tuple[float, float]] = []
    in_flight = 0
    since: float | None = None
    for t, step in events:
        if step > 0:
            if in_flight == 0:
                since = t
            in_flight += 1
            continue
        in_flight = max(0, in_flight - 1)
        if since is not None and t - since >= min_s:
            out.append((since, t))
        since = t if in_flight > 0 else None
    return out


def _write_latency_and_load(
    run_dir: Path, spec: RunSpec, sim: Simulated, start_ns: int, rng: np.random.Generator
) -> None:
    # The recorder's intervals are whole wall-clock seconds, whatever the run's start:
    # interval s holds what happened `into` seconds before the run's start + s.
    into = (start_ns % NS) / NS
    seconds = int(math.ceil(spec.duration_s + into))
    last_second = seconds + 10  # completions after the end (a drained backlog)
    for p in range(spec.processes):
        name = "local" if spec.processes == 1 else f"worker-{p + 1}"
        mine = sim.process == p
        hlog = IntervalLogWriter(run_dir / LATENCY_DIR / f"{name}.hlog", start_ns - start_ns % NS)
        load = JsonlWriter(run_dir / LOAD_DIR / f"{name}.jsonl")
        samples = JsonlWriter(run_dir / REQUESTS_DIR / f"{name}.jsonl")
        done_sec = np.floor(sim.done + into).astype(int)
        int_sec = np.floor(sim.intended + into).astype(int)
        gaps_by_sec: dict[int, list[list[int]]] = {}
        for a, b in completion_gaps(sim.sent[mine], sim.done[mine]):
            gaps_by_sec.setdefault(int(math.floor(b + into)), []).append(
                [_ns(start_ns, a), _ns(start_ns, b)]
            )
        for s in range(last_second):
            lo = start_ns - start_ns % NS + s * NS
            hi = lo + NS
            completing = np.nonzero(mine & (done_sec == s))[0]
            oks = completing[sim.ok[completing]]
            corrected = new_histogram()
            service = new_histogram()
            out_of_range = 0
            for j in oks:
                c_us = int((sim.done[j] - sim.intended[j]) * 1e6)
                s_us = int((sim.done[j] - sim.sent[j]) * 1e6)
                if not 1 <= c_us <= HDR_HIGHEST_US:
                    out_of_range += 1
                    continue
                corrected.record_value(c_us)
                service.record_value(max(1, s_us))
            if len(oks):
                hlog.write("corrected:infer", lo, hi, corrected)
                hlog.write("service:infer", lo, hi, service)
            offered = int(np.count_nonzero(mine & (int_sec == s)))
            if s < seconds or offered or len(completing):
                end = s + 1 - into
                in_flight = int(np.count_nonzero(mine & (sim.sent < end) & (sim.done >= end)))
                errors = int(len(completing) - len(oks))
                failed = completing[~sim.ok[completing]]
                error_kinds: dict[str, int] = {}
                for j in failed:
                    kind = str(sim.error_kind[j]) if sim.error_kind is not None else "http_503"
                    error_kinds[kind] = error_kinds.get(kind, 0) + 1
                load_row: LoadRow = {
                    "t_ns": lo,
                    "interval_ns": NS,
                    "process": name,
                    "name": "infer",
                    "offered": offered,
                    "started": offered,
                    "ok": int(len(oks)),
                    "errors": errors,
                    "dropped": 0,
                    "in_flight": in_flight,
                    "out_of_range": out_of_range,
                    "error_kinds": error_kinds,
                }
                if spec.record_gaps:
                    load_row["completion_gaps"] = gaps_by_sec.get(s, [])
                if spec.drain_send_lag:
                    due = mine & (int_sec == s)
                    late = sim.sent[due] - sim.intended[due]
                    load_row["dispatch_lag_max_ms"] = float(late.max()) * 1000 if late.size else 0.0
                load.write(load_row)
            picked = completing
            if len(picked) > spec.request_samples_per_s:
                picked = rng.choice(picked, spec.request_samples_per_s, replace=False)
            for j in sorted(picked):
                sample: RequestRow = {
                    "t_ns": _ns(start_ns, sim.intended[j]),
                    "sent_ns": _ns(start_ns, sim.sent[j]),
                    "done_ns": _ns(start_ns, sim.done[j]),
                    "name": "infer",
                    "ok": bool(sim.ok[j]),
                    "error_kind": None
                    if sim.ok[j]
                    else (str(sim.error_kind[j]) if sim.error_kind is not None else "http_503"),
                    "connection_new": bool(sim.connection_new[j]),
                    "request_bytes": spec.request_bytes
                    + (spec.payload_bytes if _in_any(sim.intended[j], spec.data_movements) else 0),
                }
                samples.write(sample)
        hlog.close()
        load.close()
        samples.close()


def _busy_fraction(sim: Simulated, t0: float, t1: float) -> float:
    overlap = np.clip(np.minimum(sim.batch_end, t1) - np.maximum(sim.batch_start, t0), 0, None)
    return float(min(1.0, overlap.sum() / (t1 - t0)))


def _write_gpu(
    writer: RunWriter, spec: RunSpec, sim: Simulated, start_ns: int, rng: np.random.Generator
) -> None:
    out = writer.series("gpu")
    max_clock = 1980.0
    power_limit = 350.0
    mem_total = 80 * 2**30
    temp = 62.0
    n = int(spec.duration_s / spec.gpu_interval_s)
    energy = 0.0
    for k in range(n):
        t0 = k * spec.gpu_interval_s
        t1 = t0 + spec.gpu_interval_s
        busy = _busy_fraction(sim, t0, t1)
        drop = _in_any(t0, spec.clock_drops)
        stalled = _in_any(t0, spec.stalls) is not None
        clock = max_clock / drop.factor if drop else max_clock
        reasons = 0
        power = 90.0 + 220.0 * busy * (clock / max_clock) + rng.normal(0, 4)
        # Temperature relaxes towards a load-dependent target; a thermal drop runs hot.
        target = 60.0 + 22.0 * busy
        upcoming = [d for d in spec.clock_drops if d.kind == "thermal" and 0 <= d.start_s - t0 < 3]
        if upcoming:
            target = 90.0
        if drop and drop.kind == "thermal":
            target = 91.0
            reasons |= REASON_SW_THERMAL | REASON_HW_THERMAL
        elif drop and drop.kind == "power":
            power = power_limit + rng.normal(0, 1.5)
            reasons |= REASON_SW_POWER_CAP
        temp += (target - temp) * 0.15 + rng.normal(0, 0.2)
        if busy < 0.01 or stalled:
            reasons |= REASON_GPU_IDLE
            clock = 345.0  # idle clocks are not throttling
            power = 60.0 + rng.normal(0, 2)
        energy += power * spec.gpu_interval_s * 1000
        if _in_gap(t0, spec):
            continue
        gpu_row: GpuRow = {
            "t_ns": _ns(start_ns, t0),
            "gpu": 0,
            "util_gpu_pct": round(100 * busy, 1),
            "util_mem_pct": round(40 * busy, 1),
            "mem_used_bytes": int(20 * 2**30 + spec.gpu_mem_drift_bytes_per_s * t0),
            "mem_total_bytes": mem_total,
            "sm_clock_mhz": round(clock),
            "sm_clock_max_mhz": max_clock,
            "mem_clock_mhz": 2619,
            "mem_clock_max_mhz": 2619,
            "temp_c": round(temp, 1),
            "temp_slowdown_c": 90,
            "temp_shutdown_c": 95,
            "power_w": round(power, 1),
            "power_limit_w": power_limit,
            "energy_mj": int(energy),
            "clocks_event_reasons": reasons,
            **decode_reasons(reasons),
            "pcie_tx_kbps": None,
            "pcie_rx_kbps": None,
            "proc_mem_bytes": None,
        }
        out.write(gpu_row)
    out.close()


def _write_host(
    writer: RunWriter, spec: RunSpec, sim: Simulated, start_ns: int, rng: np.random.Generator
) -> None:
    out = writer.series("host")
    periods = throttled = 0
    throttled_ns = 0
    psi = 0.5
    run_delay_ns = 0
    n = int(spec.duration_s / spec.host_interval_s)
    reset_done = False
    for k in range(n):
        t0 = k * spec.host_interval_s
        sat = _in_any(t0, spec.cpu_saturations)
        quota = _in_any(t0, spec.cgroup_quotas) or _in_any(t0, spec.client_quotas)
        if sat:
            cores = rng.uniform(96.0, 100.0, spec.cores)
        else:
            cores = np.clip(rng.normal(30.0, 8.0, spec.cores), 0, 100)
        if quota:  # the container is capped; the host has idle cores
            cores = np.clip(rng.normal(25.0, 6.0, spec.cores), 0, 100)
        psi += ((45.0 if sat else 0.5) - psi) * 0.3
        if spec.counter_reset_s is not None and t0 >= spec.counter_reset_s and not reset_done:
            periods = throttled = throttled_ns = 0  # cgroup recreated: counters restart
            reset_done = True
        n_periods = int(round(spec.host_interval_s / 0.1))
        periods += n_periods
        if spec.run_delay_ms_per_s is not None:
            rate = spec.run_delay_ms_per_s * (spec.run_delay_rise if sat else 1.0)
            run_delay_ns += int(rate * float(rng.uniform(0.85, 1.15)) * 1e6 * spec.host_interval_s)
        if quota:
            got = int(n_periods * min(1.0, 0.5 + 0.4 * quota.strength))
            throttled += got
            throttled_ns += int(got * 0.04 * NS)
        # Like the host sampler: opens since the previous sample, reported at this one.
        in_interval = (sim.intended >= t0 - spec.host_interval_s) & (sim.intended < t0)
        new_conns = int(np.count_nonzero(sim.connection_new & in_interval))
        if _in_gap(t0, spec):
            continue
        host_row: HostRow = {
            "t_ns": _ns(start_ns, t0),
            "cpu_pct": round(float(cores.mean()), 1),
            "cpu_per_core_pct": [round(float(c), 1) for c in cores],
            "load1": round(float(cores.sum() / 100), 2),
            "psi_cpu_some_avg10": round(psi, 2),
            "server_cpu_pct": round(float(cores.mean() * 1.5), 1),
            "server_ctx_vol": None,
            "server_ctx_invol": None,
            "server_rss_bytes": int(3 * 2**30 + spec.rss_drift_bytes_per_s * t0),
            "cgroup_nr_periods": periods,
            "cgroup_nr_throttled": throttled,
            "cgroup_throttled_ns": throttled_ns,
            "tcp_new_connections": new_conns,
            "mem_used_bytes": 40 * 2**30,
        }
        if spec.run_delay_ms_per_s is not None:
            host_row["server_run_delay_ns"] = run_delay_ns
        out.write(host_row)
    out.close()


def _write_triton_stats(writer: RunWriter, spec: RunSpec, sim: Simulated, start_ns: int) -> None:
    out = writer.series("triton_stats")
    cum = dict.fromkeys(
        (
            "success_count",
            "success_ns",
            "execution_count",
            "inference_count",
            "queue_ns",
            "compute_infer_ns",
            "compute_input_ns",
            "compute_output_ns",
        ),
        0,
    )
    n = int(spec.duration_s / spec.stats_interval_s)
    neighbour_cum: dict[str, int] = {}
    reset_done = False
    # Per-request queue time attributed to the batch start of its request.
    for k in range(n):
        t0 = k * spec.stats_interval_s
        t1 = t0 + spec.stats_interval_s
        if spec.counter_reset_s is not None and t0 >= spec.counter_reset_s and not reset_done:
            cum = dict.fromkeys(cum, 0)  # server restarted
            reset_done = True
        in_b = (sim.batch_end >= t0) & (sim.batch_end < t1)
        sizes = sim.batch_size[in_b]
        done_here = (sim.done >= t0) & (sim.done < t1)
        delta = {
            "success_count": int(sizes.sum()),
            "execution_count": int(len(sizes)),
            "inference_count": int(sizes.sum()),
            "queue_ns": int(sim.queue_s[done_here].sum() * NS),
            "compute_infer_ns": int((sim.batch_compute_s[in_b] * sizes).sum() * NS),
        }
        # Input and output copies, half each, charged to every request of the batch.
        io_ns = int((sim.batch_io_s[in_b] * sizes).sum() * NS) if sim.batch_io_s.size else 0
        delta["compute_input_ns"] = io_ns // 2
        delta["compute_output_ns"] = io_ns - io_ns // 2
        # Triton's request time: queue + compute (input + infer + output)
        delta["success_ns"] = delta["queue_ns"] + delta["compute_infer_ns"] + io_ns
        for key, value in delta.items():
            cum[key] += value
        if _in_gap(t0, spec):
            continue
        uniq, counts = np.unique(sizes, return_counts=True)
        # The counters' columns are computed (schema.TRITON_COUNTERS and their deltas).
        cells: dict[str, Any] = {"t_ns": _ns(start_ns, t0), "model": "ranker", "version": "1"}
        cells.update(cum)
        cells.update({delta_key(key): value for key, value in delta.items()})
        row = cast(TritonStatsRow, cells)
        row["interval_ns"] = int(spec.stats_interval_s * NS)
        row["batch_sizes"] = {str(int(s)): int(c) for s, c in zip(uniq, counts, strict=True)}
        out.write(row)
        if spec.neighbour_bursts or spec.neighbour_share:
            out.write(_neighbour_row(spec, neighbour_cum, start_ns, t0))
    out.close()


# The other model of `RunSpec.neighbour_bursts`: requests of this many rows, one batch each,
# taking NEIGHBOUR_BATCH_S of the accelerator at full speed.
NEIGHBOUR_MODEL = "doc_ranker"
NEIGHBOUR_ROWS = 8
NEIGHBOUR_BATCH_S = 0.008


def _neighbour_row(spec: RunSpec, cum: dict[str, int], start_ns: int, t0: float) -> Any:
    """The neighbour's statistics row for [t0, t0 + interval): busy `strength` of it in its
    bursts, and `neighbour_share` of it at flat traffic, slowed as the device is."""
    t1 = t0 + spec.stats_interval_s
    burst_s = sum(
        max(0.0, min(t1, w.end_s) - max(t0, w.start_s)) * w.strength for w in spec.neighbour_bursts
    )
    flat_s = spec.neighbour_share * spec.stats_interval_s
    execs = int(round((burst_s + flat_s) / NEIGHBOUR_BATCH_S))
    busy_s = burst_s + flat_s * _device_slowdown(spec, t0, t1)
    infer_ns = int(busy_s * NS)
    delta = {
        "success_count": execs * NEIGHBOUR_ROWS,
        "execution_count": execs,
        "inference_count": execs * NEIGHBOUR_ROWS,
        "queue_ns": 0,
        "compute_infer_ns": infer_ns * NEIGHBOUR_ROWS,  # charged to every request of a batch
        "compute_input_ns": 0,
        "compute_output_ns": 0,
        "success_ns": infer_ns * NEIGHBOUR_ROWS,
        "batch_compute_infer_ns": infer_ns,
    }
    for key, value in delta.items():
        cum[key] = cum.get(key, 0) + value
    cells: dict[str, Any] = {"t_ns": _ns(start_ns, t0), "model": NEIGHBOUR_MODEL, "version": "1"}
    cells.update(cum)
    cells.update({delta_key(key): value for key, value in delta.items()})
    cells["interval_ns"] = int(spec.stats_interval_s * NS)
    cells["batch_sizes"] = {str(NEIGHBOUR_ROWS): execs} if execs else {}
    return cells


def _device_slowdown(spec: RunSpec, t0: float, t1: float) -> float:
    """How much longer a batch takes over [t0, t1) on average: the clock drops' and the
    quotas' mean factors, as `_batch_time` applies them to this model's batches."""
    factors = []
    for t in np.linspace(t0, t1, 10, endpoint=False):
        drop = _in_any(t, spec.clock_drops)
        quota = _in_any(t, spec.cgroup_quotas)
        factors.append((drop.factor if drop else 1.0) * (1.0 + (quota.strength if quota else 0.0)))
    return float(np.mean(factors))


# The machines of a run with places (`RunSpec.target_local`): the target's, when it is not
# this one, and this one (the load machine) then.
TARGET_HOST = "198.18.0.2"
LOAD_HOST = "loadgen-1"


def _hostname(spec: RunSpec) -> str:
    return LOAD_HOST if spec.target_local is False else "synthetic"


def _target_location(spec: RunSpec) -> dict[str, Any]:
    """The manifest's `environment.target_location` ({} without places: not recorded)."""
    if spec.target_local is None:
        return {}
    if spec.target_local:
        how = "--server-pid" if spec.server_pid else "loopback address"
        where = {"local": True, "how": how, "host": _hostname(spec), "address": "127.0.0.1"}
    else:
        where = {
            "local": False,
            "how": "address of another host",
            "host": TARGET_HOST,
            "address": TARGET_HOST,
        }
    return {"target_location": where}


def _place(spec: RunSpec, source: str) -> dict[str, Any]:
    """A source's `place`, `host` and `parts` as a recording writes them ({}: none recorded)."""
    if spec.target_local is None:
        return {}
    here = "server" if spec.target_local else "client"
    if source == "triton_stats":
        host = _hostname(spec) if spec.target_local else TARGET_HOST
        return {"place": "server", "host": host, "parts": {}}
    parts = {"process": "server" if spec.server_pid else "client"} if source == "host" else {}
    return {"place": here, "host": _hostname(spec), "parts": parts}


def write_run(
    spec: RunSpec,
    out_dir: str | Path,
    run_id: str = "synthetic",
    start_ns: int = DEFAULT_START_NS,
) -> Path:
    """Simulate `spec` and write a complete run directory; returns its path."""
    sim = simulate(spec)
    rng = np.random.default_rng(spec.seed + 1000)
    writer = RunWriter.create(
        out_dir=out_dir,
        run_id=run_id,
        kind="load",
        scenario={
            "name": "synthetic",
            "path": None,
            "params": {"rate_rps": spec.rate_rps, "timeout_s": spec.timeout_s},
        },
        target={
            "url": f"http://{TARGET_HOST if spec.target_local is False else '127.0.0.1'}:8000",
            "protocol": "http",
            "model": "ranker",
            "embedded": spec.target_local is None,
        },
        slo=spec.slo,
        environment={
            "host": {"hostname": _hostname(spec), "cores_logical": spec.cores},
            "gpu": {
                "kind": spec.gpu_kind,
                "devices": [{"index": 0, "name": "Simulated GPU", "sm_clock_max_mhz": 1980}],
            },
            "server": {
                "name": "triton",
                "version": "2.51.0",
                "extensions": [],
                "models": {"ranker": _model_config(spec)},
            },
            **_target_location(spec),
        },
        command_line=["synthetic"],
    )
    path = writer.path
    # RunWriter stamps "now"; a synthetic run lives at `start_ns` instead.
    (path / "events.jsonl").unlink()
    writer.manifest["start_ns"] = start_ns
    write_manifest(path, writer.manifest)
    append_event(path, "phase", "run-start", t_ns=start_ns)
    for start, rate in spec.steps:
        append_event(path, "phase", "step", t_ns=_ns(start_ns, start), rate=rate)
    for burst in spec.bursts:
        rate = spec.rate_rps * burst.factor
        append_event(path, "phase", "burst-start", t_ns=_ns(start_ns, burst.start_s), rate=rate)
        append_event(path, "phase", "burst-end", t_ns=_ns(start_ns, burst.end_s))
    faults: list[tuple[str, Any]] = [(f"{d.kind}-throttle", d) for d in spec.clock_drops]
    faults += [("cpu-burn", w) for w in spec.cpu_saturations]
    faults += [("cgroup-quota", w) for w in spec.cgroup_quotas]
    faults += [("load-machine-quota", w) for w in spec.client_quotas]
    faults += [("churn", w) for w in spec.churns]
    faults += [("stall", w) for w in spec.stalls]
    faults += [("model-slowdown", w) for w in spec.model_slowdowns]
    faults += [("neighbour-model", w) for w in spec.neighbour_bursts]
    for name, w in faults:
        append_event(path, "fault", name, t_ns=_ns(start_ns, w.start_s), action="start")
        append_event(path, "fault", name, t_ns=_ns(start_ns, w.end_s), action="end")
    _write_latency_and_load(path, spec, sim, start_ns, rng)
    sources = []
    if "gpu" in spec.sources:
        _write_gpu(writer, spec, sim, start_ns, rng)
        sources.append({"name": "gpu", "file": "telemetry/gpu.jsonl"})
    if "host" in spec.sources:
        _write_host(writer, spec, sim, start_ns, rng)
        sources.append({"name": "host", "file": "telemetry/host.jsonl"})
    if "triton_stats" in spec.sources:
        _write_triton_stats(writer, spec, sim, start_ns)
        sources.append({"name": "triton_stats", "file": "telemetry/triton_stats.jsonl"})
    for source in sources:
        interval = spec.gpu_interval_s if source["name"] == "gpu" else spec.host_interval_s
        writer.manifest["sources"].append(
            {
                **source,
                "interval_s": interval,
                "simulated": True,
                "warning": None,
                **_place(spec, source["name"]),
            }
        )
    if spec.gpu_kind == "simulated":
        writer.manifest["notes"].append("GPU telemetry is simulated (synthetic run)")
    end_ns = _ns(start_ns, spec.duration_s)
    if spec.status != "running":
        append_event(path, "phase", "run-end", t_ns=end_ns, status=spec.status)
        writer.manifest.update(status=spec.status, end_ns=end_ns)
    write_manifest(path, writer.manifest)
    return path


__all__ = [
    "Burst",
    "ClockDrop",
    "ErrorWindow",
    "FaultWindow",
    "RunSpec",
    "Simulated",
    "demo_spec",
    "periodic_clock_drops",
    "simulate",
    "write_run",
]
