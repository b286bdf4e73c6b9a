"""Errors are episodes too: a target that stopped answering, rejected requests, timed out, failed.

A failed request is recorded with a kind (`load/<process>.jsonl` `error_kinds`,
loadkit/load/failures.py). Each kind belongs to one class, and each class is
one cause here:

- target unreachable: `refused`, `reset`, gRPC `UNAVAILABLE` (nothing listens, or
  the server died with connections open);
- server rejecting: `queue_full` (Triton "Exceeds maximum queue size"), HTTP 503
  and 429, gRPC `RESOURCE_EXHAUSTED` (the server shed load);
- timeouts: requests that reached the scenario's `timeout_s`;
- server errors: other HTTP 5xx, gRPC `INTERNAL` / `UNKNOWN`;
- client errors: the rest (`other`: the generator's own failure; HTTP 4xx, gRPC
  `INVALID_ARGUMENT`: a request the server refused as malformed).

`cancelled` (cut short when the run stopped) is never an episode.

An error episode of a class is a run of windows where at least MIN_ERRORS of the
completions failed with it, in a share above the class's baseline: its share in
the BASELINE_QUANTILE-th percentile window plus at least EPISODE_SHARE (a class
failing in most windows of the run is one episode: the share threshold is never
above HALF). Failing windows less than MERGE_GAP_WINDOWS apart are one episode
(windows in between where nothing completed belong to it). The target "came
back" when a window after the episode has successful answers.

Errors are counted, and a finding earns its confidence from the evidence like
any cause (`error_statistics`, the shared `confidence`): the share of the
episodes' requests that failed with the class, against its share in the rest of
the run (lift, Fisher's test over requests, Cliff's delta of the per-second
share). A found class is never below weak: a failed request is a fact. Where
the episodes fill the whole run there is nothing to compare against, and the
share alone rates it. Attribution ranks the findings among the latency findings
by that confidence (failed requests before slow ones at the same level, by the
share of the run's requests that failed), and lists errors that fell in a stall's
windows right after the stall, as its consequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from loadkit.analysis.causes.base import (
    CAUSE_TIMEOUTS_ID,
    ERRORS,
    Cause,
    ErrorCounts,
    FindFn,
    Signals,
    Signature,
    SignatureFn,
    SummaryFn,
    confidence,
    error_spans,
    fmt,
    na,
)
from loadkit.analysis.model import Evidence, Finding
from loadkit.analysis.noise import cliffs_delta

CAUSE_UNREACHABLE = "target_unreachable"
CAUSE_REJECTING = "server_rejecting"
CAUSE_TIMEOUTS = CAUSE_TIMEOUTS_ID
CAUSE_SERVER_ERRORS = "server_errors"
CAUSE_CLIENT_ERRORS = "client_errors"

MIN_ERRORS = 2  # failed requests of the class in a window
MIN_EPISODE_ERRORS = 5  # an episode with fewer is noise
EPISODE_SHARE = 0.05  # share of a window's completions above the class's baseline share
HALF = 0.5  # the threshold is never above this (a class failing all run long is one episode)
BASELINE_QUANTILE = 20
MERGE_GAP_WINDOWS = 3  # failing windows closer than this are one episode

_UNREACHABLE_KINDS = frozenset({"refused", "reset", "grpc_UNAVAILABLE"})
_REJECTING_KINDS = frozenset({"queue_full", "http_503", "http_429", "grpc_RESOURCE_EXHAUSTED"})
_TIMEOUT_KINDS = frozenset({"timeout", "grpc_DEADLINE_EXCEEDED"})
_SERVER_KINDS = frozenset({"grpc_INTERNAL", "grpc_UNKNOWN", "grpc_DATA_LOSS"})
_NOT_ERRORS = frozenset({"cancelled"})


def error_class(kind: str) -> str | None:
    """The cause id a recorded error kind belongs to (None: not an error episode's, `cancelled`)."""
    if kind in _NOT_ERRORS:
        return None
    if kind in _UNREACHABLE_KINDS:
        return CAUSE_UNREACHABLE
    if kind in _REJECTING_KINDS:
        return CAUSE_REJECTING
    if kind in _TIMEOUT_KINDS:
        return CAUSE_TIMEOUTS
    if kind in _SERVER_KINDS or (kind.startswith("http_5") and kind[5:].isdigit()):
        return CAUSE_SERVER_ERRORS
    return CAUSE_CLIENT_ERRORS


@dataclass(frozen=True)
class ErrorEpisode:
    """Windows [first, last] where requests failed with one class of error."""

    cause: str
    first: int  # window index
    last: int  # window index, inclusive
    errors: int  # failed with this class
    completed: int  # every completion in the episode's windows
    kinds: dict[str, int]
    back: int | None  # first window after it with successful answers (None: never came back)


def class_errors(error_kinds: Mapping[str, np.ndarray], cause: str, n: int) -> np.ndarray:
    """Failed requests of one class per window."""
    out = np.zeros(n)
    for kind, series in error_kinds.items():
        if error_class(kind) == cause:
            out += np.nan_to_num(np.asarray(series, dtype=float))
    return out


def baseline_share(failed: np.ndarray, completed: np.ndarray) -> float:
    """The class's share of completions in a typical quiet window (its BASELINE_QUANTILE-th)."""
    busy = completed > 0
    if not busy.any():
        return 0.0
    return float(np.percentile(failed[busy] / completed[busy], BASELINE_QUANTILE))


def find_episodes(
    cause: str,
    error_kinds: Mapping[str, np.ndarray],
    completed: np.ndarray,
    errors: np.ndarray,
) -> tuple[list[ErrorEpisode], float]:
    """The class's error episodes, and its baseline share."""
    completed = np.nan_to_num(np.asarray(completed, dtype=float))
    n = len(completed)
    failed = class_errors(error_kinds, cause, n)
    base = baseline_share(failed, completed)
    threshold = min(HALF, base + max(EPISODE_SHARE, base))
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(completed > 0, failed / completed, 0.0)
    failing = np.nonzero((failed >= MIN_ERRORS) & (share >= threshold))[0]
    ok = completed - np.nan_to_num(np.asarray(errors, dtype=float))
    spans: list[list[int]] = []
    for w in failing.tolist():
        if spans and w - spans[-1][1] <= MERGE_GAP_WINDOWS:
            spans[-1][1] = w
        else:
            spans.append([w, w])
    out: list[ErrorEpisode] = []
    for first, last in spans:
        sl = slice(first, last + 1)
        count = int(failed[sl].sum())
        if count < MIN_EPISODE_ERRORS:
            continue
        kinds = {
            k: int(np.nansum(np.asarray(v, dtype=float)[sl]))
            for k, v in sorted(error_kinds.items())
            if error_class(k) == cause and np.nansum(np.asarray(v, dtype=float)[sl]) > 0
        }
        later = np.nonzero(ok[last + 1 :] > 0)[0]
        back = int(last + 1 + later[0]) if later.size else None
        out.append(ErrorEpisode(cause, first, last, count, int(completed[sl].sum()), kinds, back))
    return out, base


@dataclass(frozen=True)
class ErrorStatistics:
    """How concentrated a class's failures are in its episodes (the shared scoring's inputs)."""

    share_in: float  # of the episodes' completions, failed with the class
    share_out: float  # of the other seconds' completions (0 where none)
    lift: float | None  # share_in / share_out (None: none failed outside)
    p_value: float | None  # Fisher's exact test over requests (None: nothing outside)
    delta: float | None  # Cliff's delta of the per-second share, episodes against the rest
    run_share: float  # of the run's completions, failed with the class in its episodes
    outside: int  # completions outside the episodes

    @property
    def confidence(self) -> str:
        """The shared function's level; never below weak (a failed request is a fact)."""
        if self.outside == 0:
            # The whole run: nothing to compare with, so no effect to measure; the failed
            # requests are the class's own metric and their share alone stands for it.
            level = confidence(self.share_in, 0.0, 1.0, None)
        else:
            level = confidence(self.share_in, self.p_value, self.delta, self.lift)
        return level or "weak"


def error_statistics(
    failed: np.ndarray, completed: np.ndarray, episodes: list[ErrorEpisode]
) -> ErrorStatistics:
    """The class's failures in its episodes against the rest of the run, per request and second."""
    inside = np.zeros(len(completed), dtype=bool)
    for e in episodes:
        inside[e.first : e.last + 1] = True
    busy = completed > 0
    f_in, n_in = float(failed[inside].sum()), float(completed[inside].sum())
    f_out, n_out = float(failed[~inside].sum()), float(completed[~inside].sum())
    share_in = f_in / n_in if n_in else 0.0
    share_out = f_out / n_out if n_out else 0.0
    p_value = delta = None
    if n_out > 0:
        _, p = stats.fisher_exact(
            [[f_in, n_in - f_in], [f_out, n_out - f_out]], alternative="greater"
        )
        p_value = float(p)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_second = np.where(busy, failed / completed, np.nan)
        delta = cliffs_delta(per_second[inside], per_second[~inside])
    total = float(completed.sum())
    return ErrorStatistics(
        share_in=share_in,
        share_out=share_out,
        lift=share_in / share_out if share_out > 0 else None,
        p_value=p_value,
        delta=delta,
        run_share=f_in / total if total else 0.0,
        outside=int(n_out),
    )


def _evidence(
    counts: ErrorCounts,
    cause: str,
    episodes: list[ErrorEpisode],
    base: float,
    max_queue_size: int | None,
    timeout_s: float | None,
) -> list[Evidence]:
    w = counts.window_s
    n = counts.n

    def at(window: int) -> float:
        return max(0.0, window * w + counts.offset_s)

    n_windows = sum(e.last - e.first + 1 for e in episodes)
    errors = sum(e.errors for e in episodes)
    completed = sum(e.completed for e in episodes)
    last = episodes[-1]
    out = [
        Evidence("episodes", float(len(episodes)), "episodes"),
        Evidence(
            "start_s", at(episodes[0].first), "s", "first episode's start, from the run start"
        ),
        Evidence("end_s", at(last.last + 1), "s", "last episode's end"),
        Evidence("duration_s", n_windows * w, "s", "in all episodes"),
        Evidence("run_share", n_windows / n if n else None, "x", "of the run's seconds"),
        Evidence("run_end_s", at(n), "s"),
        Evidence("errors", float(errors), "requests", "failed in the episodes"),
        Evidence("completed", float(completed), "requests", "answered or failed in the episodes"),
        Evidence("failed_pct", 100.0 * errors / completed if completed else None, "%"),
        Evidence("baseline_pct", 100.0 * base, "%", f"{BASELINE_QUANTILE}th percentile window"),
        Evidence(
            "came_back", 1.0 if last.back is not None else 0.0, "bool", "after the last episode"
        ),
        Evidence("back_s", at(last.back) if last.back is not None else None, "s"),
    ]
    for e in episodes:
        out.append(
            Evidence("episode_start_s", at(e.first), "s", f"came back: {e.back is not None}")
        )
        out.append(Evidence("episode_end_s", at(e.last + 1), "s"))
    kinds: dict[str, int] = {}
    for e in episodes:
        for k, v in e.kinds.items():
            kinds[k] = kinds.get(k, 0) + v
    out += [Evidence(f"kind:{k}", float(v), "requests") for k, v in sorted(kinds.items())]
    if cause == CAUSE_REJECTING:
        out.append(
            Evidence(
                "max_queue_size",
                float(max_queue_size) if max_queue_size is not None else None,
                "requests",
                "model config default_queue_policy",
            )
        )
    if cause == CAUSE_TIMEOUTS:
        out.append(Evidence("timeout_s", timeout_s, "s", "scenario parameter"))
    return out


def _get(e: list[Evidence], name: str) -> float | None:
    return next((x.value for x in e if x.name == name), None)


def _counts(e: list[Evidence], when: str = "") -> str:
    kinds = [(x.name.removeprefix("kind:"), x.value) for x in e if x.name.startswith("kind:")]
    failed, completed = _get(e, "errors"), _get(e, "completed")
    text = f"{fmt(failed)} of {fmt(completed)} requests{when} failed"
    if kinds:
        text += " (" + ", ".join(f"{k} {fmt(v)}" for k, v in kinds) + ")"
    return text


def _back(e: list[Evidence]) -> str:
    if _get(e, "came_back"):
        return f"it came back at {fmt(_get(e, 'back_s'))} s"
    return f"it did not come back before the run ended at {fmt(_get(e, 'run_end_s'))} s"


def unreachable_summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    if int(_get(e, "episodes") or 0) == 1 and not _get(e, "came_back"):
        return (
            f"The target stopped answering at {fmt(_get(e, 'start_s'))} s and did not come back "
            f"before the run ended at {fmt(_get(e, 'run_end_s'))} s: {_counts(e, ' from then')}."
        )
    return (
        f"The target stopped answering {error_spans(e)}; {_back(e)}: {_counts(e, ' in between')}."
    )


def rejecting_summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    limit = _get(e, "max_queue_size")
    queue = (
        f" (the model's queue limit, max_queue_size, is {fmt(limit)})"
        if limit is not None
        else " (no queue limit in the recorded model config)"
    )
    return f"The server rejected requests {error_spans(e)}{queue}: {_counts(e)}."


def timeouts_summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    limit = _get(e, "timeout_s")
    after = f" after {fmt(limit, ' s', 1)}" if limit is not None else ""
    return f"Requests timed out{after} without an answer {error_spans(e)}: {_counts(e)}."


def server_errors_summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    return f"The server answered with errors {error_spans(e)}: {_counts(e)}."


def client_errors_summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    return f"Requests failed on the client's side or were refused as invalid {error_spans(e)}: {_counts(e)}."


def _signature_for(cause: str) -> SignatureFn:
    def signature(sig: Signals, baseline: np.ndarray) -> Signature:
        counts = sig.error_counts
        if counts is None:
            return na(cause, "not assessable: no load counters with error kinds")
        episodes, _ = find_episodes(cause, counts.kinds, counts.completed, counts.errors)
        holds = np.zeros(sig.n)
        failed = np.zeros(sig.n)
        per_window = max(1, int(round(sig.window_s / counts.window_s)))
        for e in episodes:
            holds[e.first // per_window : e.last // per_window + 1] = 1.0
        by_second = class_errors(counts.kinds, cause, counts.n)
        np.add.at(failed, np.minimum(np.arange(counts.n) // per_window, sig.n - 1), by_second)
        return Signature(cause, holds, failed, run_level=True, standing=True)

    return signature


def finding_of(
    cause: str,
    counts: ErrorCounts,
    max_queue_size: int | None = None,
    timeout_s: float | None = None,
) -> Finding | None:
    """One error cause's finding from the run's error counts (None: no episode of it)."""
    episodes, base = find_episodes(cause, counts.kinds, counts.completed, counts.errors)
    if not episodes:
        return None
    this = BY_CAUSE[cause]
    evidence = _evidence(counts, cause, episodes, base, max_queue_size, timeout_s)
    share = _get(evidence, "run_share") or 0.0
    completed = np.nan_to_num(np.asarray(counts.completed, dtype=float))
    rated = error_statistics(class_errors(counts.kinds, cause, counts.n), completed, episodes)
    evidence += [
        Evidence("failed_outside_pct", 100.0 * rated.share_out, "%", "outside its episodes"),
        Evidence("run_failed_pct", 100.0 * rated.run_share, "%", "of the run's requests"),
    ]
    return Finding(
        cause=cause,
        title=this.title,
        confidence=rated.confidence,
        episodes=(),
        episodes_total=0,
        coincidence=share,
        baseline_rate=rated.share_out,
        lift=rated.lift,
        p_value=rated.p_value,
        cliffs_delta=rated.delta,
        lag_s=None,
        evidence=tuple(evidence),
        summary=this.summary(evidence, "", share),
        action=this.action,
    )


def _finder(cause: str) -> FindFn:
    def find(
        counts: ErrorCounts, max_queue_size: int | None, timeout_s: float | None
    ) -> Finding | None:
        return finding_of(cause, counts, max_queue_size, timeout_s)

    return find


def _cause(
    cause: str, title: str, action: str, summary: SummaryFn, headline: str | None = None
) -> Cause:
    return Cause(
        id=cause,
        title=title,
        action=action,
        signature=_signature_for(cause),
        summary=summary,
        kind=ERRORS,
        find=_finder(cause),
        headline=headline,
        consequences=(),  # errors are what causes make, not causes of other errors
    )


CAUSES: tuple[Cause, ...] = (
    _cause(
        CAUSE_UNREACHABLE,
        "Target unreachable",
        "Find why the server stopped answering: its log and exit status, the kernel's OOM "
        "killer (dmesg), the orchestrator's restarts and health checks. Latency measured in "
        "these windows describes only the requests that still got an answer.",
        unreachable_summary,
        headline="TARGET UNREACHABLE",
    ),
    _cause(
        CAUSE_REJECTING,
        "Server rejecting requests",
        "The server shed load at its queue limit: offer less, add model instances or GPUs, or "
        "raise max_queue_size (default_queue_policy) if the latency budget allows longer waits.",
        rejecting_summary,
    ),
    _cause(
        CAUSE_TIMEOUTS,
        "Requests timed out",
        "Requests got no answer within timeout_s: look for a hung or stopped server (its log, "
        "process state) or a queue longer than the timeout; raise timeout_s only if the SLO allows.",
        timeouts_summary,
    ),
    _cause(
        CAUSE_SERVER_ERRORS,
        "Server errors",
        "The server answered with errors: read its words in the run summary and the server log.",
        server_errors_summary,
    ),
    _cause(
        CAUSE_CLIENT_ERRORS,
        "Client-side errors",
        "The requests were refused as invalid or failed in the load generator: check the "
        "request source (--input-data, --shape, --int-range) against the model's inputs, and the "
        "errors' messages in the run summary.",
        client_errors_summary,
    ),
)

BY_CAUSE: dict[str, Cause] = {c.id: c for c in CAUSES}
