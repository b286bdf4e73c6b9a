"""Workers ship their per-interval records to the master over Locust's message channel.

A worker has no view of the run directory (it may be another machine). Its
`LatencyRecorder` writes into a `ChannelSink`, which turns each interval's
records (encoded HDR histograms, load rows, request samples, events) into one
message; the master's `RecordCollector` writes them into the one run directory
through the same `FileSink` a local process uses, so the files (and the exact
merge the analyzer does) are the same on one host and on many. Per-request data
never crosses the channel, only the bounded per-interval records.

Delivery: each record has a sequence number; the master acknowledges it; the
worker keeps un-acknowledged records in a bounded buffer and resends those
older than a few seconds (after a reconnect the resend fills the gap; the
master drops duplicates). At the end the master waits for every live worker's
final record (`RecordCollector.complete`).

Clock: the worker pings the master (NTP-style: t1 worker send, t2/t3 master
receive/reply, t4 worker receive) and records in the master's clock
(`LatencyRecorder.align_clock`), so intervals of all workers line up.
Pure bookkeeping here; the Locust wiring is in `runtime.py`.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from loadkit.load.generator.machine import worker_series
from loadkit.load.generator.recorder import FileSink
from loadkit.rundir.layout import TELEMETRY_DIR
from loadkit.rundir.schema import LoadRow, RequestRow
from loadkit.rundir.writer import JsonlWriter

RECORDS = "loadkit-records"  # worker -> master: one interval's records
ACK = "loadkit-ack"  # master -> worker: {"seq": n}
CLOCK_PING = "loadkit-clock-ping"  # worker -> master: {"t1": ns}
CLOCK_PONG = "loadkit-clock-pong"  # master -> worker: {"t1", "t2", "t3"}
FINISH = "loadkit-finish"  # master -> workers: finish your arrivals, send your final record

BUFFER_RECORDS = 300  # un-acked records kept per worker: 5 minutes of intervals
RESEND_AFTER_S = 5.0  # an un-acked record older than this is sent again
CLOCK_WARN_MS = 50.0  # a worker clock this far from the master's is a warning


# --------------------------------------------------------------------- worker side
class RecordBuffer:
    """Records sent and not yet acknowledged, oldest first, at most `limit`."""

    def __init__(self, limit: int = BUFFER_RECORDS):
        self.limit = limit
        self.next_seq = 0
        self.evicted = 0  # records dropped unacknowledged because the buffer was full
        self.evicted_through = -1  # the highest sequence number dropped so
        self._unacked: OrderedDict[int, tuple[dict[str, Any], float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._unacked)

    def add(self, record: dict[str, Any], now: float) -> dict[str, Any]:
        """Number `record`, keep it until acknowledged; returns it (to send now)."""
        while len(self._unacked) >= self.limit:
            seq, _ = self._unacked.popitem(last=False)
            self.evicted += 1
            self.evicted_through = max(self.evicted_through, seq)
        record["seq"] = self.next_seq
        self.next_seq += 1
        self._unacked[record["seq"]] = (record, now)
        return record

    def ack(self, seq: int) -> None:
        self._unacked.pop(seq, None)

    def due(self, now: float, after_s: float = RESEND_AFTER_S) -> list[dict[str, Any]]:
        """Records sent more than `after_s` ago and not acknowledged; marked as sent now."""
        out = []
        for seq, (record, sent) in list(self._unacked.items()):
            if now - sent >= after_s:
                self._unacked[seq] = (record, now)
                out.append(record)
        return out


def _empty() -> dict[str, list[Any]]:
    return {"hists": [], "load": [], "requests": [], "events": [], "machine": []}


class ChannelSink:
    """A worker's `RecordSink`: one message per interval to the master, kept until acked."""

    def __init__(
        self,
        process: str,
        send: Callable[[str, dict[str, Any]], None],
        *,
        limit: int = BUFFER_RECORDS,
        timer: Callable[[], float] = time.monotonic,
        machine: Callable[[], dict[str, Any]] | None = None,
    ):
        self.process = process
        self._send = send
        # This worker's machine, sampled once per interval (`machine.WorkerMachine`).
        self._machine = machine
        self._timer = timer
        self.buffer = RecordBuffer(limit)
        self._current = _empty()
        self.closed = False
        self.resent = 0  # records sent again (not acknowledged in time)
        self.clock: dict[str, Any] | None = None  # the latest ClockEstimate, as a dict

    def histogram(self, tag: str, start_ns: int, end_ns: int, histogram: HdrHistogram) -> None:
        payload = histogram.encode().decode("ascii")
        self._current["hists"].append([tag, start_ns, end_ns, histogram.get_max_value(), payload])

    def load(self, row: LoadRow) -> None:
        self._current["load"].append(row)

    def request(self, row: RequestRow) -> None:
        self._current["requests"].append(row)

    def event(self, kind: str, name: str, **attrs: Any) -> None:
        self._current["events"].append({"kind": kind, "name": name, **attrs})

    def interval_done(self) -> None:
        if self._machine is not None:
            try:
                self._current["machine"].append(self._machine())
            except OSError:  # /proc unreadable: the latency records matter more
                self._machine = None
        self._seal(final=False)

    def flush(self) -> None:
        """Ship events given between intervals (a phase), and resend what is overdue."""
        if self._current["events"]:
            self._seal(final=False)
        self.resend()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._seal(final=True)

    def _seal(self, final: bool) -> None:
        record: dict[str, Any] = {"process": self.process, "final": final, **self._current}
        record["evicted_through"] = self.buffer.evicted_through
        record["evicted"] = self.buffer.evicted
        record["resent"] = self.resent
        if self.clock is not None:
            record["clock"] = self.clock
        self._current = _empty()
        self._send(RECORDS, self.buffer.add(record, self._timer()))

    def resend(self) -> None:
        for record in self.buffer.due(self._timer()):
            self.resent += 1
            self._send(RECORDS, record)

    def on_ack(self, data: dict[str, Any]) -> None:
        self.buffer.ack(int(data["seq"]))

    @property
    def drained(self) -> bool:
        return self.closed and len(self.buffer) == 0


@dataclass(frozen=True)
class ClockEstimate:
    """One NTP-style exchange: the master's clock minus ours, and the round trip."""

    offset_ns: int
    delay_ns: int

    @classmethod
    def from_exchange(cls, t1: int, t2: int, t3: int, t4: int) -> ClockEstimate:
        # t1 we sent, t2 master received, t3 master replied, t4 we received (RFC 5905).
        return cls(offset_ns=((t2 - t1) + (t3 - t4)) // 2, delay_ns=(t4 - t1) - (t3 - t2))

    def to_dict(self, samples: int) -> dict[str, Any]:
        return {
            "offset_ms": round(self.offset_ns / 1e6, 3),
            "delay_ms": round(self.delay_ns / 1e6, 3),
            "samples": samples,
        }


class ClockProbe:
    """Keeps the exchange with the smallest round trip (its offset error is at most delay/2)."""

    def __init__(self) -> None:
        self.best: ClockEstimate | None = None
        self.latest: ClockEstimate | None = None
        self.samples = 0

    def add(self, estimate: ClockEstimate) -> None:
        self.samples += 1
        self.latest = estimate
        if self.best is None or estimate.delay_ns < self.best.delay_ns:
            self.best = estimate

    def report(self) -> dict[str, Any] | None:
        if self.best is None:
            return None
        out = self.best.to_dict(self.samples)
        if self.latest is not None:
            out["latest_offset_ms"] = round(self.latest.offset_ns / 1e6, 3)
        return out


# --------------------------------------------------------------------- master side
@dataclass
class _WorkerRecords:
    sink: FileSink
    seen: set[int]
    final_seq: int | None = None
    evicted_through: int = -1
    evicted: int = 0
    resent: int = 0
    last_end_ns: int | None = None  # end of the newest interval received
    clock: dict[str, Any] | None = None


class RecordCollector:
    """The master's side: writes each worker's records into the run directory, once each."""

    RECENT_INTERVALS = 3  # offered rate of a lost worker: the mean of its last full intervals

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.workers: dict[str, _WorkerRecords] = {}
        # One host series per worker machine, written by the first process that reports it.
        self.machines: dict[str, tuple[str, JsonlWriter]] = {}  # host -> (process, writer)
        self._offered: dict[str, deque[tuple[int, int, int]]] = {}  # (t_ns, interval_ns, n)
        self._first_interval: dict[str, int] = {}

    def receive(self, data: dict[str, Any]) -> int:
        """Write one record (unless seen before); returns its sequence number to acknowledge."""
        process = str(data["process"])
        seq = int(data["seq"])
        worker = self.workers.get(process)
        if worker is None:
            worker = self.workers[process] = _WorkerRecords(FileSink(self.run_dir, process), set())
        worker.evicted_through = max(worker.evicted_through, int(data.get("evicted_through", -1)))
        worker.evicted = max(worker.evicted, int(data.get("evicted", 0)))
        worker.resent = max(worker.resent, int(data.get("resent", 0)))
        if data.get("clock"):
            worker.clock = dict(data["clock"])
        if data.get("final"):
            worker.final_seq = seq
        if seq in worker.seen:
            return seq
        worker.seen.add(seq)
        sink = worker.sink
        for tag, start_ns, end_ns, max_us, payload in data.get("hists") or ():
            sink.histogram_encoded(tag, int(start_ns), int(end_ns), int(max_us), str(payload))
        recent = self._offered.setdefault(process, deque(maxlen=64))
        for row in data.get("load") or ():
            sink.load(row)
            end = int(row["t_ns"]) + int(row["interval_ns"])
            worker.last_end_ns = max(worker.last_end_ns or end, end)
            recent.append((int(row["t_ns"]), int(row["interval_ns"]), int(row["offered"])))
            first = self._first_interval.get(process)
            self._first_interval[process] = (
                min(first, int(row["t_ns"])) if first else int(row["t_ns"])
            )
        for row in data.get("requests") or ():
            sink.request(row)
        for row in data.get("machine") or ():
            self._machine_row(process, row)
        for event in data.get("events") or ():
            attrs = {k: v for k, v in event.items() if k not in ("kind", "name")}
            sink.event(str(event["kind"]), str(event["name"]), **attrs)
        sink.flush()
        return seq

    def _machine_row(self, process: str, row: dict[str, Any]) -> None:
        host = str(row.get("host") or "unknown")
        owner = self.machines.get(host)
        if owner is None:
            path = self.run_dir / TELEMETRY_DIR / f"{worker_series(host)}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            owner = self.machines[host] = (process, JsonlWriter(path))
        if owner[0] == process:
            owner[1].write({k: v for k, v in row.items() if k != "host"})

    def machine_series(self) -> dict[str, str]:
        """Each worker machine's series name -> its host name."""
        return {worker_series(host): host for host in self.machines}

    def complete(self, process: str) -> bool:
        """The worker's final record and every record before it (not evicted) are written."""
        worker = self.workers.get(process)
        if worker is None or worker.final_seq is None:
            return False
        first = worker.evicted_through + 1
        return all(s in worker.seen for s in range(first, worker.final_seq + 1))

    def offered_per_s(self, process: str) -> float:
        """The worker's offered rate over its last few full intervals (what a loss leaves unsent).

        Its first interval is left out when there are others: the load began inside it.
        """
        per_interval: dict[int, int] = {}
        lengths: dict[int, int] = {}
        for t_ns, interval_ns, offered in self._offered.get(process, ()):
            per_interval[t_ns] = per_interval.get(t_ns, 0) + offered
            lengths[t_ns] = interval_ns
        full = [t for t in sorted(per_interval) if lengths[t] == 1_000_000_000]
        first = self._first_interval.get(process)
        if len(full) > 1 and full[0] == first:
            full = full[1:]
        recent = full[-self.RECENT_INTERVALS :]
        if not recent:
            return 0.0
        return sum(per_interval[t] for t in recent) / len(recent)

    def close(self) -> None:
        for worker in self.workers.values():
            worker.sink.close()
        for _, writer in self.machines.values():
            writer.close()
