"""Credentials: admin API keys and session tokens, kept as hashes.

A secret names its row: ``mnemofs-key-<ULID>-<secret>`` is API key ``apikey_<ULID>``,
``mnemofs-token-<ULID>-<secret>`` is session token ``sesstok_<ULID>``. Checking one is a
primary-key read and a constant-time compare of SHA-256 hashes (a random 256-bit secret needs
no slow hash). Nothing here caches: a revoked key or an ended session is refused by the very
next request, on every host. Secrets appear only in what ``create_api_key`` and
``create_session_token`` return.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from mnemofs.errors import InvalidRequest, NotFound
from mnemofs.models import (
    API_KEY_PREFIX,
    TOKEN_PREFIX,
    ApiKey,
    Session,
    SessionToken,
    new_id,
)
from mnemofs.store.base import ServiceBase
from mnemofs.store.rows import utc_now
from mnemofs.store.tx import Tx

KEY_TEXT = "mnemofs-key-"
TOKEN_TEXT = "mnemofs-token-"
_SECRET = re.compile(r"^mnemofs-(key|token)-([0-9A-HJKMNP-TV-Z]{26})-([A-Za-z0-9_-]{43})$")
_NAME_CHARS = 255
_ATTACHED_KEPT = 4096  # sessions whose attachments a process keeps (they never change)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request comes from: an admin's API key (``session`` is None), or a session token
    (``session`` is its session, which has not ended). ``actor`` is what its writes record."""

    actor: str
    session: Session | None = None

    @property
    def is_admin(self) -> bool:
        return self.session is None


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _new_secret(text: str, row_id: str, prefix: str) -> str:
    return f"{text}{row_id[len(prefix) :]}-{secrets.token_urlsafe(32)}"


class CredentialsMixin(ServiceBase):
    """API keys (create, list, revoke), session tokens (create), and checking either.

    A session's attachments are fixed at its creation, so a token's check reads them once per
    process (``_attached``); whether the session has ended, and the token itself, are read on
    every check."""

    @functools.cached_property
    def _attached(self) -> dict[str, Session]:
        return {}

    def create_api_key(self, name: str) -> ApiKey:
        """A new admin key; its secret is in the returned ``key`` and nowhere else."""
        if not isinstance(name, str) or not name.strip() or len(name) > _NAME_CHARS:
            raise InvalidRequest(f"key name must be 1..{_NAME_CHARS} characters, got {name!r}")
        if not name.isprintable():
            raise InvalidRequest(f"key name {name!r} contains a control character")
        key_id = new_id(API_KEY_PREFIX)
        secret = _new_secret(KEY_TEXT, key_id, API_KEY_PREFIX)
        now = utc_now()

        def run(tx: Tx) -> ApiKey:
            tx.run(
                "INSERT INTO api_keys (id, name, secret_hash, created_at, revoked_at) "
                "VALUES (:id, :name, :hash, :now, NULL)",
                {"id": key_id, "name": name, "hash": _hash(secret), "now": now},
            )
            return ApiKey(key_id, name, now, None, key=secret)

        return self._write(run)

    def list_api_keys(self) -> list[ApiKey]:
        """Every key, revoked ones too, oldest first (never their secrets)."""
        rows = self._read(
            lambda tx: tx.all("SELECT id, name, created_at, revoked_at FROM api_keys ORDER BY id")
        )
        return [ApiKey(r.id, r.name, r.created_at, r.revoked_at) for r in rows]

    def revoke_api_key(self, key_id: str) -> ApiKey:
        """Revoke a key: refused from the next request on. Revoking twice changes nothing."""

        def run(tx: Tx) -> ApiKey:
            tx.run(
                "UPDATE api_keys SET revoked_at = :now WHERE id = :id AND revoked_at IS NULL",
                {"now": utc_now(), "id": key_id},
            )
            row = tx.one(
                "SELECT id, name, created_at, revoked_at FROM api_keys WHERE id = :id",
                {"id": key_id},
            )
            if row is None:
                raise NotFound(f"API key {key_id!r} not found")
            return ApiKey(row.id, row.name, row.created_at, row.revoked_at)

        return self._write(run)

    def create_session_token(self, session_id: str) -> SessionToken:
        """A bearer token that reaches this session and its stores only, while it lasts."""
        token_id = new_id(TOKEN_PREFIX)
        secret = _new_secret(TOKEN_TEXT, token_id, TOKEN_PREFIX)
        now = utc_now()

        def run(tx: Tx) -> SessionToken:
            session = self._session(tx, session_id)
            if session.ended_at is not None:
                raise InvalidRequest(f"session {session_id} ended at {session.ended_at}")
            tx.run(
                "INSERT INTO session_tokens (id, session_id, secret_hash, created_at) "
                "VALUES (:id, :session, :hash, :now)",
                {"id": token_id, "session": session_id, "hash": _hash(secret), "now": now},
            )
            return SessionToken(token_id, session.id, now, token=secret)

        return self._write(run)

    def authenticate(self, secret: str) -> Caller | None:
        """The caller a key or token stands for, or None: unknown, malformed, revoked, or of
        an ended session. One read; the secret itself is never logged nor raised."""
        match = _SECRET.match(secret)
        if match is None:
            return None
        kind, ulid = match.group(1), match.group(2)
        presented = _hash(secret)

        def run(tx: Tx) -> Caller | None:
            if kind == "key":
                key = tx.one(
                    "SELECT id, secret_hash, revoked_at FROM api_keys WHERE id = :id",
                    {"id": API_KEY_PREFIX + ulid},
                )
                if key is None or not hmac.compare_digest(key.secret_hash, presented):
                    return None
                return Caller(key.id) if key.revoked_at is None else None
            token = tx.one(
                "SELECT t.session_id, t.secret_hash, s.ended_at FROM session_tokens t "
                "JOIN sessions s ON s.id = t.session_id WHERE t.id = :id",
                {"id": TOKEN_PREFIX + ulid},
            )
            if token is None or not hmac.compare_digest(token.secret_hash, presented):
                return None
            if token.ended_at is not None:
                return None
            session = self._attached.get(token.session_id)
            if session is None:  # attachments never change: read once per session
                session = self._session(tx, token.session_id)
                if len(self._attached) >= _ATTACHED_KEPT:
                    self._attached.clear()
                self._attached[token.session_id] = session
            return Caller(session.id, session)

        return self._read(run)
