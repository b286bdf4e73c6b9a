"""Attribution: which causes' signatures hold during spike episodes and not in baseline windows.

Each cause is one module in `loadkit/analysis/causes/` (listed in its
registry) whose signature says, per window, whether the cause holds
(True/False, NaN = not measurable), with a metric whose episode-vs-baseline
effect size is reported and the evidence numbers. The shared statistics
(`score`) are the same for all causes:

- coincidence: share of episodes where the signature holds in some window
  of the episode or of the LEAD_WINDOWS before it (a cause can lead);
- baseline rate: share of stretches of the baseline (outside every episode,
  with a margin) shaped like the episodes where it holds somewhere: the episodes
  shifted together around the baseline (`_stretch_null`), since an episode of k
  windows has k chances and a single window one; lift = coincidence / baseline rate;
- p: the binomial tail at that rate, or the share of the shifts that explain as
  many episodes where larger (a signature in long spells);
- Cliff's delta of the metric, episode windows against baseline windows;
- lag: median of (first window where it holds - episode start), seconds.

Queue time and latency are symptoms and never a cause; they appear only as
evidence (e.g. "queue time far above the batching window").

Each cause reads the telemetry of one machine (`signals_for`): a server cause only
what was sampled on the server's side, a cause of the load machine only what was
sampled there. One whose series were all sampled on the other side is not
assessable, saying so, before it is scored.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import stats

from loadkit.analysis.breakdown import baseline_medians, episode_mask, growth
from loadkit.analysis.causes import BY_ID, ERRORS, REGISTRY, STANDING, UNEXPLAINED, Cause
from loadkit.analysis.causes.base import (
    NO_CLIENT_TELEMETRY,
    NO_SERVER_TELEMETRY,
    Signals,
    Signature,
    components,
    confidence,
    error_spans,
    na,
)
from loadkit.analysis.model import (
    CONFIDENCES,
    STRETCHES,
    CauseCheck,
    Evidence,
    Finding,
    SpikeEpisode,
)
from loadkit.analysis.noise import EFFECT_MOVED, cliffs_delta
from loadkit.analysis.places import sampled_at

LEAD_WINDOWS = 2
# Left out of the baseline on each side of an episode (its onset and its recovery): in
# seconds, so that a low-rate run's longer windows (percentiles.choose_window_s) do not
# spend a periodic fault's whole gap on margins and leave no baseline.
BASELINE_MARGIN_S = 2.0
# One coincidence does not show that a cause recurs with the spikes: a cause seen in
# fewer spike episodes than this is rated one level lower than its statistics alone
# (a test weighs one episode against every stretch of the baseline and can call a single
# coincidence strong).
MIN_EPISODES_AS_RATED = 2
# Spikes must stand out by as much as the benchmark calls a spike (1.5x their baseline,
# the median over the episodes a finding explains) for a cause of them to be rated above
# weak: a clean run's host noise makes episodes at 1.3-1.6x, and a condition of the host
# that is there all run long (every core busy with someone else's idle-priority work)
# coincides with some of them; their statistics can still read "strong" over a few.
SPIKE_MIN_PEAK_RATIO = 1.5

TITLES = {c.id: c.title for c in REGISTRY}
ACTIONS = {c.id: c.action for c in REGISTRY}

# --- statistics -------------------------------------------------------------------------


def baseline_mask(n: int, episodes: Sequence[SpikeEpisode], starts_ns: np.ndarray) -> np.ndarray:
    """Windows outside every episode, with BASELINE_MARGIN_S (at least a window) on each side."""
    mask = np.ones(n, dtype=bool)
    window_s = float(starts_ns[1] - starts_ns[0]) / 1e9 if len(starts_ns) > 1 else 1.0
    margin = max(1, math.ceil(BASELINE_MARGIN_S / window_s - 1e-9))
    for e in episodes:
        idx = np.nonzero((starts_ns >= e.start_ns) & (starts_ns < e.end_ns))[0]
        if idx.size:
            lo = max(0, idx[0] - margin)
            hi = min(n, idx[-1] + margin + 1)
            mask[lo:hi] = False
    return mask


# The baseline is the windows outside every percentile's episodes, unless that leaves
# fewer than this many (a noisy host makes P50 and P95 episodes everywhere; a median or a
# compute fit on a handful of windows is noise): then the windows outside the attributed
# percentile's episodes.
MIN_BASELINE_WINDOWS = 10


def baseline_for(
    n: int,
    episodes: Sequence[SpikeEpisode],
    all_episodes: Sequence[SpikeEpisode],
    starts_ns: np.ndarray,
    loaded: np.ndarray | None = None,
    latency: np.ndarray | None = None,
) -> np.ndarray:
    """The windows causes and latency parts are compared against (attributed `episodes` first).

    Only `loaded` windows (with completions) count: the empty windows before the
    first request and after the last say nothing of a cause.
    """
    if loaded is None:
        loaded = np.ones(n, dtype=bool)
    baseline = baseline_mask(n, all_episodes, starts_ns) & loaded
    if baseline.sum() < MIN_BASELINE_WINDOWS:
        baseline = baseline_mask(n, episodes, starts_ns) & loaded
    if baseline.sum() < 3 or (latency is not None and baseline.sum() < MIN_BASELINE_WINDOWS):
        # A handful of windows has no spread to judge a signal by (`noise.above_spread`
        # needs 3, a median of 3 is one window): the quietest third, where it is more.
        # Seen (seed 44, session 18): data movement held 45 % of every period, and its
        # episodes' margins left 3 of 65 windows, one without request samples.
        quiet = quietest_windows(loaded, latency)
        if quiet.sum() > baseline.sum():
            baseline = quiet
    return baseline


# Where the episodes and their margins leave no baseline, the loaded windows with the
# lowest latency, this share of them, stand in for it.
QUIET_SHARE = 1 / 3


def quietest_windows(loaded: np.ndarray, latency: np.ndarray | None) -> np.ndarray:
    """The loaded windows whose latency (the P99 per window) is lowest.

    Long windows at a low rate and a fault held for half of every period put every
    window in an episode or its margin. Comparing against all loaded windows then
    compares the spikes with themselves, and no cause stands out; the quietest
    windows are the run without its spikes.
    """
    if loaded.sum() < 3:
        return np.ones(len(loaded), dtype=bool)
    if latency is None:
        return loaded.copy()
    v = np.where(loaded, np.asarray(latency, dtype=float), np.nan)
    known = ~np.isnan(v)
    if known.sum() < 3:
        return loaded.copy()
    cut = np.sort(v[known])[max(3, math.ceil(QUIET_SHARE * known.sum())) - 1]
    return known & (v <= cut)


def quiet_by(sig: Signals) -> np.ndarray:
    """The latency the quietest windows are read from: the attributed percentile's series."""
    return sig.primary_ms if sig.primary_ms is not None else sig.p99_ms


def loaded_windows(sig: Signals) -> np.ndarray:
    """Windows in which requests completed."""
    return np.nan_to_num(sig.completed, nan=0.0) > 0


def _episode_windows(e: SpikeEpisode, starts_ns: np.ndarray, lead: int) -> np.ndarray:
    idx = np.nonzero((starts_ns >= e.start_ns) & (starts_ns < e.end_ns))[0]
    mask = np.zeros(len(starts_ns), dtype=bool)
    if idx.size:
        mask[max(0, idx[0] - lead) : idx[-1] + 1] = True
    return mask


def signals_for(cause: Cause, sig: Signals) -> Signals | str:
    """The signals `cause` reads (its side's telemetry, `Cause.side`), or why it is not assessable.

    Not assessable where the series it needs (`server_series`, `client_series`) were
    recorded, each of them on the other side: a load machine's cgroup never stands in
    for the server's. A series not recorded at all is left to the cause's own reason.
    """
    needs = cause.client_series or cause.server_series
    recorded = [n for n in needs if sig.sources.get(n.partition(".")[0]) is not None]
    if recorded and not any(sampled_at(sig.places, n, cause.side) for n in recorded):
        return NO_CLIENT_TELEMETRY if cause.client_series else NO_SERVER_TELEMETRY
    return sig.seen_from(cause.side)


def signature_of(cause: Cause, sig: Signals, baseline: np.ndarray) -> Signature:
    """`cause`'s signature on the telemetry of its side (`signals_for`)."""
    seen = signals_for(cause, sig)
    if isinstance(seen, str):
        return na(cause.id, seen)
    return cause.signature(seen, baseline)


@dataclass
class Attribution:
    findings: list[Finding]
    checks: list[CauseCheck]
    causes_by_episode: dict[str, list[str]]


@dataclass
class _EpisodeHits:
    """Where a signature holds in the tested episodes: what the shared statistics count."""

    explained: list[str]  # the episodes it holds in, by id
    explained_windows: list[np.ndarray]  # each explained episode's own windows
    lags: list[float]  # per explained episode: first window it holds - episode start, s
    union: np.ndarray  # every tested episode's windows, with the lead (the evidence's)
    proper: np.ndarray  # the episodes' own windows (the metric's effect size)
    tested: int  # episodes with any data to judge by
    # Per tested episode: its first window and its chances (known windows, lead included),
    # the shape of the stretches it is compared with (`_stretch_null`).
    firsts: list[int] = field(default_factory=list)
    chances: list[int] = field(default_factory=list)


def _episode_hits(
    holds: np.ndarray,
    episodes: Sequence[SpikeEpisode],
    sig: Signals,
    windows: Sequence[np.ndarray | None] | None,
) -> _EpisodeHits:
    """Which episodes the signature holds in (a lead counts: a cause can come first), and when."""
    hits = _EpisodeHits([], [], [], np.zeros(sig.n, dtype=bool), np.zeros(sig.n, dtype=bool), 0)
    for i, e in enumerate(episodes):
        only = windows[i] if windows is not None else None
        if only is None:
            win = _episode_windows(e, sig.starts_ns, LEAD_WINDOWS)
            hits.proper |= _episode_windows(e, sig.starts_ns, 0)
        else:
            win = only
            hits.proper |= win
        hits.union |= win
        h = holds[win]
        if np.all(np.isnan(h)):
            continue
        hits.tested += 1
        hits.firsts.append(int(np.argmax(win)))
        hits.chances.append(int(np.sum(~np.isnan(h))))
        if np.nansum(h) > 0:
            hits.explained.append(e.episode_id)
            hits.explained_windows.append(
                win if only is not None else _episode_windows(e, sig.starts_ns, 0)
            )
            first = int(np.nonzero(np.nan_to_num(holds, nan=0) * win)[0][0])
            hits.lags.append((int(sig.starts_ns[first]) - e.start_ns) / 1e9)
    return hits


# The stretches an episode is compared with: the tested episodes shifted together around
# the baseline, at up to this many evenly spaced shifts (a day of 1 s windows stays fast).
NULL_SHIFTS = 200


@dataclass(frozen=True)
class _StretchNull:
    """How often a signature holds somewhere in stretches of the baseline shaped like the episodes."""

    rate: float  # share of the shifted stretches where it holds somewhere
    p_value: float  # the binomial tail at `rate`, or the shifts' share as many where larger
    compared: str = STRETCHES  # what the episodes were compared with, for the reason


def _stretch_null(holds: np.ndarray, base: np.ndarray, hits: _EpisodeHits) -> _StretchNull:
    """The episodes' chance of holding the signature by chance, from stretches of their shape.

    An episode of k windows and its lead has k + LEAD_WINDOWS chances, a single
    baseline window one: a signature in 10 % of windows at random is in 65 % of
    10-window stretches, and against single windows it read "moderate" (issue 51).
    The baseline windows (`base`, known ones only) are read as one circular
    sequence, so a periodic cause's own episodes and their margins never count
    against it; the tested episodes move along it together, keeping their number of
    chances and their spacing. The p-value is the binomial tail at that rate, or
    the share of shifts that explain at least as many episodes as the real ones
    where that is larger (a signature that comes in long spells holds in many
    episodes at once, and is not counted as independent episodes).
    """
    seq = np.nan_to_num(holds[base], nan=0.0) > 0
    m = seq.size
    if m == 0 or not hits.tested:
        return _StretchNull(float(seq.mean()) if m else 0.0, 1.0)
    if m < sum(hits.chances):
        return _window_null(seq, hits)
    before = np.cumsum(base) - base  # baseline windows before each window
    at = before[np.array(hits.firsts)]
    chances = np.clip(np.array(hits.chances), 1, m)
    shifts = np.unique(np.linspace(0, m, min(NULL_SHIFTS, m), endpoint=False).astype(int))
    start = (at[None, :] + shifts[:, None]) % m
    held = np.concatenate([[0], np.cumsum(np.concatenate([seq, seq]))])
    hit = held[start + chances] > held[start]  # per shift, per episode
    rate = float(hit.mean())
    explained = len(hits.explained)
    as_many = float(np.mean(hit.sum(axis=1) >= explained))
    tail = float(stats.binom.sf(explained - 1, hits.tested, rate))
    return _StretchNull(rate, max(tail, as_many))


# What a baseline too short for the episodes' stretches is compared by.
SINGLE_WINDOWS = "baseline windows (too few for stretches of the episodes' length)"


def _window_null(seq: np.ndarray, hits: _EpisodeHits) -> _StretchNull:
    """Single baseline windows, where the baseline cannot hold the episodes' stretches apart.

    A short run whose spikes fill most of it (4 episodes of 16 windows in 34 s) leaves
    a few baseline windows: stretches of the episodes' length shifted over them overlap
    almost wholly and say nothing (a load machine's quota, in 4/4 episodes with its
    throttling at 50 % against 0 %, read as weak, session 22). Single windows favour
    the cause (an episode has more chances than one window), which is why moderate and
    strong also need the cause's own metric to move (`confidence`).
    """
    explained = len(hits.explained)
    held = int(seq.sum())
    _, p = stats.fisher_exact(
        [[explained, hits.tested - explained], [held, seq.size - held]], alternative="greater"
    )
    return _StretchNull(float(seq.mean()), float(p), SINGLE_WINDOWS)


def _run_level_outcome(
    signature: Signature, holds: np.ndarray, hits: _EpisodeHits, total: int, base_rate: float
) -> tuple[Finding | None, CauseCheck, list[str]] | None:
    """A run-level cause's verdict by its share of all windows; None: judge it by the episodes."""
    cause = signature.cause
    valid = ~np.isnan(holds)
    share = float(np.nanmean(holds[valid])) if valid.any() else 0.0
    if share >= 0.5:
        level = (
            cap_confidence("strong" if share >= 0.8 else "moderate", signature.max_confidence)
            or "weak"
        )
        ev = signature.evidence(hits.union & valid, valid) if signature.evidence else []
        # A standing condition: it does not explain episodes, it is there all along.
        finding = _finding(
            signature,
            level,
            [],
            total,
            share,
            base_rate,
            None,
            None,
            None,
            None,
            ev,
            run_share=share,
        )
        return (
            finding,
            CauseCheck(cause, "found", f"holds in {share:.0%} of windows"),
            hits.explained,
        )
    if not hits.tested or signature.standing:
        return None, CauseCheck(cause, "not_found", f"holds in {share:.0%} of windows"), []
    return None


def _rated(
    signature: Signature,
    hits: _EpisodeHits,
    episodes: Sequence[SpikeEpisode],
    coincidence: float,
    p_value: float,
    delta: float | None,
    lift: float | None,
) -> str | None:
    """The confidence the statistics support, lowered for a lone coincidence or mild spikes."""
    explained = hits.explained
    found = confidence(coincidence, p_value, delta, lift) if explained else None
    found = cap_confidence(found, signature.max_confidence)
    if found is not None and len(explained) < MIN_EPISODES_AS_RATED:
        # A residual's signature is the slowdown itself: one episode of it is one spike,
        # not a pattern (a clean run's single noisy window read "moderate"): weak.
        lower = CONFIDENCES.index(found) + 1
        found = (
            "weak"
            if BY_ID[signature.cause].kind == UNEXPLAINED
            else CONFIDENCES[min(lower, len(CONFIDENCES) - 1)]
        )
    if found is not None and found != "weak" and not _clear_effect(signature, delta):
        ratios = [e.peak_ratio for e in episodes if e.episode_id in explained]
        if float(np.median(ratios)) < SPIKE_MIN_PEAK_RATIO:
            found = "weak"
    return found


def score(
    signature: Signature,
    episodes: Sequence[SpikeEpisode],
    sig: Signals,
    baseline: np.ndarray,
    windows: Sequence[np.ndarray | None] | None = None,
    scope: str = "",
) -> tuple[Finding | None, CauseCheck, list[str]]:
    """Coincidence, baseline rate, lift, p (`_stretch_null`), Cliff's delta and lag for one cause.

    `windows`: per episode, the windows to test instead of the episode and its lead
    (the part of an explained episode that its causes leave over, `remainders`);
    None for an episode tested whole. `scope` says which episodes those are where they
    are not all of them (" no other cause explains").
    """
    cause = signature.cause
    if signature.holds is None:
        return None, CauseCheck(cause, "not_assessable", signature.not_assessable or ""), []
    holds = signature.holds
    hits = _episode_hits(holds, episodes, sig, windows)
    explained, tested = hits.explained, hits.tested
    base = baseline & ~np.isnan(holds)
    null = _stretch_null(holds, base, hits)
    base_rate = null.rate
    if signature.run_level:
        outcome = _run_level_outcome(signature, holds, hits, len(episodes), base_rate)
        if outcome is not None:
            return outcome
    if not episodes:
        return None, CauseCheck(cause, "not_found", "no spike episodes to explain"), []
    if not tested:
        return None, CauseCheck(cause, "not_assessable", "no data during the episodes"), []
    coincidence = len(explained) / tested
    lift = coincidence / base_rate if base_rate > 0 else None
    p_value = null.p_value
    delta = None
    if signature.metric is not None:
        delta = cliffs_delta(signature.metric[hits.proper], signature.metric[base])
    found = _rated(signature, hits, episodes, coincidence, float(p_value), delta, lift)
    reason = f"signature in {len(explained)}/{tested} episodes{scope}, vs {base_rate:.0%} of {null.compared}"
    if found is None:
        return None, CauseCheck(cause, "not_found", reason), []
    ev = signature.evidence(hits.union, base) if signature.evidence else []
    if signature.per_episode is not None:
        ev += signature.per_episode(hits.explained_windows, base)
    lag = float(np.median(hits.lags)) if hits.lags else None
    finding = _finding(
        signature,
        found,
        explained,
        tested,
        coincidence,
        base_rate,
        lift,
        float(p_value),
        delta,
        lag,
        ev,
        scope=scope,
    )
    return finding, CauseCheck(cause, "found", reason), explained


def _clear_effect(signature: Signature, delta: float | None) -> bool:
    """The cause's own metric moved clearly in the spikes (a specific cause, not the residual)."""
    if BY_ID[signature.cause].kind == UNEXPLAINED:
        return False  # its metric is the slowdown itself
    return delta is not None and abs(delta) >= EFFECT_MOVED


def cap_confidence(level: str | None, cap: str | None) -> str | None:
    """`level`, lowered to `cap` when the data allow no more (e.g. a capacity unknown)."""
    if level is None or cap is None:
        return level
    return level if _RANK[level] >= _RANK[cap] else cap


def _finding(
    signature: Signature,
    level: str,
    explained: list[str],
    total: int,
    coincidence: float,
    base_rate: float,
    lift: float | None,
    p_value: float | None,
    delta: float | None,
    lag: float | None,
    evidence: list[Evidence],
    run_share: float | None = None,
    scope: str = "",
) -> Finding:
    cause = BY_ID[signature.cause]
    eps = f"{len(explained)}/{total} spike episodes{scope}" if total else "no spike episodes"
    summary = cause.summary(evidence, eps, run_share)
    if signature.notes:
        summary += " " + " ".join(f"Note: {n}." for n in signature.notes)
    return Finding(
        cause=cause.id,
        title=cause.title,
        confidence=level,
        episodes=tuple(explained),
        episodes_total=total,
        coincidence=coincidence,
        baseline_rate=base_rate,
        lift=lift,
        p_value=p_value,
        cliffs_delta=delta,
        lag_s=lag,
        evidence=tuple(evidence),
        summary=summary,
        action=cause.action,
    )


_RANK = {"strong": 0, "moderate": 1, "weak": 2}


def finding_order(f: Finding) -> tuple[bool, bool, int, int, float]:
    """Leads last: a weak finding never outranks a moderate or strong one (it is what the
    headline names, unless `spikes_lead`). Above weak, causes of the spikes before
    standing conditions."""
    return (
        f.confidence == "weak",
        not f.episodes,
        _RANK[f.confidence],
        -len(f.episodes),
        -f.coincidence,
    )


def spikes_lead(findings: Sequence[Finding]) -> bool:
    """Whether a summary speaks of the spike episodes before the first finding (ranked).

    A standing condition has no episodes of its own (`_run_level_outcome`): it is
    there all run long. Where the run had no spike episodes (`episodes_total` 0) it
    is what raised every request (a batching window) and leads. Where episodes came
    and went it does not say why they came: if no finding explains them above weak,
    the episodes lead, left open, and the standing condition follows (a standing 2 ms
    batching window headlined a run whose P99 reached 227 ms, issue 51).
    """
    if not findings:
        return False
    top = findings[0]
    explained = any(f.episodes and _RANK[f.confidence] < _RANK["weak"] for f in findings)
    return (
        not top.episodes
        and top.episodes_total > 0
        and BY_ID[top.cause].kind != ERRORS
        and not explained
    )


# A residual ranks after a specific cause whose signature holds in at least this share of
# its episodes (`rank_findings`).
RESIDUAL_SHARED_SHARE = 0.5


def rank_findings(findings: Sequence[Finding]) -> list[Finding]:
    """The findings in the order a reader sees them: explained before unexplained.

    An `unexplained_*` finding is the residual. Where a specific cause's signature
    holds in some of the same spike episodes, the residual is rated no higher than
    that cause and listed after it: a quota that throttled 67 % of periods in the
    spikes explains a compute slowdown in them, at whatever confidence its own
    statistics reach. A residual mostly over other episodes keeps its place: a cause
    whose signature holds in under RESIDUAL_SHARED_SHARE of the residual's episodes does
    not explain where its time went (a slow proxy's 7 episodes, a noisy run delay in 3
    of them, named weak at p = 0.16, came first; seen while tuning, session 17, s43).

    Error findings (failed requests) rank by their own confidence like any finding:
    at the same level before the latency findings, the larger share of the run's
    requests first. One that is a cause's consequence (`Finding.consequence_of`)
    comes right after that cause, and so does a residual over mostly the episodes of
    a cause that lists it among its consequences (a stall's drain holds back the load
    generator on its host: "Load generator fell behind" is what the stall did).
    """
    specific = [f for f in findings if BY_ID[f.cause].kind != UNEXPLAINED and f.episodes]
    ranked: list[Finding] = []
    after: dict[str, set[str]] = {}  # residual -> the causes it is listed after
    for f in findings:
        mine = set(f.episodes)
        over = [
            s for s in specific if len(set(s.episodes) & mine) >= RESIDUAL_SHARED_SHARE * len(mine)
        ]
        if BY_ID[f.cause].kind != UNEXPLAINED or not over:
            ranked.append(f)
            continue
        floor = max(_RANK[s.confidence] for s in over)  # the least confident of them
        level = CONFIDENCES[max(_RANK[f.confidence], floor)]
        made_by = next((s for s in over if f.cause in BY_ID[s.cause].consequences), None)
        if made_by is not None:  # what that cause does (`Cause.consequences`): right after it
            note = f" A consequence of {made_by.title.lower()} ({made_by.cause}), in its episodes."
            f = replace(f, confidence=level, consequence_of=made_by.cause)
            ranked.append(replace(f, summary=f.summary + note))
            continue
        causes = ", ".join(sorted({s.title for s in over}))
        note = f" Ranked after {causes}, whose signature holds in the same spike episodes."
        ranked.append(replace(f, confidence=level, summary=f.summary + note))
        after[f.cause] = {s.cause for s in over}

    present = {f.cause for f in ranked}
    own = sorted((f for f in ranked if f.consequence_of not in present), key=_rank_key)
    # A residual goes right after the last of the causes it is ranked after, and keeps
    # its place among the rest (seed 48: a compute residual in 4/4 episodes fell behind a
    # queue residual in 1/1 of the same level, only for being ranked after the stall).
    for cause, over_causes in after.items():
        at = next(i for i, x in enumerate(own) if x.cause == cause)
        last = max((i for i, x in enumerate(own) if x.cause in over_causes), default=-1)
        if at < last:
            own.insert(last, own.pop(at))
    following = [f for f in ranked if f.consequence_of in present]
    out: list[Finding] = []
    for f in own:
        out.append(f)
        out += sorted(
            (c for c in following if c.consequence_of == f.cause),
            key=lambda c: -_failed_share(c),
        )
    return out


def _failed_share(f: Finding) -> float:
    """An error finding's share of the run's requests failed (0 for a latency finding)."""
    return next((e.value or 0.0 for e in f.evidence if e.name == "run_failed_pct"), 0.0)


def _rank_key(f: Finding) -> tuple[bool, bool, int, bool, float, int, float]:
    error = BY_ID[f.cause].kind == ERRORS
    weak, standing, rank, n, coincidence = finding_order(f)
    # Failed requests before slow ones at the same level; they explain no spike episodes
    # and are no standing condition.
    return (
        weak,
        standing and not error,
        rank,
        not error,
        -_failed_share(f),
        n,
        coincidence,
    )


# Failed requests of an error class are a found cause's consequence where they fall in its
# windows (one window either side: the error counts are on whole seconds, and a timeout
# fires its timeout after the request was sent) more than those windows' share of the run
# makes likely by chance: at least CONSEQUENCE_SHARE of the failures inside, and the
# seconds with failures inside them at a binomial tail of at most CONSEQUENCE_P against
# the windows' coverage. Seconds, not requests, are the trials: failures come in bursts
# (a full queue refuses hundreds in a second), and one burst that happens to land in the
# windows is one coincidence, not hundreds.
CONSEQUENCE_SHARE = 0.5
CONSEQUENCE_P = 0.01


@dataclass(frozen=True)
class _Overlap:
    """How an error class's failures fall in a cause's windows."""

    share: float  # of the failed requests, inside the windows
    coverage: float  # of the run's windows, the cause's
    p_value: float  # the seconds with failures inside, against `coverage` by chance


def _overlap(failed: np.ndarray, holds: np.ndarray) -> _Overlap:
    """Failures per window against the windows where a cause holds (`CONSEQUENCE_P`)."""
    near = reach(holds)
    near[:-1] |= near[1:]  # and the window before
    total = float(np.nansum(failed))
    share = float(np.nansum(failed[near])) / total if total > 0 else 0.0
    coverage = float(near.mean()) if near.size else 0.0
    failing = np.nan_to_num(failed, nan=0.0) > 0
    inside = int(np.sum(failing & near))
    p_value = float(stats.binom.sf(inside - 1, int(failing.sum()), coverage)) if inside else 1.0
    return _Overlap(share, coverage, p_value)


def consequences(
    failed: Sequence[Finding],
    findings: Sequence[Finding],
    holds: dict[str, np.ndarray],
    sig: Signals,
    baseline: np.ndarray,
) -> list[Finding]:
    """`failed` with each error finding that a found cause's windows hold marked as its consequence.

    A cause lists the error classes it can make (`Cause.consequences`: a stall longer
    than the client's timeout times requests out). Where a class's failed requests
    fall in the windows where that cause's signature holds beyond what the windows'
    coverage of the run explains (CONSEQUENCE_SHARE, CONSEQUENCE_P), the error finding
    names it, and `rank_findings` lists it right after the cause: the stall is the
    finding, the timeouts what it did. Only a cause rated moderate or above makes
    consequences (a weak lead is not yet a cause), and of several the one holding the
    larger share of the failures is named, not the first listed.
    """
    # Rated as the reader sees them: a residual ranked after a weak cause is weak too.
    ranked = [f for f in rank_findings(findings) if _RANK[f.confidence] <= _RANK["moderate"]]
    out = []
    for f in failed:
        per_window = signature_of(BY_ID[f.cause], sig, baseline).metric
        candidates = [
            (_overlap(per_window, holds[cause.cause]), cause)
            for cause in ranked
            if per_window is not None
            and f.cause in BY_ID[cause.cause].consequences
            and cause.cause in holds
        ]
        linked = [
            (o, cause)
            for o, cause in candidates
            if o.share >= CONSEQUENCE_SHARE and o.p_value <= CONSEQUENCE_P
        ]
        if linked:
            o, cause = max(linked, key=lambda c: (c[0].share, -c[0].coverage))
            note = (
                f" A consequence of {cause.title.lower()} ({cause.cause}): {o.share:.0%} of these "
                f"failures fell in its windows, which cover {o.coverage:.0%} of the run."
            )
            f = replace(f, consequence_of=cause.cause, summary=f.summary + note)
        out.append(f)
    return out


# A cause explains the windows where its signature holds and this many after them (the
# backlog a stop or a burst leaves drains there).
REACH_AFTER_WINDOWS = 1


def unexplained_episodes(
    episodes: Sequence[SpikeEpisode], findings: Sequence[Finding]
) -> list[SpikeEpisode]:
    """The episodes no finding at moderate or above explains."""
    explained = {
        i
        for f in findings
        if f.episodes and _RANK[f.confidence] <= _RANK["moderate"]
        for i in f.episodes
    }
    return [e for e in episodes if e.episode_id not in explained]


def reach(holds: np.ndarray) -> np.ndarray:
    """The windows a found cause explains: where its signature holds, and just after."""
    on = np.nan_to_num(holds, nan=0.0) > 0
    out = on.copy()
    for k in range(1, REACH_AFTER_WINDOWS + 1):
        out[k:] |= on[:-k]
    return out


def remainders(
    episodes: Sequence[SpikeEpisode], starts_ns: np.ndarray, explained_windows: np.ndarray
) -> list[tuple[SpikeEpisode, np.ndarray]]:
    """Each explained episode's windows that no found cause reaches, where there are any.

    One episode can hold two faults: a stall's spike and a slowdown's plateau that
    the hysteresis joins to it. The stall explains its own windows; the rest of the
    episode is still tested for the residual (without a lead, which would reach
    back into the stall's windows), so the second fault is named after the first.
    """
    out = []
    for e in episodes:
        rest = _episode_windows(e, starts_ns, 0) & ~explained_windows
        if rest.any():
            out.append((e, rest))
    return out


@dataclass
class _Passes:
    """What the passes over the causes have found so far; each later pass reads and adds to it."""

    sig: Signals
    baseline: np.ndarray
    all_episodes: Sequence[SpikeEpisode]
    findings: list[Finding] = field(default_factory=list)
    checks: list[CauseCheck] = field(default_factory=list)
    causes_by_episode: dict[str, list[str]] = field(default_factory=dict)
    signatures: dict[str, Signature] = field(default_factory=dict)
    # where each found episode cause's signature holds
    found_holds: dict[str, np.ndarray] = field(default_factory=dict)
    reached: np.ndarray = field(init=False)  # windows the causes found at moderate+ explain

    def __post_init__(self) -> None:
        self.reached = np.zeros(self.sig.n, dtype=bool)

    def test(
        self,
        cause_list: Sequence[Cause],
        tested: Sequence[SpikeEpisode],
        cap: str | None,
        windows: Sequence[np.ndarray | None] | None = None,
        scope: str = "",
    ) -> None:
        """Score each cause on `tested` (capped at `cap`), keeping its check and any finding."""
        for cause in cause_list:
            signature = self.signatures.get(cause.id) or signature_of(
                cause, self.sig, self.baseline
            )
            self.signatures[cause.id] = signature
            if cause.kind == STANDING:  # never a spike cause, whatever its share
                signature.run_level = signature.standing = True
            if cap is not None:
                signature = replace(
                    signature,
                    max_confidence=cap_confidence(signature.max_confidence or cap, cap),
                )
            finding, check, _ = score(signature, tested, self.sig, self.baseline, windows, scope)
            self._keep_check(check)
            if finding is None:
                continue
            self.findings.append(finding)
            if signature.holds is None or signature.run_level:
                continue
            self._mark_windows(signature.cause, signature.holds, finding)

    def _keep_check(self, check: CauseCheck) -> None:
        """One check per cause: a later pass replaces the first only where it found the cause."""
        earlier = [i for i, c in enumerate(self.checks) if c.cause == check.cause]
        if not earlier:
            self.checks.append(check)
        elif check.status == "found":  # found on what the other causes leave over
            self.checks[earlier[0]] = check

    def _mark_windows(self, cause: str, holds: np.ndarray, finding: Finding) -> None:
        """Record where a found episode cause holds: what it explains and which episodes it tags."""
        self.found_holds[cause] = holds
        if finding.episodes and _RANK[finding.confidence] <= _RANK["moderate"]:
            self.reached[:] |= reach(holds)
        for e in self.all_episodes:
            win = _episode_windows(e, self.sig.starts_ns, LEAD_WINDOWS)
            if np.nansum(holds[win]) > 0:
                self.causes_by_episode.setdefault(e.episode_id, []).append(cause)


def _test_residuals(
    passes: _Passes,
    fallback: Sequence[Cause],
    episodes: Sequence[SpikeEpisode],
    left: Sequence[SpikeEpisode],
) -> tuple[str | None, list[Cause]]:
    """Test the residual causes where found ones leave time over: (the part that grew, tried)."""
    sig, baseline = passes.sig, passes.baseline
    explained = {e.episode_id for e in episodes} - {e.episode_id for e in left}
    parts = components(sig)
    medians = baseline_medians(parts, baseline)
    grew = Counter(
        growth(parts, episode_mask(e, sig.starts_ns), baseline, medians)[0] for e in left
    )
    # The part of the latency that grew in most of the episodes left over names the finding.
    component = grew.most_common(1)[0][0] if grew else None
    named = [c for c in fallback if c.component == component]
    tested: list[SpikeEpisode] = list(left)
    windows: list[np.ndarray | None] = [None] * len(left)
    # What the found causes leave over in their own episodes. The backlog a stop or a
    # burst leaves shows as queue and client time, so there only a compute slowdown (at
    # the same batch size, which no backlog inflates) is a second fault.
    rest = remainders(
        [e for e in episodes if e.episode_id in explained], sig.starts_ns, passes.reached
    )
    compute = [c for c in fallback if c.component == "server_compute"]
    if rest and compute:
        if named == compute:
            tested += [e for e, _ in rest]
            windows += [w for _, w in rest]
        else:
            passes.test(compute, [e for e, _ in rest], "weak", [w for _, w in rest])
    if named and tested:
        # Most episodes explained: what is left over is at most a weak lead.
        passes.test(named, tested, "weak" if 2 * len(left) < len(episodes) else None, windows)
    return component, named + (compute if rest else [])


def attribute(
    sig: Signals,
    episodes: Sequence[SpikeEpisode],
    all_episodes: Sequence[SpikeEpisode],
    causes: Sequence[Cause] = REGISTRY,
) -> Attribution:
    """Test every cause against `episodes`; also tag `all_episodes` whose windows carry a found cause."""
    baseline = baseline_for(
        sig.n, episodes, all_episodes, sig.starts_ns, loaded_windows(sig), quiet_by(sig)
    )
    passes = _Passes(sig, baseline, all_episodes)
    specific = [c for c in causes if c.kind not in (UNEXPLAINED, ERRORS)]
    passes.test(specific, episodes, None)
    left = unexplained_episodes(episodes, passes.findings)
    if 0 < len(left) < len(episodes):
        # A cause masked by another: its signature can hold in few of all the episodes
        # because a stronger cause took the rest (a short stall beside a quota that
        # throttles most of the run: 2 of 7). Tested again on the episodes no cause
        # explains, it is rated on what it could explain; at most a weak lead where
        # those are the minority, as the residual is.
        found = {f.cause for f in passes.findings}
        again = [  # assessed window by window, not a run-long condition
            c
            for c in specific
            if c.id not in found
            and passes.signatures[c.id].holds is not None
            and not passes.signatures[c.id].run_level
        ]
        cap = "weak" if 2 * len(left) < len(episodes) else None
        passes.test(again, left, cap, scope=" no other cause explains")
        left = unexplained_episodes(episodes, passes.findings)
    fallback = [c for c in causes if c.kind == UNEXPLAINED]
    component, tried = _test_residuals(passes, fallback, episodes, left)
    if not left:
        why = "every spike episode is explained" if episodes else "no spike episodes to explain"
    else:
        why = f"the part that grew in the unexplained episodes is {component or 'unknown'}"
    checks = passes.checks + [
        CauseCheck(c.id, "not_found", why) for c in fallback if c not in tried
    ]
    # Failed requests (an outage, rejections, timeouts), ranked with the latency findings by
    # their own evidence; those a found stall made are listed as its consequence.
    failed, failed_checks = error_findings(sig, causes)
    failed = consequences(failed, passes.findings, passes.found_holds, sig, baseline)
    return Attribution(
        rank_findings([*passes.findings, *failed]), checks + failed_checks, passes.causes_by_episode
    )


def error_findings(sig: Signals, causes: Sequence[Cause]) -> tuple[list[Finding], list[CauseCheck]]:
    """The findings of every error cause (kind ERRORS) in `causes`, in their order; and their checks.

    Each cause's `find` counts the run's failed requests and rates them by the shared
    confidence (loadkit/analysis/causes/request_errors.py); `rank_findings` orders them.
    """
    findings: list[Finding] = []
    checks: list[CauseCheck] = []
    for cause in causes:
        if cause.kind != ERRORS or cause.find is None:
            continue
        if sig.error_counts is None:
            checks.append(CauseCheck(cause.id, "not_assessable", "no load counters (load/)"))
            continue
        finding = cause.find(sig.error_counts, sig.max_queue_size, sig.timeout_s)
        if finding is None:
            checks.append(CauseCheck(cause.id, "not_found", "no error episodes of this kind"))
            continue
        findings.append(finding)
        checks.append(CauseCheck(cause.id, "found", error_spans(list(finding.evidence))))
    return findings, checks


__all__ = [
    "ACTIONS",
    "TITLES",
    "Attribution",
    "Evidence",
    "Signals",
    "Signature",
    "attribute",
    "baseline_for",
    "baseline_mask",
    "cliffs_delta",
    "confidence",
    "consequences",
    "error_findings",
    "finding_order",
    "quiet_by",
    "quietest_windows",
    "rank_findings",
    "reach",
    "remainders",
    "score",
    "signals_for",
    "signature_of",
    "spikes_lead",
]
