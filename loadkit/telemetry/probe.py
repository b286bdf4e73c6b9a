"""Low-rate probe traffic for `loadkit watch`: a canary, not a load test.

A thread sends one KServe v2 JSON inference request (all-zero inputs built
from the model's metadata, each -1 dimension = 1) every 1/rate seconds on a
fixed schedule, and records per-second HDR histograms to `latency/probe.hlog`
(`corrected:` from the intended send time, `service:` from the actual send)
and counters to `load/probe.jsonl`, in the run-directory format that
`loadkit analyze` reads. Plain threads and stdlib HTTP: no gevent here.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from loadkit.errors import TargetError
from loadkit.rundir import IntervalLogWriter, JsonlWriter, new_histogram, now_ns
from loadkit.rundir.layout import LATENCY_DIR, LOAD_DIR
from loadkit.rundir.schema import LoadRow
from loadkit.telemetry.http import HttpGetError, KeepAliveGetter

PROCESS_NAME = "probe"
REQUEST_NAME = "probe"
INTERVAL_NS = 1_000_000_000

_ZERO: dict[str, Any] = {"BOOL": False, "BYTES": ""}


def probe_request(metadata: dict[str, Any]) -> dict[str, Any]:
    """A v2 JSON inference request with zero-valued inputs shaped from `metadata`."""
    inputs = []
    for spec in metadata.get("inputs") or []:
        shape = [1 if int(d) < 0 else int(d) for d in spec.get("shape") or []]
        count = 1
        for d in shape:
            count *= d
        zero = _ZERO.get(spec.get("datatype", ""), 0)
        inputs.append(
            {
                "name": spec["name"],
                "shape": shape,
                "datatype": spec["datatype"],
                "data": [zero] * count,
            }
        )
    if not inputs:
        raise TargetError(f"model {metadata.get('name')!r} declares no inputs; cannot probe it")
    return {"inputs": inputs}


class Prober:
    """Sends probes at `rate_hz` until `stop()`; records into `run_dir`."""

    def __init__(self, run_dir: Path, url: str, model: str, rate_hz: float) -> None:
        if rate_hz <= 0:
            raise ValueError("probe rate must be positive")
        self.run_dir = run_dir
        self.url = url
        self.model = model
        self.interval_s = 1.0 / rate_hz
        self._http = KeepAliveGetter(url, timeout_s=10.0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = self.ok = self.errors = 0

    def start(self) -> Prober:
        try:
            metadata = self._http.get_json(f"/v2/models/{quote(self.model, safe='')}")
        except HttpGetError as exc:
            raise TargetError(
                f"cannot read model {self.model!r} metadata at {self.url}: {exc}",
                hint="check --triton and --model",
            ) from exc
        self._body = json.dumps(probe_request(metadata), separators=(",", ":")).encode()
        self._infer_path = f"/v2/models/{quote(self.model, safe='')}/infer"
        self._thread = threading.Thread(target=self._run, name="loadkit-probe", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(15.0)
        self._http.close()

    def _send(self) -> str | None:
        """None on success, else an error kind (`http_503`, `ConnectionRefusedError`, ...)."""
        try:
            status = self._http.post_json(self._infer_path, self._body)
        except HttpGetError as exc:
            return exc.kind
        return None if status == 200 else f"http_{status}"

    def _run(self) -> None:
        start_ns = now_ns()
        hlog = IntervalLogWriter(self.run_dir / LATENCY_DIR / f"{PROCESS_NAME}.hlog", start_ns)
        counters = JsonlWriter(self.run_dir / LOAD_DIR / f"{PROCESS_NAME}.jsonl")
        corrected, service = new_histogram(), new_histogram()
        window_start = start_ns
        window: dict[str, Any] = {"offered": 0, "ok": 0, "errors": 0, "kinds": {}}
        t0 = time.monotonic()
        k = 0
        try:
            while not self._stop.is_set():
                intended_mono = t0 + k * self.interval_s
                k += 1
                if self._stop.wait(max(0.0, intended_mono - time.monotonic())):
                    break
                intended_ns = start_ns + int((intended_mono - t0) * 1e9)
                sent_ns = now_ns()
                error = self._send()
                done_ns = now_ns()
                self.sent += 1
                window["offered"] += 1
                if error is None:
                    self.ok += 1
                    window["ok"] += 1
                    corrected.record_value(max(1, (done_ns - intended_ns) // 1000))
                    service.record_value(max(1, (done_ns - sent_ns) // 1000))
                else:
                    self.errors += 1
                    window["errors"] += 1
                    window["kinds"][error] = window["kinds"].get(error, 0) + 1
                while done_ns - window_start >= INTERVAL_NS:
                    self._flush(hlog, counters, window_start, corrected, service, window)
                    corrected, service = new_histogram(), new_histogram()
                    window = {"offered": 0, "ok": 0, "errors": 0, "kinds": {}}
                    window_start += INTERVAL_NS
        finally:
            self._flush(hlog, counters, window_start, corrected, service, window)
            hlog.close()
            counters.close()

    def _flush(
        self,
        hlog: IntervalLogWriter,
        counters: JsonlWriter,
        start: int,
        corrected: Any,
        service: Any,
        window: dict[str, Any],
    ) -> None:
        end = start + INTERVAL_NS
        if corrected.get_total_count():
            hlog.write(f"corrected:{REQUEST_NAME}", start, end, corrected)
            hlog.write(f"service:{REQUEST_NAME}", start, end, service)
            hlog.flush()
        if window["offered"]:
            row: LoadRow = {
                "t_ns": start,
                "interval_ns": INTERVAL_NS,
                "process": PROCESS_NAME,
                "name": REQUEST_NAME,
                "offered": window["offered"],
                "started": window["offered"],
                "ok": window["ok"],
                "errors": window["errors"],
                "dropped": 0,
                "in_flight": 0,
                "out_of_range": 0,
                "error_kinds": window["kinds"],
            }
            counters.write(row)
            counters.flush()
