"""The private network (system/netns.py): a network namespace with only loopback, for the
root user and an unprivileged one, and the refusal that tells a threaded process to enter
it before its threads start.

Each probe runs in a child process, so the test process itself stays on the host network.
What the launcher, the tasks and the benchmarks do with it is in test_security.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from a3c_graph.system import netns

REPO = Path(__file__).resolve().parents[3]
NOBODY = 65534


def run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `argv` to its end; past `timeout`, subprocess.run kills it (by its pid)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env=env)


needs_host_network = pytest.mark.skipif(
    netns.is_isolated(), reason="this machine's own network has only loopback")


PROBE = textwrap.dedent("""
    import json, os, socket, sys
    if sys.argv[1:] == ["threads"]:
        import numpy  # its BLAS starts threads
    from a3c_graph.system import netns
    try:
        netns.enter_private_network()
    except netns.NamespaceError as error:
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        sys.exit(0)
    server = socket.create_server(("127.0.0.1", 0))
    socket.create_connection(server.getsockname(), timeout=5).close()
    lines = open("/proc/self/net/dev").read().splitlines()[2:]
    print(json.dumps({"interfaces": sorted(line.split(":")[0].strip() for line in lines),
                      "isolated": netns.is_isolated(), "uid": os.getuid(), "gid": os.getgid()}))
""")


def probe(prefix: list[str] = (), *args: str) -> dict:
    result = run([*prefix, sys.executable, "-c", PROBE, *args])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def as_nobody() -> list[str]:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a probe as an unprivileged user")
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    # A checkout or virtualenv in a private directory (mktemp -d, /root) is out of nobody's
    # reach: then there is nothing to learn from running the probe as nobody.
    reach = run([*prefix, sys.executable, "-c", "import numpy, a3c_graph.system.netns"])
    if reach.returncode != 0:
        last = (reach.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"user {NOBODY} cannot use this checkout's Python ({last})")
    return prefix


def test_a_private_network_has_only_loopback_and_it_is_up():
    # In a child process: the test process itself stays on the host network.
    seen = probe()
    if "error" in seen:
        pytest.skip(seen["message"])
    assert seen == {"interfaces": ["lo"], "isolated": True, "uid": os.getuid(),
                    "gid": os.getgid()}


def test_an_unprivileged_user_gets_one_through_a_user_namespace_keeping_its_uid():
    seen = probe(as_nobody())
    if "error" in seen:
        pytest.skip(seen["message"])
    assert seen == {"interfaces": ["lo"], "isolated": True, "uid": NOBODY, "gid": NOBODY}


def test_an_unprivileged_process_with_threads_is_told_to_enter_before_they_start():
    seen = probe(as_nobody(), "threads")
    if seen.get("error") != "NeedsSingleThread" and "limit" in seen.get("message", ""):
        pytest.skip(seen["message"])
    assert seen["error"] == "NeedsSingleThread", seen
    assert "single-threaded" in seen["message"]


@needs_host_network
def test_the_host_network_is_not_isolated():
    assert not netns.is_isolated()
