"""A remote mount whose server vanishes without a word (its host gone, a partition: every
packet dropped, no reset) fails what needs the server after seconds, not after its request's
30 s timeout, every request of the mount waiting meanwhile: a connection is given up once what
it sent has gone unacknowledged for ``UNACKED_TIMEOUT_S`` (``TCP_USER_TIMEOUT``), and so is a
connection whose keepalive probes go unacknowledged while a request waits for its answer.

Measured with this setup (an append while the server's port was black-holed, and a cached
listing made meanwhile): 60 s before a read that timed out was no longer sent again, 30 s
after, 10.5 s now; a request the server took before vanishing, 30 s before the keepalive
probes, 11.2 s now.

The server and the mount run in a network namespace of their own (``unshare -n``), where
``iptables`` drops the server's packets without touching the host's network.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .mounted import require_fuse

pytestmark = pytest.mark.mounted

# Run inside the namespace: the server and a remote mount on a store, a file saved, the
# server's port black-holed both ways, an append made; what it got and what the mount said.
# With "answering" the server is stopped first (SIGSTOP: its kernel still acknowledges), the
# append's request sent and acknowledged, and only then the port black-holed: a server gone
# while the mount waits for its answer.
SCRIPT = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys, threading, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from tests.mounted import remote_mount, token_for
    from tests.served import start_server
    from mnemofs.store import MemoryService, make_engine

    tmp, when = Path(sys.argv[1]), sys.argv[3]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    url = f"sqlite:///{tmp / 'm.db'}"
    service = MemoryService(make_engine(url), actor="tests")
    store = service.create_store("Far").id
    session = service.create_session([{"memory_store_id": store}])
    server = start_server(url, tmp / "server.log")
    port = server.url.rsplit(":", 1)[1]
    rules = [["INPUT", "-p", "tcp", "--dport", port, "-j", "DROP"],
             ["INPUT", "-p", "tcp", "--sport", port, "-j", "DROP"]]
    got = {}

    def append(note):
        began = time.monotonic()
        try:
            with open(note, "a") as f:
                f.write("lost\\n")
            got["errno"] = 0
        except OSError as exc:
            got["errno"] = exc.errno
        got["seconds"] = round(time.monotonic() - began, 1)  # printed, not asserted

    try:
        with remote_mount(server.url, token_for(url, session.id), tmp / "mnt") as daemon:
            note = daemon.root / "far" / "a.md"
            note.write_text("saved\\n")
            appending = threading.Thread(target=append, args=(note,))
            if when == "answering":
                os.kill(server.process.pid, signal.SIGSTOP)
                appending.start()
                time.sleep(1)  # sent and acknowledged, no answer
            for rule in rules:
                subprocess.run(["iptables", "-A", *rule], check=True)
            if when != "answering":
                appending.start()
            appending.join()
            got["refusals"] = (daemon.root / ".mnemofs" / "refusals").read_text()
            if when == "answering":  # gone for good: the request it holds is never made
                server.process.kill()
            for rule in rules:
                subprocess.run(["iptables", "-D", *rule], check=True)
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        server.stop()
    got["stored"] = service.find_memory(store, "/a.md").content
    print(json.dumps(got))
    """
)


@pytest.mark.parametrize("when", ["sending", "answering"])
def test_a_server_that_vanished_fails_a_change_after_seconds(tmp_path: Path, when: str) -> None:
    """``sending``: the request is never acknowledged (``TCP_USER_TIMEOUT``); ``answering``:
    it was, and the server vanished before answering (keepalive probes, unacknowledged)."""
    require_fuse()
    script = tmp_path / "vanish.py"
    script.write_text(SCRIPT)
    root = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run(
        ["unshare", "-n", sys.executable, str(script), str(tmp_path), root, when],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{when}: refused after {got['seconds']} s")
    assert got["errno"] == errno.EIO
    assert got["stored"] == "saved\n"  # the append is not made, and said so
    # TCP's own timeout (ETIMEDOUT) gave up: the request's 30 s would say only "timed out".
    assert "Connection timed out" in got["refusals"], got["refusals"]
