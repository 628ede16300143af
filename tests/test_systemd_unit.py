"""contrib/systemd/mnemofs.service, its commands run as systemd would run them (this machine
has no systemd to run it): the shared bind mount, the daemon in the foreground, a save, SIGTERM,
a clean exit with the save kept, and a restart on the same mount point."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mnemofs.store import MemoryService, make_engine

from .mounted import require_fuse

pytestmark = pytest.mark.mounted

UNIT = Path(__file__).resolve().parent.parent / "contrib" / "systemd" / "mnemofs.service"


def unit_settings() -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in UNIT.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )


def test_unit_commands_mount_save_and_restart(tmp_path: Path) -> None:
    require_fuse()
    root = tmp_path / "memory"
    db = tmp_path / "mnemofs.db"
    service = MemoryService(make_engine(f"sqlite:///{db}"), actor="api")
    store = service.create_store("Notes").id
    session = service.create_session([{"memory_store_id": store}], mount_root=str(root))
    env = {
        "MNEMOFS_DB": str(db),
        "MNEMOFS_SESSION": session.id,
        "MNEMOFS_AGENT_UID": "1000",
        "MNEMOFS_AGENT_GID": "1000",
    }
    settings = unit_settings()
    assert settings["KillSignal"] == "SIGTERM"

    def command(key: str) -> str:
        line = settings[key].replace("/mnt/memory", str(root))
        line = line.replace("/usr/local/bin/mnemofs", f"{sys.executable} -m mnemofs")
        return re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], line)

    pre = shlex.split(command("ExecStartPre"))
    try:
        for _ in range(2):  # start, save, stop; then the same again (a restart)
            subprocess.run(pre, check=True)
            daemon = subprocess.Popen(
                shlex.split(command("ExecStart")),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={"PATH": "/usr/bin:/bin", "MNEMOFS_DB": str(db)},
            )
            try:
                assert daemon.stdout is not None
                assert daemon.stdout.readline().startswith("mnemofs: mounted")
                with open(root / "notes" / "log.md", "a") as f:
                    f.write("one more line\n")
                daemon.send_signal(signal.SIGTERM)
                assert daemon.wait(timeout=30) == 0
            finally:
                if daemon.poll() is None:  # only then: fusermount3 would also drop the bind
                    daemon.kill()
                    subprocess.run(["fusermount3", "-u", "-z", str(root)], capture_output=True)
        # The shared bind mount outlives the daemon, ready for the next start.
        assert subprocess.run(["mountpoint", "-q", str(root)]).returncode == 0
        memory = service.find_memory(store, "/log.md")
        assert memory.content == "one more line\none more line\n"
    finally:
        subprocess.run(["umount", "-l", str(root)], capture_output=True)
        service.close()
