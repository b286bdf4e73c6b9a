"""`loadkit oncall`: Alertmanager's webhook receiver; a report waiting for whoever is paged."""

from __future__ import annotations

import argparse
import re
import socket
import sys
from pathlib import Path

from loadkit import lifeline
from loadkit.commands.import_prometheus import parse_duration
from loadkit.commands.options import token_from_file
from loadkit.errors import UsageError

HELP = "receive Alertmanager's alerts: analyze each alert's Prometheus window, report, notify"

DESCRIPTION = """\
A long-running receiver for Alertmanager's webhook (its JSON payload, version 4).
When an alert fires (every alert, or those with every --match LABEL=VALUE), it
imports the alert's window from Prometheus as `loadkit import --prometheus`
does: from the alert's startsAt minus --lookback (the baseline) to the last
firing notification plus --settle, the alert's job, instance, pod and
namespace labels narrowing the server's series and its model label the model.
It analyzes that window, writes the incident's report, and posts a short
summary (verdict, first finding with its confidence and action, period, the
report's URL) to each --notify receiver.

Alertmanager's groups are the incidents: one per groupKey. A re-notification
(the alert keeps firing) updates it and analyzes the longer window again; a
resolved notification closes it with one analysis of the whole episode.

Alertmanager's `webhook_configs` URL is http://HOST:PORT/alertmanager; the index
of incidents (newest first: time, alert, verdict, first cause, period) is at /,
and each incident is a directory under --out with its run directory (run/),
analysis.json, report.html and its state (incident.json, written atomically: a
restart loses no incident). docs/oncall.md has the Prometheus alert rule for
Triton's P99 and the Alertmanager route and receiver.

--notify URL posts the summary as JSON; --notify slack+URL posts a Slack
incoming webhook's message. A failed post is retried with backoff (1, 2, 4, 8 s)
and each failure logged; the delivery's state is kept in incident.json.

Bounded: one analysis at a time, each stopped at --deadline; at most
--max-pending incidents wait (a group already waiting is updated, not queued
again); the incident directories are kept under --disk-budget (the oldest
removed first, never one in progress or waiting). It binds 127.0.0.1 unless
--bind says otherwise; with --token-file, a notification must carry that token
(Alertmanager's `http_config: authorization`), else 401; an oversized payload
gets 413, a malformed one 400, each with one log line. SIGTERM (or Ctrl-C)
gives the analysis in progress 5 s to finish, else stops it and marks it
interrupted (done again at the next start), and exits: within the 10 s that
`docker stop` and the 30 s that Kubernetes wait.

examples:
  loadkit oncall --prometheus http://prometheus:9090 --out incidents
  loadkit oncall --prometheus http://127.0.0.1:9090 --out /var/lib/loadkit/incidents \\
      --bind 0.0.0.0 --port 9478 --public-url http://loadkit-oncall.internal:9478 \\
      --token-file /etc/loadkit/oncall.token --match severity=page \\
      --notify slack+https://hooks.slack.com/services/T000/B000/XXXX
"""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'2G', '500M', '1.5GiB', '4096' (bytes) -> bytes (powers of 1024)."""
    match = _SIZE.match(text)
    if not match or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 2G, 500M)")
    power = " KMGT".index((match.group(2) or " ").upper())
    return int(float(match.group(1)) * 1024**power)


def _match(text: str) -> tuple[str, str]:
    from loadkit.oncall.service import parse_match

    try:
        return parse_match(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _receiver(text: str) -> object:
    from loadkit.oncall.notify import parse_receiver

    try:
        return parse_receiver(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prometheus", metavar="URL", required=True, help="Prometheus base URL (http://host:9090)"
    )
    parser.add_argument(
        "--out", metavar="DIR", required=True, type=Path, help="where the incident directories go"
    )
    parser.add_argument(
        "--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=9478, help="port to listen on (default 9478; 0: any free one)"
    )
    parser.add_argument(
        "--notify",
        action="append",
        default=[],
        type=_receiver,
        metavar="[FORMAT+]URL",
        help="post each summary there: URL (JSON) or slack+URL (a Slack incoming webhook); repeatable",
    )
    parser.add_argument(
        "--match",
        action="append",
        default=[],
        type=_match,
        metavar="LABEL=VALUE",
        help="only alerts with this label value (repeatable: all must hold); default every alert",
    )
    parser.add_argument(
        "--token-file",
        metavar="F",
        help="require `Authorization: Bearer <token>` (the token in F) on notifications",
    )
    window = parser.add_argument_group("the alert's window")
    window.add_argument(
        "--lookback",
        type=parse_duration,
        default=900.0,
        help="before the alert's startsAt: the baseline (default 15m)",
    )
    window.add_argument(
        "--settle",
        type=parse_duration,
        default=60.0,
        help="after the last firing notification (or the alert's end), then analyze (default 1m)",
    )
    window.add_argument(
        "--max-window",
        type=parse_duration,
        default=6 * 3600.0,
        help="the longest window analyzed; a longer episode keeps its latest part (default 6h)",
    )
    window.add_argument(
        "--step", type=parse_duration, help="resolution (default: the scrape interval)"
    )
    window.add_argument(
        "--selector",
        action="append",
        default=[],
        metavar="[FAMILY=]{...}",
        help="label matchers added to every import, as `loadkit import --selector` "
        "(e.g. node='{job=\"node\"}')",
    )
    window.add_argument(
        "--prom-token-file", metavar="F", help="bearer token for Prometheus, from a file"
    )
    bounds = parser.add_argument_group("bounds")
    bounds.add_argument(
        "--deadline",
        type=parse_duration,
        default=600.0,
        help="one analysis, import included (default 10m)",
    )
    bounds.add_argument(
        "--disk-budget",
        type=parse_size,
        default=2 * 1024**3,
        help="all incident directories together (default 2G; oldest removed first)",
    )
    bounds.add_argument(
        "--max-pending", type=int, default=64, help="incidents waiting for analysis (default 64)"
    )
    bounds.add_argument(
        "--max-payload",
        type=parse_size,
        default=1024 * 1024,
        help="the largest notification accepted (default 1M)",
    )
    parser.add_argument(
        "--public-url",
        metavar="URL",
        help="this receiver's address as the receivers' readers reach it, for report links "
        "(default http://BIND:PORT, the host name for 0.0.0.0)",
    )


def _log(message: str) -> None:
    print(f"loadkit oncall: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from loadkit.oncall.incidents import IncidentStore, WindowPolicy
    from loadkit.oncall.notify import Notifier
    from loadkit.oncall.server import OncallServer
    from loadkit.oncall.service import OncallService
    from loadkit.oncall.worker import Bounds, ChildAnalysis, Worker

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: not a TCP port (0..65535; 0: any free one)")
    if args.max_pending < 1:
        raise UsageError("--max-pending must be at least 1")
    token = token_from_file(args.token_file, "--token-file")
    token_from_file(args.prom_token_file, "--prom-token-file")  # readable now, not at 3 a.m.
    try:
        store = IncidentStore(args.out)
    except OSError as exc:
        raise UsageError(f"cannot use --out {args.out}: {exc.strerror or exc}") from None
    analyze = ChildAnalysis(
        args.prometheus,
        static_selectors=tuple(args.selector),
        step_s=args.step,
        prometheus_token_file=args.prom_token_file,
    )
    notifier = Notifier(store, list(args.notify), _log)
    bounds = Bounds(
        max_pending=args.max_pending, deadline_s=args.deadline, disk_budget_bytes=args.disk_budget
    )
    worker = Worker(store, analyze, lambda incident, result: None, _log, bounds)
    policy = WindowPolicy(args.lookback, args.settle, args.max_window)
    service = OncallService(store, worker, notifier, policy, "", args.match, _log)
    worker.on_done = service.analyzed
    try:
        server = OncallServer(
            args.bind, args.port, service,
            prometheus=args.prometheus, token=token, max_payload=args.max_payload, log=_log,
        )  # fmt: skip
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {args.bind}:{args.port}: {exc.strerror or exc}",
            hint="another receiver on that port? --port 0 takes any free one",
        ) from exc
    public = args.public_url or server.url
    if args.public_url is None and args.bind in ("0.0.0.0", "::"):
        public = f"http://{socket.getfqdn()}:{server.server_address[1]}"
    service.public_url = public.rstrip("/")
    service.resume()
    notifier.start()
    worker.start()
    said = ", bearer token required" if token is not None else ""
    try:
        _log(
            f"receiving {server.url}/alertmanager, incidents at {public}/ "
            f"({len(store.incidents)} on disk in {args.out}{said}; Prometheus {args.prometheus})"
        )
        with lifeline.stop_signals():
            server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        _log("stopping: no new notifications; the analysis in progress finishes or is interrupted")
    finally:
        lifeline.ignore_stop_signals()
        server.server_close()
        worker.stop()
        notifier.stop(timeout_s=10.0)
        _log("stopped")
    return 0
