"""``mnemofs serve``: the API under uvicorn, with JSON logs and a graceful stop.

uvicorn is the server: made for ASGI, kept by the same people as Starlette (which FastAPI is
built on), with HTTP/1.1 keep-alive through httptools, worker processes, and on SIGTERM or
SIGINT a graceful shutdown (stop accepting, let requests in flight finish, then exit). Each
worker makes its own engine from ``$MNEMOFS_DB`` (set from ``--db`` before the workers start),
so the database URL never appears on a command line. Each request is read within a time and
a size (``protocol.BoundedProtocol``), so no client can hold a connection or grow the server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import Any

from mnemofs.limits import SERVE_CONNECTIONS
from mnemofs.store.engine import ENV_DB, is_default_location, make_engine

GRACE_S = 30  # at most this long for requests in flight to finish after SIGTERM
ENV_CONNECTIONS = "MNEMOFS_SERVE_CONNECTIONS"  # --connections, handed to each worker
_ACCESS_FIELDS = ("request_id", "method", "path", "status", "ms", "caller")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and an access line's fields."""

    converter = time.gmtime  # type: ignore[assignment]

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _ACCESS_FIELDS:
            if hasattr(record, name):
                line[name] = getattr(record, name)
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": JsonFormatter}},
    "handlers": {
        "stderr": {
            "class": "logging.StreamHandler",
            "formatter": "json",
            "stream": "ext://sys.stderr",
        }
    },
    "loggers": {
        "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "uvicorn.error": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
        "mnemofs": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
    },
}


def app_from_env() -> Any:
    """The application factory each worker calls: the database named by ``$MNEMOFS_DB``."""
    from mnemofs.http.app import create_app
    from mnemofs.store.service import MemoryService

    url = os.environ.get(ENV_DB)
    engine = make_engine(url, create=is_default_location(url))
    connections = int(os.environ.get(ENV_CONNECTIONS) or SERVE_CONNECTIONS)
    return create_app(MemoryService(engine, actor="api"), connections=connections)


def serve(
    db: str | None, host: str, port: int, workers: int, connections: int = SERVE_CONNECTIONS
) -> None:
    """Run the server in the foreground until SIGTERM or SIGINT."""
    import uvicorn

    if db:
        os.environ[ENV_DB] = db
    os.environ[ENV_CONNECTIONS] = str(connections)  # for each worker's app_from_env
    # Fail here, once, with the CLI's message, rather than in every worker.
    make_engine(db, create=is_default_location(db)).dispose()
    _every_descriptor()
    uvicorn.run(
        "mnemofs.http.server:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_config=LOG_CONFIG,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        http="mnemofs.http.protocol:BoundedProtocol",  # uvicorn's, with read timeouts and caps
        timeout_graceful_shutdown=GRACE_S,
    )


def _every_descriptor() -> None:
    """Raise the soft limit on open descriptors to the hard one (for the workers too): each
    connection holds one, and a service's soft limit is often 1,024 (systemd's default) under
    a hard limit far above, so that a thousand clients' connections, held or slow, would stop
    the server accepting any more."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # An unlimited hard limit: the kernel's own cap on one process (fs.nr_open) is usually this.
    wanted = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):  # kept as it was
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
