"""Fixtures of the HTTP API tests: the real server process on each backend, an admin key, the
official SDK pointed at it, and the seed's own examples (its Python and curl blocks)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import pytest

from mnemofs.store import MemoryService, make_engine

from .conftest import _fresh_pg_engine, pg_url
from .served import Server, serving

# The seed document whose examples the API must run unchanged (a copy: CI has only the repo).
SEED = Path(__file__).with_name("data") / "seed-004-agent-memory.txt"


@dataclass
class Api:
    server: Server
    service: MemoryService  # the same database, in this process: to check what the server did
    key: str
    key_id: str
    db_url: str

    def client(self, key: str | None = None, **options: object) -> anthropic.Anthropic:
        """The official SDK, strict: a missing or mistyped field in a reply fails the call."""
        return anthropic.Anthropic(
            api_key=key or self.key,
            base_url=self.server.url,
            _strict_response_validation=True,
            **options,  # type: ignore[arg-type]
        )


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    tmp = tmp_path_factory.mktemp("api")
    if request.param == "sqlite":
        url = f"sqlite:///{tmp / 'api.db'}"
        engine = make_engine(url)
    else:
        url = pg_url()
        engine = _fresh_pg_engine()
    service = MemoryService(engine, actor="cli")
    key = service.create_api_key("tests")
    assert key.key is not None
    try:
        with serving(url, tmp / "server.log") as server:
            yield Api(server, service, key.key, key.id, url)
    finally:
        service.close()
        if request.param == "sqlite":
            engine.dispose()


def seed_blocks(language: str) -> list[str]:
    """The seed's code blocks in one language, in document order, dedented."""
    lines = SEED.read_text().splitlines()
    blocks: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == language and not lines[i].startswith(" "):
            i += 1
            body: list[str] = []
            while i < len(lines) and (not lines[i] or lines[i].startswith(" ")):
                body.append(lines[i])
                i += 1
            blocks.append(textwrap.dedent("\n".join(body)).strip("\n"))
            continue
        i += 1
    return blocks
