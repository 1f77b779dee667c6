"""Leader election for `gpumix run`: a Lease campaign in a thread, a watchdog, a write gate.

Only the holder of the Lease runs the operator (kopf, the planner, the KV loop); the others
campaign and serve metrics and health. The decisions are `gpumix.reconcile.leadership`'s
(client-go's rules); this module reads and writes the Lease and enforces the outcome:

- the campaign runs in its own thread with the synchronous client and bounded request
  timeouts, so a busy event loop (or a solver holding it) cannot delay a renewal;
- a watchdog thread ends the process (`os._exit`, no cleanup that might write) the moment the
  holder passes its renew deadline without a successful renewal, or sees another holder;
- `LeaseElector.check`, the guard of the planner's and the KV loop's `KubeWriter`, checks the
  deadline again before every write;
- on a graceful stop (SIGTERM), once the operator's tasks and their writing threads are done,
  `close()` releases the Lease so that a follower takes over at once.

The kubelet restarts a process that lost the Lease; it comes back as a follower.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpumix.operator import metrics
from gpumix.reconcile.leadership import (
    LeaseRecord,
    Observed,
    Timing,
    Verdict,
    decide,
    may_act,
    next_attempt,
    observe,
    released,
    request_timeout,
)

log = logging.getLogger("gpumix.leader")

LOST_EXIT_CODE = 1
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def default_identity() -> str:
    """$POD_NAME (the downward API, set by the chart and manifests), else hostname_pid: unique
    among processes on one machine, e.g. the e2e tests' local operators."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"


def default_namespace(fallback: str) -> str:
    """$POD_NAMESPACE, else the in-cluster service account's namespace, else `fallback`."""
    if ns := os.environ.get("POD_NAMESPACE"):
        return ns
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or fallback
    except OSError:
        return fallback


def _micro_time(t: datetime | None) -> str | None:
    """A MicroTime as the apiserver parses it (RFC 3339, always six fractional digits)."""
    return None if t is None else t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record_of(lease: Any, default_duration_s: int) -> LeaseRecord:
    spec = lease.spec
    if spec is None:
        return LeaseRecord("", default_duration_s)
    return LeaseRecord(
        holder=spec.holder_identity or "",
        lease_duration_s=spec.lease_duration_seconds or default_duration_s,
        acquire_time=spec.acquire_time,
        renew_time=spec.renew_time,
        transitions=spec.lease_transitions or 0,
    )


def _spec(rec: LeaseRecord) -> dict[str, Any]:
    return {
        "holderIdentity": rec.holder or None,
        "leaseDurationSeconds": rec.lease_duration_s,
        "acquireTime": _micro_time(rec.acquire_time),
        "renewTime": _micro_time(rec.renew_time),
        "leaseTransitions": rec.transitions,
    }


class LeaseElector:
    """Campaigns for the Lease `namespace/name` as `identity` (see the module docstring)."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        timing: Timing,
        on_lost: Callable[[str], NoReturn] | None = None,
    ) -> None:
        problems = timing.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self._leases = client.CoordinationV1Api(api)
        self.name, self.namespace, self.identity, self.timing = name, namespace, identity, timing
        self._on_lost = on_lost or _exit
        self._mutex = threading.Lock()
        self._renewed_at: float | None = None  # start of the last successful acquire/renew
        self._observed: Observed | None = None
        self._lease: Any = None  # the Lease as last read or written (its resourceVersion)
        self._holder = ""
        self._trouble = ""  # the last failure logged (repeats go to DEBUG until a success)
        self.leading = threading.Event()
        self._on_leading: Callable[[], None] | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.last_attempt = time.monotonic()
        """Monotonic time of the campaign's last completed attempt (for /healthz)."""
        metrics.LEADER.set(0)

    @property
    def lease(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holder(self) -> str:
        """The holder last seen ("" when none)."""
        return self._holder

    def _fields(self, **more: Any) -> dict[str, Any]:
        return {"lease": self.lease, "identity": self.identity, **more}

    # The campaign --------------------------------------------------------------------------

    def start(self, on_leading: Callable[[], None]) -> None:
        """Campaign in the background; `on_leading` is called (from the campaign thread) once,
        when this replica acquires the Lease."""
        self._on_leading = on_leading
        log.info(
            "campaigning for Lease %s as %s (lease %d s, renew deadline %g s, retry %g s)",
            self.lease, self.identity, self.timing.lease_duration_s,
            self.timing.renew_deadline_s, self.timing.retry_period_s,
            extra=self._fields(role="follower"),
        )  # fmt: skip
        for target, name in ((self._campaign, "lease-campaign"), (self._watchdog, "lease-watch")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _campaign(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._attempt(started)
            except (HTTPError, OSError) as err:  # unreachable or too slow: the next attempt
                self._complain(logging.WARNING, f"unreachable: {err.__class__.__name__}: {err}")
            except Exception:  # a bug or an unexpected answer: log, retry, the watchdog guards
                log.exception("Lease %s: attempt failed", self.lease, extra=self._fields())
            self.last_attempt = time.monotonic()
            due = next_attempt(started, self.leading.is_set(), self.timing, random.random())
            self._stop.wait(max(0.0, due - time.monotonic()))

    def _attempt(self, started: float) -> None:
        timeout = request_timeout(self._renewed_at, self.timing, started)
        if timeout <= 0:
            return  # past the deadline: the watchdog ends the process
        try:
            lease = self._leases.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=timeout
            )
        except ApiException as err:
            if err.status != 404:
                self._refused("read", err)
                return
            lease = None
        now = time.monotonic()
        if lease is not None:
            record = record_of(lease, self.timing.lease_duration_s)
            self._observed = observe(self._observed, record, now)
            self._note_holder(record.holder)
        else:
            self._observed = None
        decision = decide(self._observed, self.identity, self.timing, now, datetime.now(UTC))
        if decision.verdict is Verdict.WAIT:
            if self.leading.is_set():
                self._lost(f"the Lease is {decision.reason}")
            return
        assert decision.record is not None
        body = self._body(decision.record, lease)
        timeout = request_timeout(self._renewed_at, self.timing, time.monotonic())
        if timeout <= 0:
            return
        try:
            if decision.verdict is Verdict.CREATE:
                written = self._leases.create_namespaced_lease(
                    self.namespace, body, _request_timeout=timeout
                )
            else:
                written = self._leases.replace_namespaced_lease(
                    self.name, self.namespace, body, _request_timeout=timeout
                )
        except ApiException as err:
            if err.status == 409:  # another replica wrote first: read again next time
                log.info("Lease %s: %s lost a race (409)", self.lease, decision.verdict.value,
                         extra=self._fields())  # fmt: skip
                return
            self._refused(decision.verdict.value, err)
            return
        with self._mutex:
            self._renewed_at = started
            self._lease = written
            self._observed = Observed(decision.record, time.monotonic())
        self._holder, self._trouble = self.identity, ""
        if not self.leading.is_set():
            self.leading.set()
            metrics.LEADER.set(1)
            log.info(
                "acquired Lease %s (%s, transition %d): this replica leads",
                self.lease, decision.reason, decision.record.transitions,
                extra=self._fields(role="leader", event="acquired"),
            )  # fmt: skip
            if self._on_leading is not None:
                self._on_leading()

    def _body(self, rec: LeaseRecord, lease: Any) -> Any:
        """The Lease to send, as the JSON dict the client passes through (a V1Lease would
        serialise MicroTimes without their fractional digits when they are zero)."""
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if lease is not None:  # replace exactly the version read: 409 if anyone wrote since
            meta["resourceVersion"] = lease.metadata.resource_version
            meta["labels"] = lease.metadata.labels
            meta["annotations"] = lease.metadata.annotations
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": _spec(rec)}  # fmt: skip

    def _note_holder(self, holder: str) -> None:
        if holder != self._holder:
            log.info("Lease %s is held by %s", self.lease, holder or "nobody",
                     extra=self._fields(holder=holder))  # fmt: skip
            self._holder = holder

    def _refused(self, what: str, err: ApiException) -> None:
        level = logging.ERROR if err.status in (401, 403, 404) else logging.WARNING
        hint = ""
        if err.status == 403:
            hint = " (the operator's Role must allow get/create/update on leases there)"
        elif err.status == 404:
            hint = " (does the namespace exist? see --leader-elect-resource-namespace)"
        self._complain(level, f"{what} failed: {err.status} {err.reason}{hint}")

    def _complain(self, level: int, trouble: str) -> None:
        """Log a failed attempt once, not every retry period while it lasts."""
        if trouble == self._trouble:
            level = logging.DEBUG
        self._trouble = trouble
        log.log(level, "Lease %s: %s", self.lease, trouble, extra=self._fields())

    # Enforcement ---------------------------------------------------------------------------

    def may_act(self) -> bool:
        return self.leading.is_set() and may_act(self._renewed_at, self.timing, time.monotonic())

    def check(self, what: str) -> None:
        """Before a write: end the process unless this replica may still act."""
        if not self.may_act():
            self._lost(f"{what} attempted without a valid Lease")

    def _watchdog(self) -> None:
        tick = min(0.1, self.timing.retry_period_s / 4)
        while not self._stop.wait(tick):
            if self.leading.is_set() and not self.may_act():
                self._lost(
                    f"no renewal within the renew deadline ({self.timing.renew_deadline_s:g} s)"
                )

    def _lost(self, why: str) -> NoReturn:
        metrics.LEADER.set(0)
        log.critical("lost Lease %s: %s; exiting so that no write follows", self.lease, why,
                     extra=self._fields(role="follower", event="lost"))  # fmt: skip
        self._on_lost(why)

    # Stopping ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop campaigning and, when this replica still holds the Lease, release it. Call only
        once nothing of the operator writes any more."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.timing.renew_deadline_s)
        if not self.may_act():
            return
        with self._mutex:
            lease, observed = self._lease, self._observed
        if lease is None or observed is None:
            return
        body = self._body(released(observed.record, datetime.now(UTC)), lease)
        try:
            self._leases.replace_namespaced_lease(
                self.name, self.namespace, body,
                _request_timeout=request_timeout(self._renewed_at, self.timing, time.monotonic()),
            )  # fmt: skip
        except (ApiException, OSError) as err:  # the Lease then expires by itself
            log.warning("could not release Lease %s: %s", self.lease, err, extra=self._fields())
            return
        finally:
            self.leading.clear()
            metrics.LEADER.set(0)
        log.info("released Lease %s", self.lease, extra=self._fields(event="released"))


def _exit(why: str) -> NoReturn:
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(LOST_EXIT_CODE)


class FollowerHealth:
    """GET /healthz while this replica follows (kopf's liveness endpoint takes the port over
    when it leads): 200 while the campaign keeps attempting, else 503."""

    def __init__(self, bind: str, port: int, elector: LeaseElector) -> None:
        stale_after = elector.timing.renew_deadline_s + 3 * elector.timing.retry_period_s

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/healthz":
                    self.send_error(404)
                    return
                age = time.monotonic() - elector.last_attempt
                ok = age < stale_after
                body = json.dumps(
                    {
                        "role": "follower",
                        "identity": elector.identity,
                        "lease": elector.lease,
                        "holder": elector.holder,
                        "campaign": "running" if ok else f"stalled {age:.0f} s",
                    }
                )
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the kubelet's probes are not news

        self._server = ThreadingHTTPServer((bind, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="follower-health", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
