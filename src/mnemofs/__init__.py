"""mnemofs: durable memory for AI agents, served as plain files."""

from mnemofs.api import Workspace, open
from mnemofs.errors import (
    Conflict,
    InvalidRequest,
    LimitExceeded,
    MnemofsError,
    NotFound,
    PreconditionFailed,
    StoreArchived,
)
from mnemofs.models import (
    Attachment,
    Memory,
    MemoryPrefix,
    MemoryStore,
    MemoryVersion,
    Page,
    Session,
)

__all__ = [
    "Attachment",
    "Conflict",
    "InvalidRequest",
    "LimitExceeded",
    "Memory",
    "MemoryPrefix",
    "MemoryStore",
    "MemoryVersion",
    "MnemofsError",
    "NotFound",
    "Page",
    "PreconditionFailed",
    "Session",
    "StoreArchived",
    "Workspace",
    "open",
]
__version__ = "0.1.0"
