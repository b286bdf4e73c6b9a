"""A tune's report (`tune.json`): the recommendation, the Pareto plot, predicted against measured.

Formats what `loadkit tune` wrote (the predictions, the Pareto front and the
recommendation were decided by `loadkit.decide.tune`); it computes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadkit import __version__
from loadkit.errors import RunFormatError
from loadkit.report import formatting as fmt
from loadkit.report.plots import TunePlot, draw
from loadkit.report.templating import environment

TUNE_FILE = "tune.json"  # as loadkit.decide.tune writes it (report does not import decide)


def read_tune(tune_dir: str | Path) -> dict[str, Any]:
    path = Path(tune_dir) / TUNE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunFormatError(f"cannot read {path} ({exc})") from exc
    if not isinstance(data, dict) or data.get("kind") != "tune":
        raise RunFormatError(f"{path} is not a loadkit tune")
    return data


def build_context(data: Mapping[str, Any]) -> dict[str, Any]:
    verified = {v["label"]: v for v in data.get("verifications") or []}
    recommended = data.get("recommended") or {}
    rows = []
    for p in data.get("predictions") or []:
        pred = p.get("predicted") or {}
        v = verified.get(p["label"]) or {}
        rows.append(
            {
                "label": p["label"],
                "predicted": fmt.rate(pred.get("capacity_rps")),
                "p50": fmt.ms(pred.get("p50_ms")),
                "p99": fmt.ms(pred.get("p99_ms")),
                "batch_mean": fmt.sig(pred.get("batch_mean")),
                "pareto": bool(p.get("pareto")),
                "measured": (
                    ("≥ " if v.get("cut_short") else "") + fmt.rate(v.get("measured_capacity_rps"))
                    if v
                    else ""
                ),
                "gap": (
                    f"{v['capacity_error_pct']:+.1f} %"
                    if v and v.get("capacity_error_pct") is not None
                    else ""
                ),
                "status": v.get("status") or "",
                "run": v.get("run") or "",
                "recommended": recommended.get("label") == p["label"],
            }
        )
    preds = data.get("predictions") or []
    slo = data.get("slo") or {}
    figure = (
        TunePlot(
            labels=[p["label"] for p in preds],
            predicted_rps=[(p.get("predicted") or {}).get("capacity_rps") for p in preds],
            p99_ms=[(p.get("predicted") or {}).get("p99_ms") for p in preds],
            measured_rps=[
                (verified.get(p["label"]) or {}).get("measured_capacity_rps") for p in preds
            ],
            pareto=[bool(p.get("pareto")) for p in preds],
            recommended=recommended.get("label"),
            slo_ms=slo.get("p99_ms"),
        )
        if preds
        else None
    )
    restored = data.get("restored")
    profile = data.get("profile") or {}
    return {
        "title": f"Tune: {data.get('model') or ''}",
        "scenario": Path(str(data.get("scenario") or "")).stem,
        "target": data.get("target") or "",
        "status": data.get("status") or "",
        "slo": ", ".join(f"{k.removesuffix('_ms')} <= {v:g} ms" for k, v in slo.items()),
        "space": ", ".join(
            f"{k}={','.join(map(str, v))}" for k, v in (data.get("space") or {}).items()
        ),
        "rows": rows,
        "recommended": recommended or None,
        "restored": restored["message"] if isinstance(restored, dict) else None,
        "restored_ok": bool(restored.get("ok")) if isinstance(restored, dict) else True,
        "profile": [
            {
                "instances": n,
                "sizes": ", ".join(f"{b}: {float(ms):.2f}" for b, ms in table.items()),
            }
            for n, table in (profile.get("compute_ms") or {}).items()
        ],
        "wall_s": data.get("wall_s"),
        "figure": figure,
        "report_version": __version__,
    }


def render_html(tune_dir: str | Path) -> str:
    ctx = build_context(read_tune(tune_dir))
    image = draw(ctx["figure"]) if ctx["figure"] is not None else None
    return environment().get_template("tune.html.j2").render({**ctx, "image": image})


__all__ = ["build_context", "read_tune", "render_html"]
