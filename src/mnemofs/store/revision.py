"""The schema revision this code reads and writes (no SQLAlchemy import: the CLI's hot path
checks it on every run)."""

SCHEMA_REVISION = "0017"
"""The Alembic revision this code reads and writes; a database at another one must be upgraded.
Bump it with every new migration; ``tests/test_migrations.py`` checks it is the newest."""
