"""Internal: one worker process — dispatchers, acker, listener, services, and its shutdown.

``WorkerProcess(...).run()`` registers the node, prints the banner, starts one
:class:`Dispatcher` per queue, the :class:`Acker`, the PostgreSQL
:class:`Listener` and the periodic services (heartbeat, promoter, pruner,
lifeline, cron scheduler), then waits for SIGTERM/SIGINT (or, with
``burst``, for the moment nothing is due and nothing runs).

Shutdown order: stop claiming → wait up to the grace period for running jobs
→ release what is still held (attempt restored) → flush the acks → stop the
services → mark the node stopped. A second signal exits at once; the
lifeline then rescues whatever this node still held.

One node name, one live process: registering refuses a name a live process
holds (``NodeNameInUse``: the process exits with ``EXIT_NODE_IN_USE``, which the
supervisor does not restart), and a process whose name was taken over while it
was frozen stops at its next heartbeat. Crash suspects are run alone by
:class:`~kathikon.runtime.quarantine.Quarantine`, stepped by the main loop.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from typing import Any

from django.db import DatabaseError, InterfaceError, connections

from kathikon import conf, signals, storage
from kathikon.backoff import failure_delay
from kathikon.exceptions import NodeNameInUse, NodeSuperseded, NotMigrated
from kathikon.executor import Execution, Executor
from kathikon.limits import Limits
from kathikon.limits import in_force as limits_in_force
from kathikon.models import Node
from kathikon.runtime import loop
from kathikon.runtime.acker import Acker
from kathikon.runtime.dispatcher import Dispatcher
from kathikon.runtime.listener import Listener
from kathikon.runtime.outage import Outage, quiet_during
from kathikon.runtime.quarantine import Quarantine
from kathikon.runtime.supervisor import EXIT_NODE_IN_USE
from kathikon.states import JobState
from kathikon.storage import Ack, hygiene
from kathikon.storage.runtime import count_due_jobs, due_jobs_elsewhere

logger = logging.getLogger("kathikon.runtime")

SERVICES: tuple[str, ...] = (
    "kathikon.runtime.heartbeat.Heartbeat",
    "kathikon.runtime.promoter.Promoter",
    "kathikon.runtime.pruner.Pruner",
    "kathikon.runtime.lifeline.Lifeline",
    "kathikon.runtime.scheduler.CronScheduler",
)
SUMMARY_EVERY = 5.0  # seconds between --burst progress lines
DUPLICATE_SIGNAL = 1.0  # a second signal this soon is the same request (terminal + supervisor)


class WorkerProcess:
    """Run the dispatchers and services of one process until told to stop.

    ``queues`` maps queue name → concurrency (``None`` = the row override or
    settings); ``None`` for the whole mapping means every configured queue
    (``KATHIKON["QUEUES"]``, then those ``TASKS`` declares for Kathikon's
    backend) plus queues created later with ``kathikon.start_queue``.
    """

    def __init__(self, *, node: str | None = None, queues: Mapping[str, int | None] | None = None,
                 burst: bool = False, poll_interval: float | None = None,
                 grace_period: float | None = None, services: Sequence[str] = SERVICES,
                 write: Callable[[str], None] | None = None, parent_pid: int | None = None,
                 handle_signals: bool = True) -> None:
        self.node = node or f"{socket.gethostname()}:{os.getpid()}"
        self.instance = uuid.uuid4().hex  # this process's claim on the node name
        self.requested = dict(queues) if queues is not None else None
        self.burst = burst
        self.poll_interval = poll_interval or conf.poll_interval()
        self.grace_period = conf.shutdown_grace_period() if grace_period is None else grace_period
        self.service_paths = tuple(services)
        self.write = write or (lambda line: logger.info("%s", line))
        self.parent_pid = parent_pid
        self.handle_signals = handle_signals
        self.dispatchers: dict[str, Dispatcher] = {}
        self.services: list[Any] = []
        self.acker = Acker(on_settled=self._settled)
        self.outage = Outage(self.node, storage.alias())
        self.executor = Executor(unknown_worker_grace=conf.unknown_worker_grace())
        self.unknown_workers: dict[str, str] = {}  # worker path → first held back (ISO)
        self.quarantine = Quarantine(self.node, check_every=self.poll_interval)
        self.listener: Listener | None = None
        self.started = threading.Event()
        self._stop = threading.Event()
        self._first_signal: float | None = None
        self._refresh_now = threading.Event()
        self._lock = threading.Lock()
        self._started_at = time.monotonic()
        self.completed = 0  # jobs this process completed (acked)
        self.exit_code = 0
        self.rescue_after = _rescue_after()
        self.acker_stalled = False
        self._probe_at = 0.0  # the next database probe while the acker seems stuck
        self._unreachable_at: float | None = None

    # -- public ------------------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; returns the exit code (0, 1 after an internal failure,
        ``NotMigrated.exit_code`` when the database lacks Kathikon's tables)."""
        if self.handle_signals:
            self._install_signal_handlers()
        try:
            self._start()
        except _StoppedEarly:
            logger.info("kathikon worker %s stopped before it started", self.node)
            return self.exit_code
        except NotMigrated as exc:  # retrying cannot help: a deploy step is missing
            logger.error("kathikon worker %s cannot start: %s", self.node, exc)
            return NotMigrated.exit_code
        except NodeNameInUse as refused:
            logger.error("kathikon worker refused to start: %s", refused)
            return EXIT_NODE_IN_USE
        try:
            self.started.set()
            with quiet_during(self.outage):  # an outage said once, not by every part per poll
                self._main_loop()
        finally:
            self._shutdown()
        return self.exit_code

    def stop(self) -> None:
        """Ask for a graceful shutdown (what SIGTERM does)."""
        self._stop.set()

    # -- start -------------------------------------------------------------------------------

    def _start(self) -> None:
        limits = self._register()
        try:
            self._start_threads(limits)
        except BaseException:
            self._shutdown()
            raise

    def _start_threads(self, limits: dict[str, int]) -> None:
        self.acker.start()
        for name, concurrency in limits.items():
            self._add_dispatcher(name, concurrency)
        pooled = self._start_listener() if storage.is_postgres() else None
        self._start_services(limits)
        self._banner(limits)
        if pooled:
            self.write(pooled)
        signals.send(signals.worker_started, Node, node=self.node, queues=limits)

    def _start_listener(self) -> str | None:
        """Listen on ``LISTEN_DATABASE``; what to say when that goes through a pooler.

        PgBouncer in transaction mode hands ``LISTEN`` to whichever server connection
        is free and its notifications are lost, so a ``DATABASE`` that goes through a
        pooler is not listened on (polling picks the jobs up). A ``LISTEN_DATABASE`` set
        explicitly is the user's choice (a session-mode pooler keeps LISTEN): used, with
        a warning."""
        home = storage.vendor.alias() == conf.database()  # LISTEN_DATABASE is DATABASE's
        alias = conf.listen_database() if home else storage.vendor.alias()
        direct = storage.prepared.reaches_postgres(alias)
        explicit = home and conf.get()["LISTEN_DATABASE"] is not None
        if direct or explicit:
            self.listener = Listener(alias, self._notified, self._wake_all)
            self.listener.start()
        if direct:
            return None
        if explicit:
            return (f"kathikon: warning: LISTEN_DATABASE {alias!r} goes through a connection "
                    "pooler; LISTEN works there only in session mode (in transaction mode "
                    "notifications are lost and jobs wait for the poll)")
        return (f"kathikon: no LISTEN: database {alias!r} goes through a connection pooler "
                f"(PgBouncer?), which would lose notifications; polling every "
                f"{self.poll_interval:g}s instead. For instant pickup set "
                "KATHIKON['LISTEN_DATABASE'] to an alias that reaches PostgreSQL directly")

    def _register(self) -> dict[str, int]:
        """Read the queues and register the node, waiting for the database if it is down."""
        failures = 0
        while True:
            try:
                pending = storage.schema.pending_migrations()
                if pending:
                    raise storage.schema.not_migrated(
                        f"{len(pending)} migration(s) not applied: {', '.join(pending)}")
                limits = self._queue_limits(storage.queue_rows())
                storage.register_node(self.node, socket.gethostname(), os.getpid(), limits,
                                      instance=self.instance,
                                      exclusive_after=self.rescue_after or math.inf,
                                      gone=_predecessor_gone)
                return limits
            except (DatabaseError, InterfaceError) as exc:
                if storage.schema.is_missing_schema(exc):
                    raise storage.schema.not_migrated(str(exc).strip()) from exc
                failures += 1
                delay = failure_delay(failures, base=0.5, cap=30.0)
                logger.warning("kathikon worker %s: database unavailable at start-up (%s: %s); "
                               "retrying in %.1fs", self.node, type(exc).__name__, exc, delay)
                storage.vendor.reset_connection()
                if self._stop.wait(delay):
                    raise _StoppedEarly from exc

    def _queue_limits(self, rows: Mapping[str, Any]) -> dict[str, int]:
        """Queue name → concurrency: the --queues value, else the Queue row's override,
        else settings (10 for a queue known only from its row)."""
        here = storage.vendor.alias()  # a queue on another database has its own process
        configured = [name for name in conf.served_queue_names()
                      if conf.queue_database(name) == here]
        names = list(self.requested) if self.requested is not None else [
            *configured, *sorted(set(rows) - set(configured))]
        limits = {}
        for name in names:
            explicit = self.requested.get(name) if self.requested is not None else None
            row = rows.get(name)
            override = getattr(row, "concurrency", None)
            limits[name] = int(explicit or override or conf.concurrency(name))
        return limits

    def _queue_flow(self, rows: Mapping[str, Any]) -> dict[str, Limits]:
        """Queue name → its global, partition and rate limits: settings, then the row's
        run-time override (a bad override is logged and ignored)."""
        return {name: self._queue_flow_of(name, rows) for name in list(self.dispatchers)}

    def _queue_flow_of(self, name: str, rows: Mapping[str, Any]) -> Limits:
        flow, ignored = limits_in_force(conf.queue_config(name),
                                        getattr(rows.get(name), "limits", None))
        if ignored is not None:
            logger.warning("kathikon: queue %s: ignoring the stored limits (%s)", name, ignored)
        return flow

    def _add_dispatcher(self, name: str, concurrency: int) -> None:
        dispatcher = Dispatcher(name, concurrency, self.node, self.acker,
                                poll_interval=self.poll_interval, executor=self.executor)
        dispatcher.limits = self._queue_flow_of(name, storage.queue_rows())
        if self.quarantine.job is not None or self.quarantine.draining:
            dispatcher.hold(True)
        with self._lock:
            self.dispatchers[name] = dispatcher
        dispatcher.start()

    def _start_services(self, limits: Mapping[str, int]) -> None:
        for path in self.service_paths:
            module_name, _, class_name = path.rpartition(".")
            if class_name == "CronScheduler" and storage.vendor.alias() != conf.database():
                continue  # schedules live in DATABASE: that database's workers fire them
            try:
                cls = getattr(import_module(module_name), class_name)
            except (ImportError, AttributeError):
                logger.debug("kathikon: service %s is not available; skipped", path)
                continue
            options: dict[str, Any] = {}
            if class_name == "Heartbeat":
                options = {"hostname": socket.gethostname(), "pid": os.getpid(),
                           "queues": dict(limits), "instance": self.instance,
                           "on_superseded": self._superseded}
            try:
                service = cls(self.node, **options)
                service.start()
            except Exception:
                logger.exception("kathikon: service %s failed to start", path)
                continue
            self.services.append(service)

    def _banner(self, limits: Mapping[str, int]) -> None:
        connection = storage.vendor.connection()
        queues = ", ".join(f"{name} ({n})" for name, n in limits.items())
        mode = "burst" if self.burst else "running"
        self.write(f"kathikon worker {self.node} {mode}: {connection.vendor} database "
                   f"{connection.settings_dict.get('NAME')!s} (alias {storage.alias()}); "
                   f"queues: {queues}; poll every {self.poll_interval:g}s"
                   + ("; instant pickup via LISTEN" if self.listener else ""))
        if self.services:
            names = ", ".join(type(s).__name__ for s in self.services)
            logger.debug("kathikon: services: %s", names)

    # -- the main loop -----------------------------------------------------------------------

    def _main_loop(self) -> None:
        tick = 0.02 if self.burst else min(self.poll_interval, 1.0)
        next_refresh = time.monotonic() + self.poll_interval
        next_summary = time.monotonic() + SUMMARY_EVERY
        started = self._started_at
        while not self._stop.wait(tick):
            now = time.monotonic()
            if now >= next_refresh or self._refresh_now.is_set():
                self._refresh_now.clear()
                next_refresh = now + self.poll_interval
                self._refresh_queues()
            if not self._healthy():
                self.exit_code = 1
                return
            self.quarantine.step(dict(self.dispatchers), self.acker.idle)
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                logger.warning("kathikon: supervisor %s is gone; stopping", self.parent_pid)
                return
            if self.burst:
                if self._burst_done():
                    self._summary(started, remaining=0, final=True)
                    return
                if now >= next_summary:
                    next_summary = now + SUMMARY_EVERY
                    self._summary(started)

    def _healthy(self) -> bool:
        """A dispatcher or acker thread that died is a bug, an acker that cannot write for
        ``RESCUE_AFTER`` holds every outcome of this process: exit non-zero rather than
        heartbeat on, so a supervisor restarts the process and its jobs are rescued."""
        if self._acker_stuck():
            self.acker_stalled = True
            logger.error("kathikon worker %s: the acker has written nothing for %.0fs while "
                         "the database answers (RESCUE_AFTER is %gs); exiting so the supervisor "
                         "restarts the process and its jobs are rescued", self.node,
                         self.acker.stalled_for(), self.rescue_after)
            return False
        loop.revive()  # an ended event loop: its jobs failed already, start the next one
        dead = [name for name, d in list(self.dispatchers.items()) if not d.alive]
        dead += [f"{name} watchdog" for name, d in list(self.dispatchers.items())
                 if not d.pool.watchdog_alive]
        if not self.acker.alive:
            dead.append("acker")
        if dead:
            logger.error("kathikon worker %s: internal thread(s) died (%s); exiting so the "
                         "supervisor restarts the process", self.node, ", ".join(dead))
        return not dead

    def _acker_stuck(self) -> bool:
        """The acker has had work and written nothing for ``RESCUE_AFTER`` although the
        database answers. An outage is not a wedge: the worker waits for the database
        (the acker's retries resume by themselves), and counts again once it is back."""
        if self.rescue_after is None or self.acker.stalled_for() <= self.rescue_after:
            return False
        now = self.acker.clock()
        if now < self._probe_at:
            return False
        self._probe_at = now + 1.0
        if not hygiene.database_answers(storage.alias()):
            self._unreachable_at = now
            return False
        return self._unreachable_at is None or now - self._unreachable_at > self.rescue_after

    def _refresh_queues(self) -> None:
        """Pick up queues added with ``start_queue`` and concurrency overrides of Queue rows."""
        try:
            rows = storage.queue_rows()
            limits = self._queue_limits(rows)
        except Exception as exc:
            if isinstance(exc, (DatabaseError, InterfaceError)):
                self.outage.failed("reading its queues", exc)
            else:
                logger.warning("kathikon: reading queues failed (%s: %s)",
                               type(exc).__name__, exc)
            storage.vendor.reset_connection()
            return
        self.outage.recovered()
        added = False
        for name, concurrency in limits.items():
            dispatcher = self.dispatchers.get(name)
            if dispatcher is None:
                logger.info("kathikon: new queue %s (%d)", name, concurrency)
                self._add_dispatcher(name, concurrency)
                added = True
            else:
                dispatcher.set_concurrency(concurrency)
        if added:  # the ops summary and the overview read which queues live nodes serve
            _safely(lambda: storage.set_node_queues(self.node, limits, instance=self.instance),
                    "recording the queues")
        for name, flow in self._queue_flow(rows).items():
            self.dispatchers[name].set_limits(flow)

    def _burst_done(self) -> bool:
        if not self._all_idle():
            return False
        try:
            if storage.promote_scheduled():
                self._wake_all()
                return False
            if count_due_jobs(list(self.dispatchers)):
                self._wake_all()
                return False
        except Exception as exc:
            logger.warning("kathikon: burst check failed (%s: %s)", type(exc).__name__, exc)
            storage.vendor.reset_connection()
            return False
        return self._all_idle()

    def _all_idle(self) -> bool:
        return self.acker.idle and all(d.idle for d in list(self.dispatchers.values()))

    def _summary(self, started: float, remaining: int | None = None, *,
                 final: bool = False) -> None:
        completed, done = self.completed, self.acker.written
        if remaining is None:
            try:
                remaining = count_due_jobs(list(self.dispatchers))
            except Exception:
                remaining = -1
        elapsed = max(time.monotonic() - started, 1e-9)
        running = sum(d.running for d in self.dispatchers.values())
        logger.info("kathikon burst %s: %d runs done (%d completed), %d running, %s remaining, "
                    "%.0f runs/s%s", self.node, done, completed, running,
                    remaining if remaining >= 0 else "?", done / elapsed,
                    self._left_behind() if final else "")

    def _left_behind(self) -> str:
        """The final line's note on due jobs in queues this process does not serve."""
        try:
            elsewhere = due_jobs_elsewhere(list(self.dispatchers))
        except Exception as exc:
            logger.warning("kathikon: counting unserved jobs failed (%s: %s)",
                           type(exc).__name__, exc)
            return ""
        if not elsewhere:
            return ""
        queues = ", ".join(f"{name} ({count})" for name, count in elsewhere.items())
        return (f"; {sum(elsewhere.values())} due job(s) left in queues this worker does not "
                f"serve: {queues}")

    # -- events from other threads -----------------------------------------------------------

    def _notified(self, event: str, queue: str) -> None:
        dispatcher = self.dispatchers.get(queue)
        if dispatcher is None:
            if self.requested is None and event in ("available", "resume"):
                self._refresh_now.set()  # maybe a queue started since
            return
        if event in ("available", "resume"):
            dispatcher.wake()

    def _superseded(self, error: NodeSuperseded) -> None:
        """Another process took our name over: stop (exit 1); our old jobs were rescued."""
        self.exit_code = 1
        self._stop.set()

    def _wake_all(self) -> None:
        for dispatcher in list(self.dispatchers.values()):
            dispatcher.wake()

    def _settled(self, executions: list[Execution]) -> None:
        """After each ack batch: log outcomes (successes at DEBUG, failures with the time of
        the next attempt at WARNING), wake dispatchers for retries coming due, and those of
        limited queues (the acks just freed global or partition capacity)."""
        soon = dt.timedelta(seconds=self.poll_interval)
        now = None
        for queue in {execution.job.queue for execution in executions if execution.written}:
            limited = self.dispatchers.get(queue)
            if limited is not None and limited.limits:
                limited.wake_if_held()
        for execution in executions:
            if not execution.written:
                continue
            job = execution.job
            if execution.kind == "deferred":
                self._unknown_worker(execution)
                continue
            if execution.kind == "completed":
                self.completed += 1
                if logger.isEnabledFor(logging.DEBUG):  # kathikon_worker -v 2
                    logger.debug("kathikon job %s %s attempt %d/%d completed in %.3fs",
                                 job.id.hex, job.shown_worker, job.attempts, job.max_attempts,
                                 execution.duration)
                continue
            retry_in = None
            if job.state == JobState.RETRYABLE and job.available_at is not None:
                now = now or storage.vendor.now()
                retry_in = (job.available_at - now).total_seconds()
            if execution.kind in ("failed", "discarded"):
                error = execution.ack.error or {}
                logger.warning("kathikon job %s %s attempt %d/%d %s: %s: %s → %s%s",
                               job.id.hex, job.shown_worker, job.attempts, job.max_attempts,
                               execution.kind, error.get("kind"), error.get("message"),
                               job.state, _next_attempt(job, retry_in))
            dispatcher = self.dispatchers.get(job.queue)
            if retry_in is not None and dispatcher is not None and retry_in < soon.total_seconds():
                dispatcher.wake_at(time.monotonic() + max(0.0, retry_in))

    def _unknown_worker(self, execution: Execution) -> None:
        """Say once per worker path, not once per job and poll, that this process holds back
        jobs whose class it cannot import (a newer release enqueued them, most likely)."""
        path = execution.job.worker
        if path in self.unknown_workers:
            return
        self.unknown_workers[path] = storage.vendor.now().isoformat()
        unknown = dict(self.unknown_workers)
        _safely(lambda: storage.set_node_unknown_workers(self.node, unknown,
                                                         instance=self.instance),
                "recording a worker class this process cannot import")
        logger.warning("kathikon worker %s cannot run jobs of %s (%s); they go back to their "
                       "queue, attempt not counted, for a worker process that knows the class, "
                       "for up to UNKNOWN_WORKER_GRACE (%gs) after their insert, then fail. "
                       "Restart this worker after a deploy.", self.node, path,
                       execution.exception, self.executor.unknown_worker_grace)

    # -- shutdown ----------------------------------------------------------------------------

    def _shutdown(self) -> None:
        logger.info("kathikon worker %s stopping", self.node)
        _safely(lambda: storage.mark_node_stopping(self.node, instance=self.instance),
                "marking the node stopping")
        dispatchers = list(self.dispatchers.values())
        for dispatcher in dispatchers:
            dispatcher.stop_claiming()
        if self.listener is not None:
            self.listener.stop()
        for dispatcher in dispatchers:
            dispatcher.join(10)  # a claim in flight finishes and is handed over
        # With a stalled acker no outcome gets written anyway: leave at once, be rescued.
        grace = 0.0 if self.acker_stalled else self.grace_period
        deadline = time.monotonic() + grace
        for dispatcher in dispatchers:
            dispatcher.wait_running(deadline - time.monotonic())
        leftovers = [job for dispatcher in dispatchers for job in dispatcher.abandon_running()]
        if leftovers:
            logger.warning("kathikon worker %s: %d job(s) still running after the %gs grace "
                           "period; released (attempt restored)", self.node, len(leftovers),
                           self.grace_period)
            self.acker.release([Ack(job, JobState.AVAILABLE, restore_attempt=True)
                                for job in leftovers])
        if not self.acker.stop(timeout=1.0 if self.acker_stalled
                               else max(10.0, self.grace_period)):
            logger.error("kathikon worker %s: some acknowledgements could not be written; "
                         "the lifeline will rescue those jobs", self.node)
        for service in self.services:
            service.stop()
        for service in self.services:
            service.join(5)
        for dispatcher in dispatchers:
            dispatcher.close()
        if self.listener is not None:
            self.listener.join(2)
        _safely(lambda: storage.mark_node_stopped(self.node, instance=self.instance),
                "marking the node stopped")
        signals.send(signals.worker_stopped, Node, node=self.node)
        logger.info("kathikon worker %s stopped", self.node)
        connections.close_all()

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        if self._first_signal is None:
            self._first_signal = now
            logger.info("kathikon worker %s: %s, shutting down (grace period %gs; signal again "
                        "to stop at once)", self.node, signal.Signals(signum).name,
                        self.grace_period)
            self._stop.set()
        elif now - self._first_signal > DUPLICATE_SIGNAL:
            logger.warning("kathikon worker %s: second %s, exiting now; the lifeline rescues "
                           "its jobs", self.node, signal.Signals(signum).name)
            os._exit(1)


def _next_attempt(job: Any, delay: float | None) -> str:
    """`` (attempt 2 at 12:00:05 UTC, in 4.2s)`` for a retryable job, else ``""``."""
    if delay is None or job.available_at is None:
        return ""
    at = job.available_at.astimezone(dt.timezone.utc).strftime("%H:%M:%S")
    return f" (attempt {job.attempts + 1} at {at} UTC, in {max(delay, 0.0):.1f}s)"


def _rescue_after() -> float | None:
    try:
        return conf.rescue_after()
    except (TypeError, ValueError):  # RESCUE_AFTER = None: no rescue, no stall limit
        return None


def _predecessor_gone(row: Node) -> bool:
    """Whether the process that last held a node row on THIS host is dead (or was us:
    a pid reused in a new container is not a live predecessor)."""
    if row.hostname != socket.gethostname() or not row.pid:
        return False
    if row.pid == os.getpid():
        return True
    try:
        os.kill(row.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class _StoppedEarly(Exception):
    """A stop was requested while waiting for the database at start-up."""


def _safely(action: Callable[[], object], what: str) -> None:
    try:
        action()
    except Exception as exc:
        logger.warning("kathikon: %s failed (%s: %s)", what, type(exc).__name__, exc)
