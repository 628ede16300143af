"""The database layer: schema, engine setup and the service that owns every rule.

Knows nothing of FUSE, trio or the CLI.
"""

from mnemofs.errors import WriteWouldWait
from mnemofs.store.engine import Engine, make_engine, resolve_url, upgrade
from mnemofs.store.listener import Listener
from mnemofs.store.service import MemoryService, decode_content, prompt_note, sha256_hex

__all__ = [
    "Engine",
    "Listener",
    "MemoryService",
    "WriteWouldWait",
    "decode_content",
    "make_engine",
    "prompt_note",
    "resolve_url",
    "sha256_hex",
    "upgrade",
]
