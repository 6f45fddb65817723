"""The worker's session to the cluster: waiting for the ps, creating it, and what a lost ps means.

A worker's MonitoredSession needs a session creator, and TF's own do three things badly here.
A session to a ps that is not up blocks in C++ without a word and deaf to signals, so
wait_for_ps waits first, in Python, telling the user what it waits for. TF's
WorkerSessionCreator polls for the chief's initialization every 30 s; ours every 0.5 s. A
restarted chief whose ps kept running must carry on from the globals on the ps, which are
newer than any checkpoint, and restore only when the ps lost them (ChiefSessionCreator).

The decision about failures: a task never recovers in place. MonitoredSession would
recreate a broken session and wait for the ps forever; FirstSessionOnly refuses the second
session instead, and the error becomes LostPs, which the worker turns into exit status 75
(cli.EXIT_LOST_PS): its supervisor starts it again, the new process waits for the ps, and
the chief restores the latest checkpoint if it must. What cannot be cured by a restart (no
ps within --connect-timeout) is GaveUp, exit status 69.

One AbortedError is not a lost ps: "The same RunGraph (Worker) request was received twice".
A task refuses a request whose id it saw among its last 100,000, and TF 2.21 draws a step's
RunGraph ids in a fresh thread (Master::RunStep runs each step in a new std::thread) from a
thread-local mt19937_64 seeded with 32 bits: two steps get the same id about once in 2^32,
so a ps that has served 100,000 steps refuses one in 43,000 (docs/operations.md). The ps
refused that step before running it and is intact: run_step runs the step again in the same
session (retry_duplicates). What it cannot run again (an actor thread's step, refused by the
worker's own task and reported through the coordinator; refusals that repeat) breaks the
session, and FirstSessionOnly makes a new one in place; only a second within a minute is a
LostPs. And a step that never comes back at all (its own partition silent after the ps
refused its part, past the step's RunOptions deadline, deaf to Python) is ended by
StepWatchdog: the worker exits as for a lost ps.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import tensorflow as tf

from a3c_graph.distributed.cluster import split_host_port
from a3c_graph.system.cli import WORKER_PROG as PROG

T = TypeVar("T")

WAIT_MESSAGE_SECS = 10.0
# TF's words for a request whose id the receiving task has seen (RecentRequestIds), and the
# canonical code of the AbortedError they come in (tf.errors.ABORTED).
DUPLICATE_REQUEST = "request was received twice"
ABORTED = 10
CANCELLED = 1  # tf.errors.CANCELLED
# Refusals in a row a step is run again for: one in 43,000 steps is chance, three in a row
# is not, and is left to a new session, then to the lost-ps path.
DUPLICATE_RETRIES = 3
# A session broken by a refused duplicate is made anew in place at most this often.
DUPLICATE_NEW_SESSION_SECS = 60.0
# How long past its own RunOptions deadline a step may stay out before StepWatchdog takes
# the session for wedged.
STEP_DEADLINE_GRACE_SECS = 60.0


class GaveUp(Exception):
    """The task cannot go on and restarting it would not help: one line, exit status 69."""


class LostPs(Exception):
    """The session to the ps broke (a ps died or restarted): exit 75, to be restarted."""


class WorkerSessionCreator:
    """Like tf's WorkerSessionCreator, but polls for the chief's init every 0.5 s, not 30 s."""

    def __init__(self, scaffold, master, config, max_wait_secs: float):
        self.scaffold, self.master, self.config = scaffold, master, config
        self.max_wait_secs = max_wait_secs

    def create_session(self):

        self.scaffold.finalize()
        manager = tf.compat.v1.train.SessionManager(
            local_init_op=self.scaffold.local_init_op,
            ready_op=self.scaffold.ready_op,
            ready_for_local_init_op=self.scaffold.ready_for_local_init_op,
            graph=tf.compat.v1.get_default_graph(),
            recovery_wait_secs=0.5)
        try:
            return manager.wait_for_session(self.master, config=self.config,
                                            max_wait_secs=self.max_wait_secs)
        except tf.errors.DeadlineExceededError:
            raise GaveUp(f"the chief (worker 0) did not initialize the variables on the ps "
                         f"within --connect-timeout {self.max_wait_secs:g} s; is it "
                         "running?") from None


class ChiefSessionCreator:
    """The chief's session: carries on from the globals when the ps still holds them, else
    restores the latest checkpoint (or initializes a new run), as ChiefSessionCreator does.

    A restarted chief whose ps kept running must not restore: the variables on the ps are
    newer than any checkpoint (the other workers trained on while it was away), and a
    restore would throw that away.
    """

    def __init__(self, scaffold, master, config, checkpoint: str | None):
        """checkpoint: the prefix to restore from (checkpoints.restorable_checkpoint), or None
        for a new run."""

        self.scaffold, self.master, self.config = scaffold, master, config
        self.restoring = tf.compat.v1.train.ChiefSessionCreator(
            scaffold=scaffold, master=master, config=config,
            checkpoint_filename_with_path=checkpoint)
        self.checkpoint = checkpoint

    def create_session(self):

        self.scaffold.finalize()
        session = tf.compat.v1.Session(self.master, graph=tf.compat.v1.get_default_graph(),
                                       config=self.config)
        try:
            uninitialized = session.run(self.scaffold.ready_for_local_init_op)
            if len(uninitialized) == 0:
                session.run(self.scaffold.local_init_op)
                print(f"{PROG}: worker 0 (chief) carries on from the variables on the ps",
                      flush=True)
                return session
        except BaseException:
            session.close()
            raise
        session.close()
        print(f"{PROG}: worker 0 (chief) " + (f"restores {self.checkpoint}" if self.checkpoint
                                              else "initializes new variables"), flush=True)
        return self.restoring.create_session()


def gist(error: BaseException) -> str:
    """The line of a TF error that says what happened. A distributed graph-mode error reads
    "Graph execution error:", then a status line ("UNAVAILABLE: From /job:ps/...:") and the
    runtime's message ("Socket closed"): those two, joined; else the first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if re.match(r"[A-Z][A-Z_]+: ", line):
            return " ".join(lines[i:i + 2])
    if len(lines) > 1 and lines[0] == "Graph execution error:":  # and no status line
        return " ".join(lines[:2])
    return lines[0] if lines else type(error).__name__


class SessionErrors(logging.Handler):
    """Keeps the error that broke the session. MonitoredSession logs it (at INFO, through the
    "tensorflow" logger) before it asks for a new session, which FirstSessionOnly refuses;
    LostPs then names it. The logger's own handlers keep showing WARNING and up only."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.last: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.args and isinstance(record.args[-1], BaseException):
            self.last = record.args[-1]

    @classmethod
    def install(cls) -> SessionErrors:
        logger = logging.getLogger("tensorflow")
        for handler in logger.handlers:
            handler.setLevel(max(handler.level, logger.getEffectiveLevel()))
        handler = cls()
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        return handler


class FirstSessionOnly:
    """Wraps a session creator for MonitoredSession: waits for the ps before the first
    session, and refuses to make a second one, but for a session a duplicate request broke.

    MonitoredSession recreates its session in place after a ps failure and would wait
    for the ps forever, deaf to signals. Refusing turns that into LostPs: the process
    exits and its supervisor restarts it (see the module docstring). A refused duplicate
    request that run_step could not run again (an actor's step, which the coordinator
    reports, or refusals that repeat) leaves the ps intact: a new session is made in place,
    at most once every DUPLICATE_NEW_SESSION_SECS (more often is not chance).
    """

    def __init__(self, creator, spec, timeout: float):
        self.creator, self.spec, self.timeout = creator, spec, timeout
        self.established = False
        self.errors = SessionErrors.install()
        self.renewed_at = -math.inf

    def create_session(self):
        if self.established:
            cause, self.errors.last = self.errors.last, None
            if (cause is not None and is_duplicate_request(cause)
                    and time.monotonic() - self.renewed_at >= DUPLICATE_NEW_SESSION_SECS):
                self.renewed_at = time.monotonic()
                print(f"{PROG}: warning: {self.spec.job} {self.spec.task}: "
                      f"{describe_duplicate(cause)}; making a new session (the ps kept its "
                      "variables)", flush=True)
            else:
                raise LostPs("the session to the ps broke" + (
                    f": {type(cause).__name__}: {gist(cause)}" if cause is not None
                    else " (a ps stopped or restarted)")) from cause
        wait_for_ps(self.spec, self.timeout)
        session = self.creator.create_session()
        self.established = True
        return session


def wait_for_ps(spec, timeout: float) -> None:
    """Return once every ps task accepts connections; GaveUp after `timeout` seconds.

    A TF session to a missing ps blocks in C++ without a word (and without a way out), so
    we wait here, in Python, where signals work and the user is told what we wait for.
    """

    began = time.monotonic()
    next_message = began
    for index, address in enumerate(spec.cluster["ps"]):
        host, port = split_host_port(address)
        while True:
            try:
                socket.create_connection((host, port), timeout=1.0).close()
                break
            except OSError:
                pass
            waited = time.monotonic() - began
            if waited >= timeout:
                raise GaveUp(f"ps task {index} at {address} did not answer within "
                             f"--connect-timeout {timeout:g} s; is it running and reachable?")
            if time.monotonic() >= next_message:
                next_message += WAIT_MESSAGE_SECS
                print(f"{PROG}: {spec.job} {spec.task} waiting for ps task {index} at {address} "
                      f"({waited:.0f} s of --connect-timeout {timeout:g} s)", flush=True)
            time.sleep(0.5)


def session_creator(spec, scaffold, master: str, config, connect_timeout: float,
                    checkpoint: str | None = None) -> FirstSessionOnly:
    """The session creator of worker `spec` for its MonitoredSession: the chief's (restoring
    `checkpoint`, the prefix checkpoints.restorable_checkpoint found, when the ps lost the
    globals) or another worker's, behind FirstSessionOnly."""
    if spec.is_chief:
        creator = ChiefSessionCreator(scaffold, master, config, checkpoint)
    else:
        creator = WorkerSessionCreator(scaffold, master, config, connect_timeout)
    return FirstSessionOnly(creator, spec, connect_timeout)


def lost_ps_errors() -> tuple[type[BaseException], ...]:
    """What a broken session to the ps raises: LostPs, and TF's errors for a ps that went
    away (Unavailable, Aborted) or a step stuck on an unreachable one (DeadlineExceeded, by
    the step's timeout)."""

    return (LostPs, tf.errors.UnavailableError, tf.errors.AbortedError,
            tf.errors.DeadlineExceededError)


def report_lost_ps(spec, error: BaseException) -> None:
    """The lines a worker leaves before it exits to be restarted: one on stderr (the gist,
    which the launcher's log shows), and the whole error for the log."""
    print(f"{PROG}: {spec.job} {spec.task} lost the ps ({gist(error)}); exiting to be "
          "restarted", file=sys.stderr, flush=True)
    # The whole message, for the log only: which peer and which op, when the gist is not
    # enough to tell why.
    cause = error.__cause__ or error
    print(f"{PROG}: the error in full: {type(cause).__name__}: {cause}", flush=True)


class StepWatchdog:
    """Calls on_stall(seconds out) once a step has been out `limit` seconds.

    A step's RunOptions deadline ends one stuck on an unreachable ps (DeadlineExceeded, a
    lost ps). Once in a 16-worker Pong run a step outlived it: the ps refused its part as a
    duplicate request and the worker's own partition never answered, so session.run never
    returned, the worker learned nothing for the run's second half, and the launcher waited
    for it to the run's deadline (docs/learning/many-workers/runs.md, "Sixteen workers on the
    gradient pool, seed 1"). Python cannot interrupt that call; this thread sees it, and
    on_stall ends the process for its supervisor to start it again."""

    def __init__(self, limit: float, on_stall: Callable[[float], None],
                 poll_secs: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self._on_stall = on_stall
        self._clock = clock
        self._started: float | None = None
        self._stalled = False
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(poll_secs,),
                                        name="step-watchdog", daemon=True)
        self._thread.start()

    def __enter__(self) -> StepWatchdog:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Watches what runs inside, until it returns or raises."""
        self.start()
        try:
            yield
        finally:
            self.end()

    def start(self) -> None:
        """A step begins."""
        self._started = self._clock()

    def end(self) -> None:
        """The step returned (or raised)."""
        self._started = None

    def check(self) -> bool:
        """Whether the step out now has been out past the limit (on_stall called, once)."""
        started = self._started
        if self._stalled or started is None or self._clock() - started < self.limit:
            return self._stalled
        self._stalled = True
        self._on_stall(self._clock() - started)
        return True

    def close(self) -> None:
        self._closed.set()
        self._thread.join()

    def _watch(self, poll_secs: float) -> None:
        while not self._closed.wait(poll_secs) and not self.check():
            pass


def is_duplicate_request(error: BaseException) -> bool:
    """Whether `error` is a task's refusal of a request whose id it had seen: an AbortedError
    (by its code, so TF need not be imported) saying "request was received twice", or a
    CancelledError that carries it (the step's part on the worker, a dequeue waiting for a
    rollout, cancelled because the ps refused its part: seen on a loaded 2-core machine with
    16 workers). The task that refused it is alive and ran nothing of it (see the module
    docstring)."""
    return (getattr(error, "error_code", None) in (ABORTED, CANCELLED)
            and DUPLICATE_REQUEST in str(error))


def describe_duplicate(error: BaseException) -> str:
    """One short line for a refused duplicate request: TF's message carries the whole
    request, which can run to kilobytes."""
    refusal = re.search(r"(?:From (/job:[^:]+:\d+/task:\d+):\s*)?"
                        r"The same (.+?) request was received twice", str(error))
    if refusal is None and getattr(error, "error_code", None) == CANCELLED:
        return "the step run again after a refused duplicate request was cancelled"
    task, method = refusal.groups() if refusal else (None, None)
    return (f"{task or 'a task'} refused {'a ' + method if method else 'a'} request as one it "
            "had already received (a repeated request id, docs/operations.md), and ran none "
            "of it")


def retry_duplicates(run: Callable[[], T], on_duplicate: Callable[[BaseException, int], None]
                     | None = None, retries: int = DUPLICATE_RETRIES) -> T:
    """run(), again after each refusal of a duplicate request (is_duplicate_request), up to
    `retries` in a row; on_duplicate(error, count in a row) is told of each. Any other error,
    or one refusal more, is raised.

    The step run again right after a refusal may itself be cancelled (a CancelledError,
    "RecvFromRemoteAsync is cancelled", on a read of the ps: seen once in a 40M-frame Q*bert
    run, where it cost worker 0 a restart): while the refused step is being torn down, that
    is part of the refusal, and is run again too, within the same `retries`."""
    for attempt in itertools.count(1):
        try:
            return run()
        except Exception as error:
            torn_down = attempt > 1 and getattr(error, "error_code", None) == CANCELLED
            if attempt > retries or not (is_duplicate_request(error) or torn_down):
                raise
            if on_duplicate is not None:
                on_duplicate(error, attempt)
    raise AssertionError("unreachable")


def run_step(session, fetches, options=None,
             on_duplicate: Callable[[BaseException, int], None] | None = None):
    """session.run(fetches, options=options) of a MonitoredSession, run again in the same
    session when the ps refused it as a duplicate request (retry_duplicates).

    Through run_step_fn, whose step sees the error first: MonitoredSession.run would take
    any AbortedError for a lost ps and ask for a new session (FirstSessionOnly: LostPs)."""
    def step(step_context):
        return retry_duplicates(
            lambda: step_context.run_with_hooks(fetches, options=options), on_duplicate)
    return session.run_step_fn(step)
