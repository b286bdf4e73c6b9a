"""A dcgm-exporter text scrape (one instant), and the DCGM field mapping that the
Prometheus importers share."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from loadkit.errors import UsageError
from loadkit.telemetry.importers.base import (
    MIB,
    Importer,
    ImportOptions,
    ImportResult,
    Row,
    int_or_float,
    num,
    reasons,
)

DCGM_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("sm_clock_max_mhz", 1.0),
    "DCGM_FI_DEV_MAX_MEM_CLOCK": ("mem_clock_max_mhz", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
    "DCGM_FI_DEV_MEMORY_TEMP": ("mem_temp_c", 1.0),
    "DCGM_FI_DEV_SLOWDOWN_TEMP": ("temp_slowdown_c", 1.0),
    "DCGM_FI_DEV_SHUTDOWN_TEMP": ("temp_shutdown_c", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_mj", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu_pct", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("util_mem_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_bytes", MIB),
    "DCGM_FI_DEV_FB_FREE": ("mem_free_bytes", MIB),
    "DCGM_FI_DEV_FB_TOTAL": ("mem_total_bytes", MIB),
    "DCGM_FI_DEV_POWER_VIOLATION": ("violation_power_ns", 1000.0),  # µs
    "DCGM_FI_DEV_THERMAL_VIOLATION": ("violation_thermal_ns", 1000.0),
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": ("pcie_tx_kbps", 1.0),
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": ("pcie_rx_kbps", 1.0),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 1.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active", 1.0),
}
DCGM_REASON_FIELDS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")

# DCGM's "blank" sentinels: a value at or above these means no data
# (BLANK, NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED, ...).
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
DCGM_INT32_BLANK = 0x7FFFFFF0
DCGM_FP64_BLANK = 140737488355328.0  # 2**47


def dcgm_value(raw: str | float) -> float | None:
    """The value, or None for DCGM's blank/not-found/not-supported sentinels or NaN."""
    if isinstance(raw, str):
        raw = raw.strip()
        try:
            as_int = int(raw)
        except ValueError:
            as_int = None
        if as_int is not None:
            if as_int >= DCGM_INT64_BLANK or DCGM_INT32_BLANK <= as_int <= 0x7FFFFFFF:
                return None
            return float(as_int)
        try:
            value = float(raw)
        except ValueError:
            return None
    else:
        value = float(raw)
    if not math.isfinite(value) or value >= DCGM_FP64_BLANK:
        return None
    if DCGM_INT32_BLANK <= value <= 0x7FFFFFFF:
        return None
    return value


def dcgm_row(row: Row, metric: str, raw: str | float, result: ImportResult) -> None:
    value = dcgm_value(raw)
    if metric in DCGM_FIELDS:
        key, scale = DCGM_FIELDS[metric]
        row[key] = None if value is None else int_or_float(value * scale)
    elif metric in DCGM_REASON_FIELDS:
        mask = None if value is None else int(value)
        row["clocks_event_reasons"] = mask
        row.update(reasons(mask))
    elif metric.startswith("DCGM_"):
        key = "dcgm_" + metric.removeprefix("DCGM_FI_").lower()
        if key not in result.unknown_fields:
            result.unknown_fields.append(key)
        row[key] = int_or_float(value)


def host_label(labels: dict[str, str]) -> str | None:
    return labels.get("Hostname") or labels.get("hostname") or labels.get("instance")


def parse_dcgm_text(text: str, *, t_ns: int) -> ImportResult:
    """One dcgm-exporter scrape (`curl host:9400/metrics`), all taken at `t_ns`."""
    result = ImportResult("gpu", "dcgm")
    rows: dict[tuple[str | None, int], Row] = {}
    good_lines = []
    for line in text.splitlines():
        # A torn last line (no value) would make the whole parse fail: drop it.
        if line.strip() and not line.startswith("#") and len(line.rsplit(maxsplit=1)) < 2:
            result.skipped_lines += 1
            continue
        good_lines.append(line)
    try:
        families = list(text_string_to_metric_families("\n".join(good_lines) + "\n"))
    except ValueError as exc:
        raise UsageError(
            f"not Prometheus text: {exc}", hint="is this a dcgm-exporter scrape?"
        ) from None
    for family in families:
        for sample in family.samples:
            labels = dict(sample.labels)
            gpu = num(labels.get("gpu"))
            if gpu is None:
                continue
            key = (host_label(labels), int(gpu))
            row = rows.setdefault(
                key,
                {"t_ns": t_ns, "gpu": int(gpu), "host": key[0], "uuid": labels.get("UUID"),
                 "name": labels.get("modelName"), "imported_from": "dcgm"},
            )  # fmt: skip
            dcgm_row(row, sample.name.removesuffix("_total"), sample.value, result)
    result.rows = sorted(rows.values(), key=lambda r: (r["host"] or "", r["gpu"]))
    if not result.rows:
        raise UsageError(
            "no DCGM_FI_* samples with a gpu label found", hint="is this dcgm-exporter output?"
        )
    return result


def detect(head: str) -> bool:
    return "DCGM_FI_" in head


def parse(text: str, options: ImportOptions) -> ImportResult:
    t_ns = options.at_ns if options.at_ns is not None else options.file_mtime_ns
    if t_ns is None:
        raise UsageError("a dcgm scrape has no time of its own", hint="give --at TIME")
    return parse_dcgm_text(text, t_ns=t_ns)


IMPORTER = Importer(
    name="dcgm",
    usage="curl -s http://HOST:9400/metrics > dcgm.txt     (one instant: --at, or the file time)",
    detect=detect,
    parse=parse,
)
