"""The worker's session to the cluster, without a TF server: waiting for the ps, refusing a
second session, and the line that says why a session broke.

A real worker waiting for a missing ps is in test_supervision.py; losing the ps and being
restarted in test_supervision.py and test_multihost.py.
"""

from __future__ import annotations

import logging
import socket

import pytest

from a3c_graph import sessions
from a3c_graph.cluster import TaskSpec


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
