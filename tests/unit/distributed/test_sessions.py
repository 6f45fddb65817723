"""The worker's session to the cluster, without a TF server: waiting for the ps, refusing a
second session, and the line that says why a session broke.

A real worker waiting for a missing ps is in test_supervision.py; losing the ps and being
restarted in test_supervision.py and test_multihost.py.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading

import pytest

from a3c_graph.distributed import sessions
from a3c_graph.distributed.cluster import TaskSpec


def spec_with_ps(address: str) -> TaskSpec:
    return TaskSpec(cluster={"ps": [address], "worker": ["127.0.0.1:1"]}, job="worker", task=0)


@pytest.fixture
def listening_ps():
    """A loopback address something listens on, as a ps that is up."""
    server = socket.create_server(("127.0.0.1", 0))
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


@pytest.fixture
def silent_ps():
    """A loopback address nothing listens on, as a ps that is not up."""
    probe = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{probe.getsockname()[1]}"
    probe.close()
    return address


def test_a_ps_that_accepts_connections_is_waited_for_no_longer(listening_ps):
    sessions.wait_for_ps(spec_with_ps(listening_ps), timeout=5.0)


def test_a_ps_that_never_answers_is_given_up_on_naming_it_and_the_timeout(silent_ps, capsys):
    with pytest.raises(sessions.GaveUp) as raised:
        sessions.wait_for_ps(spec_with_ps(silent_ps), timeout=0.6)
    assert str(raised.value) == (f"ps task 0 at {silent_ps} did not answer within "
                                 "--connect-timeout 0.6 s; is it running and reachable?")
    # The user is told what the worker waits for while it waits.
    assert f"worker 0 waiting for ps task 0 at {silent_ps}" in capsys.readouterr().out


class CountingCreator:
    def __init__(self):
        self.created = 0

    def create_session(self):
        self.created += 1
        return f"session {self.created}"


def test_the_first_session_is_made_once_the_ps_answers_and_a_second_is_refused(listening_ps):
    creator = CountingCreator()
    first_only = sessions.FirstSessionOnly(creator, spec_with_ps(listening_ps), timeout=5.0)
    assert first_only.create_session() == "session 1"
    # MonitoredSession asks again after the session broke: the worker exits to be restarted
    # instead of waiting for the ps in place, and says which error broke it.
    broke = RuntimeError("UNAVAILABLE: From /job:ps/replica:0/task:0:\nSocket closed")
    logging.getLogger("tensorflow").info("An error was raised: %s", broke)
    with pytest.raises(sessions.LostPs, match="the session to the ps broke: RuntimeError: "
                       "UNAVAILABLE: From /job:ps/replica:0/task:0: Socket closed") as raised:
        first_only.create_session()
    assert raised.value.__cause__ is broke
    assert creator.created == 1


def test_a_lost_ps_is_told_by_the_status_line_of_tfs_error_not_its_preamble():
    message = ("Graph execution error:\n\n=====================\n"
               "UNAVAILABLE: From /job:worker/replica:0/task:0:\nSocket closed\n"
               "Additional GRPC error information from remote target /job:ps/replica:0/task:0 "
               "while calling /tensorflow.WorkerService/RecvTensor:\n\t [[{{node concat_S1}}]]")
    assert sessions.gist(RuntimeError(message)) == (
        "UNAVAILABLE: From /job:worker/replica:0/task:0: Socket closed")
    assert sessions.gist(RuntimeError("ps task 0 did not answer\nmore")) == (
        "ps task 0 did not answer")
    # No status line: the header alone would say nothing.
    assert sessions.gist(RuntimeError("Graph execution error:\n\nStep 12 was aborted\nmore")) == (
        "Graph execution error: Step 12 was aborted")


def test_a_lost_ps_leaves_one_line_on_stderr_and_the_whole_error_in_the_log(capsys):
    cause = RuntimeError("UNAVAILABLE: From /job:ps/replica:0/task:0:\nSocket closed\ndetail")
    try:
        raise sessions.LostPs("the session to the ps broke") from cause
    except sessions.LostPs as error:
        sessions.report_lost_ps(spec_with_ps("127.0.0.1:1"), error)
    out, err = capsys.readouterr()
    assert err.splitlines() == ["a3c_graph.worker: worker 0 lost the ps (the session to the ps "
                                "broke); exiting to be restarted"]
    assert "the error in full: RuntimeError: UNAVAILABLE" in out and "detail" in out


DUPLICATE = ("From /job:ps/replica:0/task:0:\nThe same RunGraph (Worker) request was received "
             "twice. graph_handle: \"0000000000000003\" step_id: 1003 send { name: \"x\" }")


# What a 16-worker run on a loaded machine got once instead of the AbortedError: the worker's
# dequeue cancelled, TF's recent error logs (in the message) saying why.
CANCELLED_BY_REFUSAL = ("From /job:worker/replica:0/task:4:\nDequeue operation was cancelled\n"
                        "\t [[{{node next_rollout}}]]\nRecent warning and error logs:\n"
                        "  ABORTED: " + DUPLICATE)


class Refusal(Exception):
    """What a TF OpError is to the classifier: an error_code and a message."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.error_code = code


@pytest.mark.parametrize("error, duplicate", [
    (Refusal(sessions.ABORTED, DUPLICATE), True),
    (Refusal(sessions.ABORTED, "The same RecvTensor (GrpcWorker) request was received twice."),
     True),
    # A session the ps lost on its restart, or a step aborted for another reason: a lost ps.
    (Refusal(sessions.ABORTED, "Session 1c2d0e5f4a3b is not found."), False),
    (Refusal(sessions.ABORTED, "Step 12 was aborted"), False),
    (Refusal(14, "The same RunGraph request was received twice"), False),  # UNAVAILABLE
    # The worker's part of a step the ps refused, cancelled, with the refusal in its message;
    # a cancelled step without one is not a refusal.
    (Refusal(sessions.CANCELLED, CANCELLED_BY_REFUSAL), True),
    (Refusal(sessions.CANCELLED, "From /job:worker/replica:0/task:4:\nDequeue operation was "
                                 "cancelled"), False),
    (RuntimeError("The same RunGraph (Worker) request was received twice"), False),
])
def test_only_an_aborted_error_of_a_repeated_request_is_a_duplicate(error, duplicate):
    assert sessions.is_duplicate_request(error) is duplicate


def test_a_duplicate_is_told_in_one_short_line_naming_the_task_and_the_request():
    assert sessions.describe_duplicate(Refusal(sessions.ABORTED, DUPLICATE)) == (
        "/job:ps/replica:0/task:0 refused a RunGraph (Worker) request as one it had already "
        "received (a repeated request id, docs/operations.md), and ran none of it")
    assert sessions.describe_duplicate(Refusal(1, "RecvFromRemoteAsync is cancelled")) == (
        "the step run again after a refused duplicate request was cancelled")
    # The task that refused, not the one whose part was cancelled.
    assert sessions.describe_duplicate(Refusal(sessions.CANCELLED, CANCELLED_BY_REFUSAL)) == (
        sessions.describe_duplicate(Refusal(sessions.ABORTED, DUPLICATE)))


def test_a_refused_step_is_run_again_but_a_refusal_that_repeats_is_raised():
    calls, told = [], []

    def refused_twice():
        calls.append(1)
        if len(calls) <= 2:
            raise Refusal(sessions.ABORTED, DUPLICATE)
        return "fetched"

    assert sessions.retry_duplicates(refused_twice, lambda _, n: told.append(n)) == "fetched"
    assert told == [1, 2]
    # The refusal as it reaches a worker whose part of the step was cancelled by it.
    outcomes = [Refusal(sessions.CANCELLED, CANCELLED_BY_REFUSAL), "fetched"]

    def cancelled_by_the_refusal():
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert sessions.retry_duplicates(cancelled_by_the_refusal) == "fetched"

    def always_refused():
        raise Refusal(sessions.ABORTED, DUPLICATE)

    with pytest.raises(Refusal):
        sessions.retry_duplicates(always_refused, lambda _, n: told.append(n))
    assert told == [1, 2, 1, 2, 3]  # DUPLICATE_RETRIES, then the error

    # A step cancelled right after a refusal (while the refused one is torn down) is part of
    # it and runs again; a cancelled step with no refusal before it is raised.
    outcomes = [Refusal(sessions.ABORTED, DUPLICATE), Refusal(1, "RecvFromRemoteAsync is "
                                                              "cancelled"), "fetched"]

    def refused_then_cancelled():
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert sessions.retry_duplicates(refused_then_cancelled, lambda _, n: told.append(n)) \
        == "fetched"
    assert told == [1, 2, 1, 2, 3, 1, 2]

    def cancelled():
        raise Refusal(1, "RecvFromRemoteAsync is cancelled")

    with pytest.raises(Refusal, match="cancelled"):
        sessions.retry_duplicates(cancelled, lambda _, n: told.append(n))
    assert told == [1, 2, 1, 2, 3, 1, 2]  # raised at once: not run again, nothing told
    del told[:]

    def lost_ps():
        raise Refusal(14, "Socket closed")

    with pytest.raises(Refusal, match="Socket closed"):
        sessions.retry_duplicates(lost_ps, lambda _, n: told.append(n))
    assert told == []


def test_a_step_refused_as_a_duplicate_runs_again_then_in_a_new_session(listening_ps):
    """A real MonitoredSession whose session raises TF's own AbortedError of a refused
    duplicate (an op cannot: a numpy_function's errors become UnknownError). run_step runs
    the step again in the same session; refusals past DUPLICATE_RETRIES, or a refusal that
    reaches MonitoredSession (as an actor thread's does, through the coordinator), get a new
    session in place; a second within DUPLICATE_NEW_SESSION_SECS is a lost ps."""
    import tensorflow as tf

    tf1 = tf.compat.v1

    class RefusingSession:
        """A tf.Session whose next `refusals` runs are refused as duplicates."""

        def __init__(self, session, refusals):
            self.session, self.refusals = session, refusals

        def __getattr__(self, name):
            return getattr(self.session, name)

        def run(self, *args, **kwargs):
            if self.refusals:
                self.refusals -= 1
                raise tf.errors.AbortedError(None, None, DUPLICATE)
            return self.session.run(*args, **kwargs)

    class Creator:
        """Its first session refuses `first` runs, the later ones none."""

        def __init__(self, first):
            self.sessions, self.first = [], first

        def create_session(self):
            refusals = 0 if self.sessions else self.first
            self.sessions.append(RefusingSession(tf1.Session(graph=graph), refusals))
            return self.sessions[-1]

    def monitored(creator):
        return tf1.train.MonitoredSession(session_creator=sessions.FirstSessionOnly(
            creator, spec_with_ps(listening_ps), 5.0))

    graph = tf.Graph()
    with graph.as_default():
        fetch = tf.constant(1.0) + 1.0
        told = []
        creator = Creator(first=sessions.DUPLICATE_RETRIES)
        with monitored(creator) as session:
            assert sessions.run_step(session, fetch,
                                     on_duplicate=lambda _, n: told.append(n)) == 2.0
            assert told == [1, 2, 3] and len(creator.sessions) == 1  # the same session
        creator = Creator(first=sessions.DUPLICATE_RETRIES + 1)
        with monitored(creator) as session:
            assert sessions.run_step(session, fetch) == 2.0
            assert len(creator.sessions) == 2  # a new one, made in place
            creator.sessions[-1].refusals = sessions.DUPLICATE_RETRIES + 1
            with pytest.raises(sessions.LostPs, match="broke: AbortedError"):
                sessions.run_step(session, fetch)  # again within the minute: not chance
        creator = Creator(first=1)
        with monitored(creator) as session:
            assert session.run(fetch) == 2.0  # the way an actor's refusal reaches it
            assert len(creator.sessions) == 2


# ---------------------------------------------------------------------------------------------
# A step that never returns (StepWatchdog).
# ---------------------------------------------------------------------------------------------

class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_step_out_past_the_limit_is_reported_once_and_a_step_that_returned_never():
    clock, stalls = FakeClock(), []
    with sessions.StepWatchdog(180.0, stalls.append, poll_secs=3600.0,
                               clock=clock) as watchdog:
        with watchdog.step():
            clock.now += 179.0
            assert not watchdog.check() and stalls == []
        clock.now += 1000.0  # returned in time: however long the wait after it
        assert not watchdog.check() and stalls == []
        with pytest.raises(RuntimeError), watchdog.step():
            raise RuntimeError("a step that raised has ended too")
        clock.now += 1000.0
        assert not watchdog.check() and stalls == []
        watchdog.start()
        clock.now += 181.0
        assert watchdog.check() and stalls == [181.0]
        clock.now += 50.0
        assert watchdog.check() and stalls == [181.0]  # once


def test_the_watchdog_thread_sees_a_stalled_step_without_being_asked():
    clock, stalled = FakeClock(), threading.Event()
    with sessions.StepWatchdog(180.0, lambda seconds: stalled.set(), poll_secs=0.01,
                               clock=clock) as watchdog:
        watchdog.start()
        clock.now += 200.0
        assert stalled.wait(timeout=30.0)


def test_a_wedged_worker_exits_with_the_lost_ps_status_and_one_line():
    """What the watchdog does to a worker: exit 75 at once (the launcher starts it again),
    one line on stderr naming the worker and the time."""
    code = ("from types import SimpleNamespace\n"
            "from a3c_graph.distributed.training import wedged\n"
            "wedged(SimpleNamespace(task=5), 181.4)\n"
            "print('not reached')\n")
    # The child imports TF: on a loaded 2-core machine that alone has taken over 120 s. The
    # timeout only guards against a hang (pytest's own is 600 s a test).
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=480)
    assert done.returncode == 75
    assert "not reached" not in done.stdout
    lines = [line for line in done.stderr.splitlines() if "a3c_graph" in line]
    assert len(lines) == 1 and "worker 5" in lines[0] and "181 s" in lines[0], done.stderr
