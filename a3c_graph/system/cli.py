"""What every command line promises its user and its supervisor, written once.

Every entry point (a worker task, the launcher, evaluate, the Slurm job's end, the benchmark
harnesses and the TF2 variants) keeps the same contract. A bad input ends in one line on
stderr, "PROG: error: MESSAGE", and exit status 2: never argparse's usage block, never a
traceback, because the launcher relays a task's error line as is and a user reads one line.
The exit statuses are a protocol too: the supervisor reads a worker's (supervisor.py's
restart_decision) to decide whether to start it again, and a launcher's caller reads the
launcher's. The parser, the usage error, the exit codes and the stop-signal flag live here,
once, and the modules import them.

Only the standard library is imported: a bad flag is told before TF or gymnasium loads.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

EXIT_CRASH = 1
EXIT_USAGE = 2
# A worker task's own statuses, which the supervisor reads (a3c_graph/worker.py).
# EX_UNAVAILABLE: restarting it would not help (no ps in time, losses that stay NaN/inf).
# Not 3, which is what `status` and `stop` say of a log dir with no live run (LSB's "not
# running"); a worker gave up with 3 before.
EXIT_GAVE_UP = 69
EXIT_LOST_PS = 75  # EX_TEMPFAIL: the session to the ps broke; start it again
# A task's, and then the launcher's: the log dir cannot be written (full, read-only, not
# permitted: a3c_graph/rundir/storage.py); no restart can cure it.
EXIT_STORAGE = 74  # EX_IOERR
# The launcher's `status` and `stop`: there is no live run in the log dir.
EXIT_NOT_LIVE = 3
# A command stopped by a signal exits 128 + its number, as a shell reports it.
SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}

# The worker task's program name: the prefix of its error line, which the launcher relays.
WORKER_PROG = "a3c_graph.worker"


class UsageError(Exception):
    """Bad input from the user: shown as one line on stderr, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors raise UsageError instead of printing the usage block and exiting.

    help_hint: end the message with "(see PROG --help)"; the launcher, the Slurm job's end,
    ps_capacity and the TF2 variants say it, the worker, evaluate and the harnesses do not.
    """

    def __init__(self, *args, help_hint: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.help_hint = help_hint

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)" if self.help_hint else message)


def first_line(error: BaseException, limit: int | None = None) -> str:
    """The first line of what `error` says (a TF error's message, without its traceback of
    ops), or its type's name if it says nothing; cut to `limit` characters with "..."."""
    text = str(getattr(error, "message", None) or error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    return line if limit is None or len(line) <= limit else line[:limit - 3] + "..."


def fail(prog: str, error: object, code: int = EXIT_USAGE) -> int:
    """Print the one error line of `prog` and return its exit status."""
    print(f"{prog}: error: {error}", file=sys.stderr, flush=True)
    return code


class StopSignals:
    """Signals turned into a flag that a loop checks, so it can stop what it runs in order.

    The first signal is `received`; another one after it sets `repeated` (a second Ctrl-C:
    stop waiting politely). Which signals depends on who listens: the launcher also takes a
    terminal's hang-up, since its tasks run in sessions of their own and must outlive it.
    """

    def __init__(self, signums: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> None:
        self.signums = tuple(signums)
        self.received: int | None = None
        self.repeated = False

    def install(self) -> None:
        for signum in self.signums:
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        if self.received is None:
            self.received = signum
        else:
            self.repeated = True

    @property
    def exit_code(self) -> int:
        """The status of a command that stopped because of the signal it received."""
        return SIGNAL_EXIT.get(self.received or signal.SIGINT, 130)


def as_flags(options: Mapping[str, Any], switches: Sequence[str] = ()) -> list[str]:
    """Options as a command's flags, the one way every caller writes them (the Python API,
    the background launcher, config_to_argv): name_x=v is --name-x=v (one token, so a
    negative number is not read as a flag), a tuple or list comma-separated, a bool
    --name=true/false, None left out. `switches` name the flags that take no value, given
    when True; any other name gets a value, so a parser refuses e.g. dry_run=True."""
    flags = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if name in switches:
            flags += [flag] if value else []
        elif value is None:
            continue
        elif isinstance(value, bool):
            flags.append(f"{flag}={str(value).lower()}")
        elif isinstance(value, (tuple, list)):
            flags.append(f"{flag}={','.join(str(v) for v in value)}")
        else:
            flags.append(f"{flag}={os.fspath(value) if isinstance(value, os.PathLike) else value}")
    return flags
