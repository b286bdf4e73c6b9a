"""Locust users that send inference requests and record them the loadkit way.

Subclass one in a scenario file (`class Ranker(InferenceUser): pass`).
`InferenceUser` picks its transport from the scenario's `protocol`
parameter; each protocol's own user class (`TritonHttpUser`,
`TritonGrpcUser`, `JsonHttpUser`, ...: `user_class` in the protocol
registry, `loadkit.load.protocols`) fixes it, and is built here from the
registry.

Open model: each user takes scheduled arrivals from the process's
dispatcher; closed model: each user sends back to back (after `wait_time`).
Every request is timed from its intended send time (corrected) and from its
actual send (service), classified on failure, and reported to Locust's own
stats too (service time, in aggregate: `locust_stats.LocustStatsFeed`) so the
web UI and `--csv` files keep working. A request killed when
a run stops is recorded as `cancelled`, never as a success.
"""

from __future__ import annotations

import time
from typing import Any

from gevent import GreenletExit
from locust import User, constant, task
from locust.user.users import LOCUST_STATE_STOPPING

from loadkit.load import protocols
from loadkit.load.failures import CANCELLED, classify_failure, error_message
from loadkit.load.generator.runtime import LoadRuntime, get_runtime
from loadkit.load.protocols import Protocol
from loadkit.load.sources import RequestSource
from loadkit.load.transports import JsonBody, Transport

_IDLE_SLEEP_S = 0.1  # between checks for a dispatcher, before the first and after the last


class InferenceUser(User):
    """One Locust user = one client (one connection unless `churn`)."""

    abstract = True
    wait_time = constant(0)
    protocol: str | None = None  # None: the scenario's `protocol` parameter
    json_body: JsonBody | None = None  # InferRequest -> body for protocol=json (default v2)

    _runtime: LoadRuntime
    _transport: Transport
    _source: RequestSource
    _idle = False  # blocked in the dispatcher's take(): nothing in flight

    def on_start(self) -> None:
        runtime = get_runtime(self.environment)
        params = runtime.resolved.params
        protocol = self.protocol or str(params["protocol"])
        self._runtime = runtime
        self._name = runtime.scenario.request_name
        self._protocol = protocol
        self._method = protocol.upper()  # Locust's request type column
        self._churn = bool(params["churn"])
        body = type(self).json_body
        plan = runtime.request_plan(self.host or "", protocol)
        self._transport = protocols.get(protocol).make_transport(
            self.host or "",
            plan.model,
            timeout_s=float(params["timeout_s"]),
            churn=self._churn,
            json_path=str(params["json_path"]),
            json_body=body,
        )
        self._transport.connect()
        runtime.register_user()
        self._source = runtime.request_source(type(self), plan, self._transport.encode_block)

    def stop(self, force: bool = False) -> bool:
        # An idle user (blocked waiting for an arrival) has no request to finish: stop it now,
        # as Locust does with a user in `wait_time`, instead of after `stop_timeout`.
        return bool(super().stop(force=force or self._idle))

    def on_stop(self) -> None:
        transport = getattr(self, "_transport", None)
        if transport is not None:
            transport.close()

    @task
    def serve(self) -> None:
        runtime = self._runtime
        if not runtime.is_open:
            self.send_one(None, None)
            return
        dispatcher = runtime.dispatcher
        if dispatcher is not None:
            # Serve arrivals until the dispatcher finishes or Locust asks this user to stop
            # (the dispatcher is stopped first, which wakes idle users): no return to Locust's
            # task loop per request.
            while self._state != LOCUST_STATE_STOPPING:
                self._idle = True
                # A user without a connection is woken last (churn: every user opens one).
                arrival = dispatcher.take(cold=not (self._churn or self._transport.connected))
                self._idle = False
                if arrival is None:
                    break
                try:
                    self.send_one(arrival.intended_mono, arrival.intended_ns)
                finally:
                    dispatcher.served()
            if self._state == LOCUST_STATE_STOPPING:
                return
        time.sleep(_IDLE_SLEEP_S)  # no dispatcher yet, or finished; patched by gevent: cooperative

    def send_one(self, intended_mono: float | None, intended_ns: int | None) -> None:
        """Send one request and record it; `None` intended time means "now" (closed model)."""
        recorder = self._runtime.get_recorder()
        transport = self._transport
        request = self._source.next()
        wire = transport.prepare(request)  # encoded before the send timestamp
        size = request.size_bytes
        sent_mono = time.monotonic()
        if intended_mono is None or intended_ns is None:
            intended_mono, intended_ns = sent_mono, time.time_ns()
        sent_ns = intended_ns + round((sent_mono - intended_mono) * 1e9)
        recorder.started(
            self._name, sent_ns, closed_model=not self._runtime.is_open, intended_ns=intended_ns
        )
        error: BaseException | None = None
        connection_new = self._churn
        try:
            connection_new = transport.send(wire)
        except GreenletExit:
            self._record(
                recorder, intended_mono, intended_ns, sent_mono, CANCELLED, connection_new, size
            )
            raise
        except Exception as exc:  # every failure is classified and counted
            error = exc
        kind = message = None
        if error is not None:
            kind, message = classify_failure(error), error_message(error)
        done_mono = self._record(
            recorder, intended_mono, intended_ns, sent_mono, kind, connection_new, size, message
        )
        feed = self._runtime.locust_feed
        if feed is not None:
            feed.request(self._method, self._name, (done_mono - sent_mono) * 1000.0, 0, error)

    def _record(
        self,
        recorder: Any,
        intended_mono: float,
        intended_ns: int,
        sent_mono: float,
        error_kind: str | None,
        connection_new: bool,
        request_bytes: int,
        message: str | None = None,
    ) -> float:
        done_mono = time.monotonic()
        recorder.completed(
            self._name,
            intended_ns=intended_ns,
            sent_ns=intended_ns + round((sent_mono - intended_mono) * 1e9),
            done_ns=intended_ns + round((done_mono - intended_mono) * 1e9),
            ok=error_kind is None,
            error_kind=error_kind,
            connection_new=connection_new,
            error_message=message,
            request_bytes=request_bytes,
        )
        return done_mono


def fixed_protocol_user(protocol: Protocol) -> type[InferenceUser]:
    """The abstract user class that always speaks `protocol` (`protocol.user_class`)."""
    return type(
        protocol.user_class,
        (InferenceUser,),
        {
            "__module__": __name__,
            "__doc__": f"An InferenceUser that always speaks {protocol.name} ({protocol.help}).",
            "abstract": True,
            "protocol": protocol.name,
        },
    )


# TritonHttpUser, TritonGrpcUser, JsonHttpUser, ...: one per registered protocol.
USER_CLASSES: dict[str, type[InferenceUser]] = {
    p.user_class: fixed_protocol_user(p) for p in protocols.REGISTRY
}
globals().update(USER_CLASSES)
