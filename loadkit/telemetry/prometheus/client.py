"""A Prometheus HTTP API client: `query_range` in chunks, with basic auth or a bearer token.

Prometheus refuses a range query of more than 11,000 points per series, so a
long window is asked for in chunks of at most `MAX_POINTS` steps and the
pieces joined. An unreachable or refusing server is a `TargetError` (exit 3)
in one line; the token is only ever put in a request header. Each answer is read
within `DEADLINE_S` and at most `MAX_RESPONSE_BYTES` (`loadkit.telemetry.http.read_limited`):
one over either is a `TargetError` that says which.
"""

from __future__ import annotations

import base64
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadkit.errors import TargetError, UsageError
from loadkit.telemetry.http import ResponseLimitError, monotonic, read_limited
from loadkit.telemetry.prometheus.families import PromSeries

NS = 1_000_000_000
MAX_POINTS = 10_000  # under Prometheus's 11,000 points per series
TIMEOUT_S = 30.0  # the most one read waits with nothing arriving
# The most one answer takes in all: a long range on a busy Prometheus, never one that drips.
DEADLINE_S = 120.0
# The most one answer holds: a chunk is at most 10,000 points (~30 bytes each in JSON) per
# series, so this holds ~400 series of a full chunk, more than any selector here asks for.
MAX_RESPONSE_BYTES = 128 * 1024 * 1024

Opener = Callable[[urllib.request.Request, float], Any]


def _default_open(request: urllib.request.Request, timeout: float) -> Any:
    return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 (http(s) only, checked)


@dataclass
class PrometheusClient:
    """`query_range` against `base_url` (e.g. http://prometheus:9090)."""

    base_url: str
    username: str | None = None
    password: str | None = None
    token: str | None = None
    timeout_s: float = TIMEOUT_S
    deadline_s: float = DEADLINE_S
    max_bytes: int = MAX_RESPONSE_BYTES
    opener: Opener = _default_open
    requests_made: int = 0

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlparse(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise UsageError(
                f"not a Prometheus URL: {self.base_url!r}",
                hint="give the server's base URL, e.g. http://prometheus:9090",
            )
        self.base_url = self.base_url.rstrip("/")

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        elif self.username is not None:
            pair = f"{self.username}:{self.password or ''}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        return headers

    def _get(self, path: str, params: dict[str, str]) -> Any:
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers=self._headers(), method="GET")
        self.requests_made += 1
        deadline = monotonic() + self.deadline_s
        try:
            with self.opener(request, self.timeout_s) as response:
                body = read_limited(
                    response,
                    what=f"Prometheus at {self.base_url}",
                    max_bytes=self.max_bytes,
                    deadline=deadline,
                    within_s=self.deadline_s,
                )
        except ResponseLimitError as exc:
            raise TargetError(
                str(exc),
                hint="ask for less at a time: a shorter --window, a larger --step, a narrower --selector",
            ) from None
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise TargetError(
                    f"Prometheus at {self.base_url} refused the request (HTTP {exc.code})",
                    hint="give --prom-user/--prom-password or --prom-token-file",
                ) from None
            detail = _error_text(exc)
            if exc.code in (400, 422):
                raise UsageError(
                    f"Prometheus rejected the query: {detail}",
                    hint='check --selector: label matchers such as job="triton"',
                ) from None
            raise TargetError(
                f"Prometheus at {self.base_url} answered HTTP {exc.code}: {detail}"
            ) from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TargetError(
                f"cannot reach Prometheus at {self.base_url}: {reason}",
                hint="check the URL and that this machine can reach it",
            ) from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise TargetError(
                f"{self.base_url} did not answer JSON: is it a Prometheus server?"
            ) from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise TargetError(
                f"Prometheus query failed: {doc.get('error') if isinstance(doc, dict) else doc}"
            )
        return doc.get("data")

    def query_range(
        self, query: str, start_ns: int, end_ns: int, step_s: float
    ) -> list[PromSeries]:
        """The matrix of `query` over [start, end] at `step_s`, asked in chunks, joined per series."""
        if step_s <= 0:
            raise UsageError(f"--step must be > 0 s, got {step_s:g}")
        step_ns = int(round(step_s * NS))
        chunks = chunks_for(start_ns, end_ns, step_s)
        joined: dict[tuple[tuple[str, str], ...], dict[int, float]] = {}
        for i in range(chunks):
            lo = start_ns + i * MAX_POINTS * step_ns
            hi = min(end_ns, lo + (MAX_POINTS - 1) * step_ns)
            data = self._get(
                "/api/v1/query_range",
                {
                    "query": query,
                    "start": f"{lo / NS:.3f}",
                    "end": f"{hi / NS:.3f}",
                    "step": f"{step_s:g}",
                },
            )
            if not isinstance(data, dict) or data.get("resultType") != "matrix":
                raise TargetError("Prometheus answered a query_range without a matrix")
            for series in data.get("result") or []:
                labels = tuple(sorted((series.get("metric") or {}).items()))
                target = joined.setdefault(labels, {})
                for t, value in series.get("values") or []:
                    try:
                        target[int(round(float(t) * 1000)) * 1_000_000] = float(value)
                    except (TypeError, ValueError):
                        continue
        return [
            PromSeries(dict(labels), sorted(points_by_t.items()))
            for labels, points_by_t in joined.items()
        ]

    def query_raw(self, selector: str, at_ns: int) -> list[PromSeries]:
        """A range selector (`up[1m]`) at one instant: the raw samples with their own times."""
        data = self._get("/api/v1/query", {"query": selector, "time": f"{at_ns / NS:.3f}"})
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            return []
        out = []
        for series in data.get("result") or []:
            points = [
                (int(round(float(t) * 1000)) * 1_000_000, float(v))
                for t, v in series.get("values") or []
            ]
            out.append(PromSeries(dict(series.get("metric") or {}), points))
        return out

    def build_info(self) -> dict[str, Any]:
        """The server's version (`/api/v1/status/buildinfo`); {} when it does not say."""
        try:
            data = self._get("/api/v1/status/buildinfo", {})
        except TargetError as exc:
            if "HTTP 404" in str(exc):
                return {}
            raise
        return data if isinstance(data, dict) else {}


def chunks_for(start_ns: int, end_ns: int, step_s: float) -> int:
    """How many range queries one series of [start, end] at `step_s` takes (`MAX_POINTS` each)."""
    points = int(math.floor((end_ns - start_ns) / int(round(step_s * NS)))) + 1
    return max(1, math.ceil(points / MAX_POINTS))


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        doc = json.loads(exc.read())
        return str(doc.get("error") or exc.reason)
    except (ValueError, OSError, AttributeError):
        return str(exc.reason)
