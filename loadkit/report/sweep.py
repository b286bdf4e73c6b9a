"""The comparison of a configuration sweep (`sweep.json`): HTML for people, Markdown for tickets.

Formats what `loadkit sweep` wrote (each point's numbers were computed by
`analysis/sweep.py`); it computes nothing but shares for display.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadkit import __version__
from loadkit.analysis.sweep import SWEEP_FILE
from loadkit.errors import RunFormatError
from loadkit.report import formatting as fmt
from loadkit.report.markdown import md_escape
from loadkit.report.plots import SweepPlot, draw
from loadkit.report.templating import environment


def read_sweep(sweep_dir: str | Path) -> dict[str, Any]:
    path = Path(sweep_dir) / SWEEP_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunFormatError(f"cannot read {path} ({exc})") from exc
    if not isinstance(data, dict) or data.get("kind") != "sweep":
        raise RunFormatError(f"{path} is not a loadkit sweep")
    return data


def _shares(batch_sizes: Mapping[str, int]) -> str:
    total = sum(batch_sizes.values())
    if not total:
        return "n/a"
    items = sorted(batch_sizes.items(), key=lambda kv: int(kv[0]))
    return ", ".join(f"{size}: {n / total:.0%}" for size, n in items if n / total >= 0.01)


def build_context(data: Mapping[str, Any]) -> dict[str, Any]:
    rows = []
    for p in data.get("points") or []:
        n = p.get("numbers") or {}
        rows.append(
            {
                "label": p["label"],
                "status": p["status"],
                "error": p.get("error") or p.get("note") or "",
                "run": p.get("run") or "",
                "p50": fmt.ms(n.get("p50_ms")),
                "p95": fmt.ms(n.get("p95_ms")),
                "p99": fmt.ms(n.get("p99_ms")),
                "throughput": fmt.rate(n.get("throughput_rps")),
                "capacity": fmt.rate(n.get("capacity_rps")),
                "batches": _shares(n.get("batch_sizes") or {}),
                "batch_mean": fmt.sig(n.get("batch_size_mean")),
                "queue": fmt.ms(n.get("queue_ms")),
                "compute": fmt.ms(n.get("compute_ms")),
                "slo": n.get("slo") or "n/a",
                "slo_passed": n.get("slo_passed"),
                "findings": [f"{f['title']} ({f['confidence']})" for f in n.get("findings") or []],
                "rules": [f"{r['rule']}: {r['detail']}" for r in p.get("rules") or []],
                "recommended": (data.get("recommended") or {}).get("label") == p["label"],
            }
        )
    measured = [p for p in data.get("points") or [] if p.get("numbers")]
    figure = (
        SweepPlot(
            labels=[p["label"] for p in measured],
            p50_ms=[p["numbers"].get("p50_ms") for p in measured],
            p95_ms=[p["numbers"].get("p95_ms") for p in measured],
            p99_ms=[p["numbers"].get("p99_ms") for p in measured],
        )
        if measured
        else None
    )
    restored = data.get("restored")
    return {
        "title": f"Configuration sweep: {data.get('model') or 'runs'}",
        "scenario": Path(str(data.get("scenario") or "")).stem or "runs made by hand",
        "target": data.get("target") or "",
        "status": data.get("status") or "",
        "original": ", ".join(f"{k}={v}" for k, v in (data.get("original") or {}).items()),
        "rows": rows,
        "recommended": data.get("recommended"),
        "restored": restored["message"] if isinstance(restored, dict) else None,
        "restored_ok": bool(restored.get("ok")) if isinstance(restored, dict) else True,
        "figure": figure,
        "report_version": __version__,
    }


def render_html(sweep_dir: str | Path) -> str:
    ctx = build_context(read_sweep(sweep_dir))
    image = draw(ctx["figure"]) if ctx["figure"] is not None else None
    return environment().get_template("sweep.html.j2").render({**ctx, "image": image})


def render_markdown(sweep_dir: str | Path) -> str:
    ctx = build_context(read_sweep(sweep_dir))
    lines = [f"## {md_escape(ctx['title'])}", ""]
    rec = ctx["recommended"]
    if rec:
        lines += [f"**Recommended: {md_escape(rec['label'])}**: {md_escape(rec['why'])}", ""]
    lines.append(
        "| configuration | P50 | P95 | P99 | throughput | batches | queue | compute | SLO |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for r in ctx["rows"]:
        slo = "pass" if r["slo_passed"] else ("FAIL" if r["slo_passed"] is False else r["status"])
        lines.append(
            f"| {md_escape(r['label'])} | {r['p50']} | {r['p95']} | {r['p99']} | "
            f"{r['throughput']} | {md_escape(r['batches'])} | {r['queue']} | {r['compute']} | {slo} |"
        )
    lines.append("")
    for r in ctx["rows"]:
        for rule in r["rules"]:
            lines.append(f"- {md_escape(r['label'])}: {md_escape(rule)}")
    if ctx["restored"]:
        lines += ["", md_escape(ctx["restored"])]
    return "\n".join(lines) + "\n"


def render_json(sweep_dir: str | Path) -> str:
    """The sweep's own `sweep.json`, as `loadkit sweep` wrote it."""
    return (Path(sweep_dir) / SWEEP_FILE).read_text(encoding="utf-8")


__all__ = ["build_context", "read_sweep", "render_html", "render_json", "render_markdown"]
