"""What ``mnemofs serve`` holds of a shared PostgreSQL server under load: its connections are
bounded by ``--connections``, however many requests come at once, and none is lost."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest

from mnemofs.store import Engine, MemoryService

from .mounted import token_for
from .pgstat import number, watching
from .served import serving

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("db_url", ["postgres"], indirect=True)]


def test_a_burst_of_requests_holds_few_connections(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """The framework's thread pool runs 40 calls at once and each thread keeps a connection:
    100 saves at once left the process holding 41, so a few processes or hosts used up the
    database server's 100 (``max_connections``) and the next connection anywhere failed."""
    service = MemoryService(engine, actor="tests")
    store = service.create_store("Burst").id
    token = token_for(db_url, service.create_session([{"memory_store_id": store}]).id)
    watch = watching(db_url)

    def connections() -> int:
        return number(
            watch,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend'",
        )

    failed: list[BaseException] = []

    def save(server_url: str, i: int) -> None:
        body = json.dumps({"path": f"/b/{i}.md", "content": f"note {i}"}).encode()
        request = urllib.request.Request(
            f"{server_url}/mnemofs/v1/memory_stores/{store}/saves",
            data=body,
            method="POST",
            headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                assert response.status == 200
        except BaseException as exc:  # reported below, from the test's thread
            failed.append(exc)

    # This test's own service is closed first: its background threads' connections (the index's
    # catch-up, the notices) came and went during the burst, counted as the server's (7, once).
    service.close()
    before = connections()  # the watch's
    with serving(db_url, tmp_path / "server.log", args=("--connections", "4")) as server:
        threads = [threading.Thread(target=save, args=(server.url, i)) for i in range(100)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        held = connections() - before
    assert failed == []
    assert held <= 4 + 2, held  # the requests' 4, and the search index's catch-up and a spare
    service = MemoryService(engine, actor="tests")
    assert service.get_store(store).memory_count == 100
    watch.close()
    service.close()
