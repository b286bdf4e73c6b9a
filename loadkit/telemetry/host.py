"""Host telemetry: CPU (per core, load, PSI), the server process tree, cgroup
CPU throttling (v1 and v2), memory and TCP connection churn.

The server's CPU is its whole process tree (Triton plus its Python backend
stubs, where the model code runs), measured from CPU-time deltas, so there is
no meaningless first `cpu_percent()` 0.0 in the series. The cgroup is resolved
from `/proc/<pid>/cgroup` on every sample, because a fault injector may move
the server into a throttled cgroup mid-run. Counters are stored raw and as
per-interval `*_delta`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import psutil

from loadkit.rundir.schema import PLACE_CLIENT, PLACE_SERVER, HostRow, delta_key
from loadkit.telemetry.base import (
    Sampler,
    SamplerOptions,
    SamplerSpec,
    SourcePlan,
    TelemetrySource,
    WarnOnce,
    this_machine,
)

DEFAULT_HOST_INTERVAL_S = 0.5


# --- pure parsers (unit-tested on real-format samples) -----------------------
def parse_kv(text: str) -> dict[str, int]:
    """`key value` lines (cgroup cpu.stat) -> {key: int}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


@dataclass(frozen=True)
class CgroupThrottle:
    version: int
    path: str
    nr_periods: int | None
    nr_throttled: int | None
    throttled_ns: int | None


def throttle_from_cpu_stat(text: str, version: int, path: str) -> CgroupThrottle | None:
    """v1 has `throttled_time` (ns), v2 `throttled_usec`; None if neither is present."""
    kv = parse_kv(text)
    if "nr_throttled" not in kv:
        return None
    if "throttled_time" in kv:
        throttled_ns = kv["throttled_time"]
    elif "throttled_usec" in kv:
        throttled_ns = kv["throttled_usec"] * 1000
    else:
        throttled_ns = None
    return CgroupThrottle(version, path, kv.get("nr_periods"), kv["nr_throttled"], throttled_ns)


def cpu_stat_candidates(proc_cgroup_text: str, cgroup_root: Path) -> list[tuple[int, Path]]:
    """Where the cpu.stat of a process's cgroup may be, v1 controller first.

    Handles pure v1 (`N:cpu,cpuacct:/path`), pure v2 (`0::/path` at the root)
    and hybrid (v2 mounted at `<root>/unified`).
    """
    v1: list[tuple[int, Path]] = []
    v2: list[tuple[int, Path]] = []
    for line in proc_cgroup_text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _hier, controllers, rel = parts
        rel = rel.lstrip("/")
        if controllers == "":
            v2.append((2, cgroup_root / rel / "cpu.stat"))
            v2.append((2, cgroup_root / "unified" / rel / "cpu.stat"))
        elif "cpu" in controllers.split(","):
            for mount in (controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu"):
                v1.append((1, cgroup_root / mount / rel / "cpu.stat"))
    seen: set[Path] = set()
    out = []
    for version, path in v1 + v2:
        if path not in seen:
            seen.add(path)
            out.append((version, path))
    return out


def parse_psi_some_avg10(text: str) -> tuple[float | None, int | None]:
    """(`some avg10` %, `some total` µs) from /proc/pressure/cpu."""
    for line in text.splitlines():
        if line.startswith("some "):
            fields = dict(item.split("=", 1) for item in line.split()[1:] if "=" in item)
            try:
                return float(fields["avg10"]), int(fields["total"])
            except (KeyError, ValueError):
                return None, None
    return None, None


def parse_tcp_opens(snmp_text: str) -> tuple[int, int] | None:
    """(ActiveOpens, PassiveOpens) from /proc/net/snmp's two `Tcp:` lines."""
    tcp = [line.split()[1:] for line in snmp_text.splitlines() if line.startswith("Tcp:")]
    if len(tcp) < 2:
        return None
    table = dict(zip(tcp[0], tcp[1], strict=False))
    try:
        return int(table["ActiveOpens"]), int(table["PassiveOpens"])
    except (KeyError, ValueError):
        return None


TCP_LISTEN = "0A"  # socket state in /proc/net/tcp{,6}
Endpoint = tuple[str, int]


def parse_proc_net_tcp(text: str) -> list[tuple[Endpoint, Endpoint, str]]:
    """(local, remote, state hex) per socket of /proc/net/tcp or tcp6 (addresses as hex text)."""
    out: list[tuple[Endpoint, Endpoint, str]] = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 4:
            continue
        try:
            laddr, lport = parts[1].rsplit(":", 1)
            raddr, rport = parts[2].rsplit(":", 1)
            out.append(((laddr, int(lport, 16)), (raddr, int(rport, 16)), parts[3]))
        except ValueError:
            continue
    return out


def server_connections(
    sockets: list[tuple[Endpoint, Endpoint, str]], ports: set[int]
) -> set[tuple[Endpoint, Endpoint]]:
    """Connections to `ports`, each once as (server end, peer end), whatever their state.

    A client on the same host shows both ends of a connection; either end (the
    client's TIME_WAIT socket included, which lingers a minute after the close)
    names the same (server end, peer end) pair, so each connection counts once.
    """
    out: set[tuple[Endpoint, Endpoint]] = set()
    for local, remote, state in sockets:
        if state == TCP_LISTEN:
            continue
        if local[1] in ports:
            out.add((local, remote))
        elif remote[1] in ports:
            out.add((remote, local))
    return out


def _delta(cur: int | None, prev: int | None) -> int | None:
    if cur is None or prev is None:
        return None
    return cur - prev if cur >= prev else cur  # went down: reset (new cgroup, restart)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


class HostSampler:
    """Rows for `host.jsonl` at (default) 2 Hz."""

    source = "host"

    def __init__(
        self,
        *,
        server_pid: int | None = None,
        proc_root: Path = Path("/proc"),
        cgroup_root: Path = Path("/sys/fs/cgroup"),
    ) -> None:
        self.server_pid = server_pid
        self.proc_root = proc_root
        self.cgroup_root = cgroup_root
        self._warn = WarnOnce()
        self._prev_t_ns: int | None = None
        self._prev: dict[str, Any] = {}
        self._proc_times: dict[int, float] = {}
        self._procs: dict[int, psutil.Process] = {}
        # Per thread (pid, tid): its run delay at the last sample, and the running total.
        self._run_delays: dict[tuple[int, int], int] = {}
        self._run_delay_total: int | None = None
        self._server_ports: set[int] = set()
        self._server_conns: set[tuple[Endpoint, Endpoint]] | None = None
        # The server tree's CPU seconds since the first sample, never going back (a child
        # that exits keeps what it used): the counter `loadkit agent` exposes.
        self.server_cpu_seconds: float | None = None

    def open(self) -> None:
        psutil.cpu_percent(percpu=True)  # the first call only sets the baseline
        if self.server_pid is not None and not psutil.pid_exists(self.server_pid):
            self._warn.warn("nopid", f"server PID {self.server_pid} not running; no server CPU")

    def close(self) -> None:
        pass

    def drain_warnings(self) -> list[str]:
        return self._warn.drain()

    def sample(self, t_ns: int) -> list[HostRow]:
        row: HostRow = {"t_ns": t_ns}
        per_core = psutil.cpu_percent(percpu=True)
        row["cpu_per_core_pct"] = per_core
        row["cpu_pct"] = round(sum(per_core) / len(per_core), 2) if per_core else None
        row["cores"] = len(per_core)
        try:
            row["load1"] = os.getloadavg()[0]
        except OSError:
            row["load1"] = None
        mem = psutil.virtual_memory()
        row["mem_used_bytes"] = int(mem.used)
        row["mem_available_bytes"] = int(mem.available)
        elapsed_s = (t_ns - self._prev_t_ns) / 1e9 if self._prev_t_ns else None
        self._psi(row)
        self._server(row, elapsed_s)
        self._cgroup(row)
        self._tcp(row)
        self._server_tcp(row)
        self._prev_t_ns = t_ns
        return [row]

    # --- pieces ----------------------------------------------------------
    def _counter(self, row: HostRow, key: str, value: int | None) -> None:
        # `key` is one of schema.HOST_COUNTERS (a unit test holds the rows to HostRow).
        cells = cast(dict[str, Any], row)
        cells[key] = value
        cells[delta_key(key)] = _delta(value, self._prev.get(key))
        self._prev[key] = value

    def _psi(self, row: HostRow) -> None:
        text = _read(self.proc_root / "pressure" / "cpu")
        if text is None:
            self._warn.warn("psi", "CPU pressure (PSI) not available on this kernel; null")
            row["psi_cpu_some_avg10"] = None
            self._counter(row, "psi_cpu_some_total_us", None)
            return
        avg10, total = parse_psi_some_avg10(text)
        row["psi_cpu_some_avg10"] = avg10
        self._counter(row, "psi_cpu_some_total_us", total)

    def _server(self, row: HostRow, elapsed_s: float | None) -> None:
        row["server_cpu_pct"] = row["server_rss_bytes"] = None
        row["server_threads"] = row["server_processes"] = None
        if self.server_pid is None:
            return
        try:
            root = self._procs.get(self.server_pid) or psutil.Process(self.server_pid)
            self._procs[self.server_pid] = root
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            self._warn.warn("server_gone", f"server PID {self.server_pid} is gone; no server CPU")
            self._counter(row, "server_ctx_vol", None)
            self._counter(row, "server_ctx_invol", None)
            self._counter(row, "server_run_delay_ns", None)
            return
        cpu_s = 0.0
        rss = threads = 0
        vol = invol = 0
        new_times: dict[int, float] = {}
        for proc in tree:
            proc = self._procs.setdefault(proc.pid, proc)
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    ctx = proc.num_ctx_switches()
                    rss += proc.memory_info().rss
                    threads += proc.num_threads()
            except psutil.Error:
                continue
            total = times.user + times.system
            # A child that appeared since the last sample counts from now on.
            cpu_s += total - self._proc_times.get(proc.pid, total)
            new_times[proc.pid] = total
            vol += ctx.voluntary
            invol += ctx.involuntary
        self._procs = {pid: p for pid, p in self._procs.items() if pid in new_times}
        first = not self._proc_times
        self._proc_times = new_times
        self.server_cpu_seconds = (self.server_cpu_seconds or 0.0) + cpu_s
        row["server_cpu_pct"] = (
            None if first or not elapsed_s else round(100.0 * cpu_s / elapsed_s, 2)
        )
        row["server_rss_bytes"] = rss
        row["server_threads"] = threads
        row["server_processes"] = len(new_times)
        self._counter(row, "server_ctx_vol", vol)
        self._counter(row, "server_ctx_invol", invol)
        self._counter(row, "server_run_delay_ns", self._run_delay(list(new_times)))

    def _run_delay(self, pids: list[int]) -> int | None:
        """Nanoseconds the server's threads were runnable but waited for a CPU, cumulative.

        The kernel's own account of CPU starvation (`/proc/PID/task/TID/schedstat`,
        second field; psutil does not read it). A stopped server (SIGSTOP) is not
        runnable, so it does not wait; one starved by other work does. Summed per
        thread over samples, so a thread that exits takes nothing back.
        """
        current: dict[tuple[int, int], int] = {}
        for pid in pids:
            try:
                tids = os.listdir(self.proc_root / str(pid) / "task")
            except OSError:
                continue
            for tid in tids:
                text = _read(self.proc_root / str(pid) / "task" / tid / "schedstat")
                fields = text.split() if text else []
                if len(fields) >= 2 and fields[1].isdigit():
                    current[(pid, int(tid))] = int(fields[1])
        if not current:
            if pids:
                self._warn.warn("schedstat", "no schedstat (CONFIG_SCHEDSTATS); no run delay")
            return None
        grew = sum(v - self._run_delays.get(k, v) for k, v in current.items())
        self._run_delays = current
        self._run_delay_total = (self._run_delay_total or 0) + max(0, grew)
        return self._run_delay_total

    def _cgroup(self, row: HostRow) -> None:
        pid = self.server_pid or os.getpid()
        text = _read(self.proc_root / str(pid) / "cgroup") or _read(
            self.proc_root / "self" / "cgroup"
        )
        found: CgroupThrottle | None = None
        for version, path in cpu_stat_candidates(text or "", self.cgroup_root):
            stat_text = _read(path)
            if stat_text is not None:
                found = throttle_from_cpu_stat(stat_text, version, str(path.parent))
                if found is not None:
                    break
        if found is None:
            self._warn.warn("cgroup", "no cgroup CPU throttling counters (cpu.stat) found; null")
        if found is not None and found.path != self._prev.get("cgroup_path"):
            # Moved to another cgroup: its counters are a new series.
            for key in ("cgroup_nr_periods", "cgroup_nr_throttled", "cgroup_throttled_ns"):
                self._prev.pop(key, None)
        row["cgroup_version"] = found.version if found else None
        row["cgroup_path"] = found.path if found else None
        self._prev["cgroup_path"] = row["cgroup_path"]
        self._counter(row, "cgroup_nr_periods", found.nr_periods if found else None)
        self._counter(row, "cgroup_nr_throttled", found.nr_throttled if found else None)
        self._counter(row, "cgroup_throttled_ns", found.throttled_ns if found else None)

    def _tcp(self, row: HostRow) -> None:
        opens = parse_tcp_opens(_read(self.proc_root / "net" / "snmp") or "")
        if opens is None:
            self._warn.warn("tcp", "/proc/net/snmp has no Tcp counters; no connection churn")
        self._counter(row, "tcp_active_opens", opens[0] if opens else None)
        self._counter(row, "tcp_passive_opens", opens[1] if opens else None)
        a, p = row["tcp_active_opens_delta"], row["tcp_passive_opens_delta"]
        row["tcp_new_connections"] = None if a is None or p is None else a + p

    def _listening_ports(self) -> set[int]:
        """TCP ports the server's process tree listens on (looked up until found)."""
        if self._server_ports or self.server_pid is None:
            return self._server_ports
        ports: set[int] = set()
        try:
            root = psutil.Process(self.server_pid)
            for proc in [root, *root.children(recursive=True)]:
                try:
                    for conn in proc.net_connections(kind="tcp"):
                        if conn.status == psutil.CONN_LISTEN and conn.laddr:
                            ports.add(int(conn.laddr.port))
                except psutil.Error:
                    continue
        except psutil.Error:
            pass
        self._server_ports = ports
        return ports

    def _server_tcp(self, row: HostRow) -> None:
        """New connections to the server's own ports since the last sample.

        Unlike the host-wide TCP opens, other processes' connections do not
        count. A connection that opens and is gone (no TIME_WAIT left on
        either end) between two samples is missed; the request samples are exact.
        """
        row["server_new_connections"] = None
        row["server_tcp_ports"] = None
        if self.server_pid is None:
            return
        ports = self._listening_ports()
        if not ports:
            self._warn.warn("server_ports", "server listens on no TCP port (yet); no server churn")
            return
        text = "".join(_read(self.proc_root / "net" / name) or "" for name in ("tcp", "tcp6"))
        current = server_connections(parse_proc_net_tcp(text), ports)
        row["server_tcp_ports"] = sorted(ports)
        if self._server_conns is not None:
            row["server_new_connections"] = len(current - self._server_conns)
        self._server_conns = current


def _host_sampler(spec: SamplerSpec) -> Sampler:
    return HostSampler(server_pid=spec.options.get("server_pid"))


def plan_host(options: SamplerOptions, interval_s: float) -> SourcePlan:
    """The host is always sampled.

    Its machine-wide fields (per-core CPU, load, PSI, memory, TCP) are the server's
    only when the target runs here; its `process` part (`server_*`, `cgroup_*`) is the
    server's process tree with --server-pid, else loadkit's own process: `client`.
    """
    process = PLACE_SERVER if options.server_pid is not None else PLACE_CLIENT
    return SourcePlan(
        SamplerSpec("host", "host", interval_s, {"server_pid": options.server_pid}),
        place=this_machine(options, process=process),
    )


SOURCE = TelemetrySource(
    name="host",
    label="host",
    default_interval_s=DEFAULT_HOST_INTERVAL_S,
    row_type=HostRow,
    samplers={"host": _host_sampler},
    plan=plan_host,
    rate_flag=True,
)
