"""The command lines' shared contract (a3c_graph/system/cli.py): one error line, the exit statuses,
and the stop-signal flag.

Every entry point's own bad input is tested where it lives (test_worker_cli.py,
test_launch_checks.py, test_devices.py, test_evaluate.py, test_harness.py,
test_tf2_variants.py, test_learning.py); the supervisor's reading of a worker's exit status
is in test_supervisor.py.
"""

from __future__ import annotations

import signal

import pytest

from a3c_graph.system import cli


def parser(help_hint: bool) -> cli.OneLineParser:
    parser = cli.OneLineParser(prog="prog", help_hint=help_hint)
    parser.add_argument("--workers", type=int)
    return parser


def test_a_bad_flag_raises_usage_error_instead_of_printing_the_usage_block(capsys):
    with pytest.raises(cli.UsageError) as raised:
        parser(help_hint=True).parse_args(["--workers", "two"])
    assert str(raised.value) == ("argument --workers: invalid int value: 'two' "
                                 "(see prog --help)")
    assert capsys.readouterr() == ("", "")  # nothing printed, nothing exited


def test_without_the_help_hint_the_message_is_argparses_own():
    with pytest.raises(cli.UsageError, match=r"^unrecognized arguments: --bogus$"):
        parser(help_hint=False).parse_args(["--bogus"])


def test_help_still_prints_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exited:
        parser(help_hint=True).parse_args(["--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage: prog")


def test_fail_prints_one_error_line_and_returns_the_status(capsys):
    assert cli.fail("prog", cli.UsageError("--workers must be at least 1")) == cli.EXIT_USAGE == 2
    assert cli.fail("prog", "gave up", cli.EXIT_GAVE_UP) == 69
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == ["prog: error: --workers must be at least 1",
                                "prog: error: gave up"]


class _TFLikeError(Exception):
    """An error whose `message` is what TF's OpError keeps apart from its str()."""

    def __init__(self, message: str):
        super().__init__(f"Graph execution error:\n\n{message}\n  [[node save/restore]]")
        self.message = message


@pytest.mark.parametrize("error, limit, line", [
    (ValueError("bad value\n  more detail"), None, "bad value"),
    (ValueError("  \n"), None, "ValueError"),  # says nothing: its type
    (_TFLikeError("Key pi/w not found\nStack trace"), None, "Key pi/w not found"),
    (ValueError("x" * 30), 10, "xxxxxxx..."),
    (ValueError("x" * 10), 10, "x" * 10),
])
def test_first_line_is_the_one_line_an_error_line_relays(error, limit, line):
    assert cli.first_line(error, limit) == line


def test_the_exit_statuses_the_supervisor_reads_are_distinct():
    statuses = [cli.EXIT_CRASH, cli.EXIT_USAGE, cli.EXIT_GAVE_UP, cli.EXIT_LOST_PS,
                cli.EXIT_STORAGE]
    assert statuses == [1, 2, 69, 75, 74]
    # `status` and `stop` say "no live run" with a status no task exits with.
    assert cli.EXIT_NOT_LIVE == 3 and cli.EXIT_NOT_LIVE not in statuses
    assert cli.SIGNAL_EXIT == {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


def test_the_first_signal_is_kept_and_another_marks_a_repeat():
    stop = cli.StopSignals((signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
    assert (stop.received, stop.repeated) == (None, False)
    stop._handle(signal.SIGTERM, None)
    assert (stop.received, stop.repeated, stop.exit_code) == (signal.SIGTERM, False, 143)
    stop._handle(signal.SIGINT, None)  # a second Ctrl-C: stop waiting politely
    assert (stop.received, stop.repeated, stop.exit_code) == (signal.SIGTERM, True, 143)


def test_installed_handlers_turn_a_signal_into_the_flag():
    stop = cli.StopSignals((signal.SIGUSR1,))
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        stop.install()
        signal.raise_signal(signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert stop.received == signal.SIGUSR1
