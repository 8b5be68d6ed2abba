"""Versioned schema migrations read from ``store/migrations/`` (docs/storage.md "Migrations").

Files are named ``NNN_name.sql`` (SQLite) or ``NNN_name.cql`` (Cassandra) and applied in
version order; each applied version is recorded in a ``schema_migrations`` table. A file
whose text holds the token ``{dimension}`` is applied once per embedding dimension and
recorded as ``NNN_name@<dimension>``. ``{keyspace}`` is filled in by the Cassandra store.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from importlib import resources
from typing import Literal

__all__ = ["Migration", "bootstrap_table_id", "load_migrations", "schema_not_visible", "split_statements"]

_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.(sql|cql)$")
_DIMENSION = "{dimension}"
_NOT_VISIBLE = re.compile(r"does not exist|doesn't exist|unconfigured table", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file.

    Attributes:
        version: the file's stem, e.g. ``001_init``.
        statements: the file's statements in order, comments removed, without ``;``.
        per_dimension: the statements hold ``{dimension}`` and apply once per embedding dimension.
    """

    version: str
    statements: tuple[str, ...]
    per_dimension: bool

    def applied_version(self, dimension: int | None = None) -> str:
        """The version recorded in ``schema_migrations`` (``NNN_name@<dimension>`` when per dimension).

        Raises:
            ValueError: a dimension is missing for a per-dimension migration, or given for another.
        """
        if self.per_dimension != (dimension is not None):
            raise ValueError(f"migration {self.version}: dimension {'required' if self.per_dimension else 'unused'}")
        return self.version if dimension is None else f"{self.version}@{dimension}"

    def render(self, *, keyspace: str | None = None, dimension: int | None = None) -> list[str]:
        """The statements with ``{keyspace}`` and ``{dimension}`` filled in.

        Raises:
            ValueError: a dimension is missing, given for a migration without one, or not positive.
        """
        self.applied_version(dimension)
        if dimension is not None and dimension < 1:
            raise ValueError(f"embedding dimension must be positive, got {dimension}")
        rendered = []
        for statement in self.statements:
            if keyspace is not None:
                statement = statement.replace("{keyspace}", keyspace)
            if dimension is not None:
                statement = statement.replace(_DIMENSION, str(dimension))
            rendered.append(statement)
        return rendered


def split_statements(text: str) -> list[str]:
    """Split a migration file into statements: ``--`` comment lines dropped, ``;`` ends a statement.

    Migration files keep semicolons out of string literals; this is not a full SQL parser.
    """
    lines = [line for line in text.splitlines() if not line.strip().startswith("--")]
    return [stmt.strip() for stmt in "\n".join(lines).split(";") if stmt.strip()]


def load_migrations(dialect: Literal["sql", "cql"]) -> list[Migration]:
    """The packaged migrations of one dialect, in version order.

    Raises:
        ValueError: two files share a version number.
    """
    folder = resources.files("docstream.store").joinpath("migrations")
    found: dict[str, Migration] = {}
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match is None or match.group(3) != dialect:
            continue
        number = match.group(1)
        if number in found:
            raise ValueError(f"two {dialect} migrations numbered {number}")
        text = entry.read_text(encoding="utf-8")
        found[number] = Migration(
            version=f"{number}_{match.group(2)}",
            statements=tuple(split_statements(text)),
            per_dimension=_DIMENSION in text,
        )
    return [found[number] for number in sorted(found)]


def bootstrap_table_id(keyspace: str, table: str) -> uuid.UUID:
    """The fixed id of a table the Cassandra store creates before it holds the migration lease.

    Two processes creating the same table at once through two coordinators then write the same
    schema, which Cassandra merges; with random ids, one table would shadow the other.
    """
    return uuid.uuid5(uuid.NAMESPACE_URL, f"docstream:cassandra:{keyspace}.{table}")


def schema_not_visible(message: str) -> bool:
    """Whether Cassandra's refusal ``message`` says its coordinator has not yet seen a new keyspace or table."""
    return _NOT_VISIBLE.search(message) is not None
