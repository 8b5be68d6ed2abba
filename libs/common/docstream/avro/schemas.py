"""Avro schemas by name from the repository's ``schemas/`` folder, parsed with fastavro.

``schemas/<Name>.avsc`` are the current schemas (the contract). Older versions may be kept
in sub-folders (for example ``schemas/history/ChunkCreated.v1.avsc``): they are not used for
writing, only to resolve the fingerprint of records written by older producers. A current
schema's ``aliases`` name the records it reads under another name (a renamed record: ChunkResult
reads what was written as ChunkEmbedded, Avro's alias rule).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.schema import SchemaParseException, to_parsing_canonical_form

from docstream.avro.fingerprint import fingerprint_bytes
from docstream.errors import ConfigError

__all__ = ["AvroSchema", "SchemaSet", "find_schemas_dir"]


@dataclass(frozen=True)
class AvroSchema:
    """One parsed schema.

    Attributes:
        name: the record's short name (``ChunkCreated``), the key records use.
        full_name: namespace-qualified name (``io.docstream.v1.ChunkCreated``).
        aliases: the record's aliases, namespace-qualified (a name without a dot is in the record's namespace):
            the names it was written under before a rename.
        raw: the JSON document as loaded (with docs), what a registry receives.
        parsed: fastavro's parsed form, for its readers and writers.
        canonical_form: the Parsing Canonical Form.
        fingerprint: CRC-64-AVRO of the canonical form, 8 bytes little-endian.
        path: the file it came from.
    """

    name: str
    full_name: str
    aliases: tuple[str, ...]
    raw: dict[str, Any]
    parsed: Any
    canonical_form: str
    fingerprint: bytes
    path: Path

    @classmethod
    def from_json(cls, raw: dict[str, Any], path: Path) -> AvroSchema:
        """Parse one schema document.

        Raises:
            ConfigError: the document is not a valid named Avro record schema.
        """
        try:
            parsed = parse_schema(raw, named_schemas={})
            canonical = to_parsing_canonical_form(parsed)
        except (SchemaParseException, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ConfigError(f"invalid Avro schema {path}: {exc}", code="schema_invalid") from exc
        if not isinstance(parsed, dict) or parsed.get("type") != "record":
            raise ConfigError(f"{path} is not an Avro record schema", code="schema_invalid")
        full_name = str(parsed["name"])
        namespace = full_name.rpartition(".")[0]
        aliases = raw.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
            raise ConfigError(f"{path}: aliases must be a list of names", code="schema_invalid")
        return cls(
            name=full_name.rsplit(".", 1)[-1],
            full_name=full_name,
            aliases=tuple(a if "." in a or not namespace else f"{namespace}.{a}" for a in aliases),
            raw=raw,
            parsed=parsed,
            canonical_form=canonical,
            fingerprint=fingerprint_bytes(canonical),
            path=path,
        )


def find_schemas_dir(start: Path | None = None) -> Path:
    """The ``schemas/`` folder: walk up from this package to the folder holding ``schemas/`` and ``pyproject.toml``.

    Falls back to ``docstream/schemas`` shipped inside an installed package.

    Raises:
        ConfigError: no such folder.
    """
    here = (start or Path(__file__)).resolve()
    for folder in here.parents:
        if (folder / "schemas").is_dir() and (folder / "pyproject.toml").is_file():
            return folder / "schemas"
    packaged = Path(__file__).resolve().parent.parent / "schemas"
    if packaged.is_dir():
        return packaged
    raise ConfigError("no schemas/ folder found above the docstream package", code="schemas_missing")


def _load(path: Path) -> AvroSchema:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read Avro schema {path}: {exc}", code="schema_invalid") from exc
    return AvroSchema.from_json(raw, path)


class SchemaSet:
    """The current schemas by name (and by their aliases), and every known schema (current and older) by fingerprint.

    Raises:
        ConfigError: an alias names a current schema or another schema's alias.
    """

    def __init__(self, current: dict[str, AvroSchema], older: list[AvroSchema] | None = None) -> None:
        self._current = dict(current)
        self._by_full_name = {s.full_name: s for s in current.values()}
        self._by_alias: dict[str, AvroSchema] = {}
        for schema in current.values():
            for alias in schema.aliases:
                taken = self._by_full_name.get(alias) or self._by_alias.get(alias)
                if taken is not None:
                    raise ConfigError(f"alias {alias} of {schema.full_name} is taken by {taken.full_name}",
                                      code="schema_invalid")
                self._by_alias[alias] = schema
        self._by_fingerprint = {s.fingerprint: s for s in [*(older or []), *current.values()]}

    @classmethod
    def load(cls, schemas_dir: Path | None = None) -> SchemaSet:
        """Load ``*.avsc`` of ``schemas_dir`` (current) and of its sub-folders (older versions).

        Raises:
            ConfigError: the folder is missing, empty, or holds an invalid or duplicate schema.
        """
        folder = schemas_dir or find_schemas_dir()
        if not folder.is_dir():
            raise ConfigError(f"schemas folder {folder} does not exist", code="schemas_missing")
        current: dict[str, AvroSchema] = {}
        for path in sorted(folder.glob("*.avsc")):
            schema = _load(path)
            if schema.name in current:
                raise ConfigError(f"schema {schema.name} defined twice in {folder}", code="schema_invalid")
            current[schema.name] = schema
        if not current:
            raise ConfigError(f"no *.avsc in {folder}", code="schemas_missing")
        older = [_load(p) for p in sorted(folder.glob("*/**/*.avsc"))]
        return cls(current, older)

    def get(self, name: str) -> AvroSchema:
        """The current schema of a record name (short or full).

        Raises:
            KeyError: no such schema.
        """
        schema = self._current.get(name) or self._by_full_name.get(name)
        if schema is None:
            raise KeyError(name)
        return schema

    def reader_for(self, writer: AvroSchema) -> AvroSchema:
        """The current schema that reads records written with ``writer``: the one of its full name, else the one
        whose aliases name it (a record renamed since: Avro's alias rule, which fastavro's resolution follows).

        Raises:
            KeyError: no current schema reads that record.
        """
        schema = self._by_full_name.get(writer.full_name) or self._by_alias.get(writer.full_name)
        if schema is None:
            raise KeyError(writer.full_name)
        return schema

    def by_fingerprint(self, fingerprint: bytes) -> AvroSchema | None:
        """The schema (current or older) whose fingerprint is ``fingerprint``, if known."""
        return self._by_fingerprint.get(fingerprint)

    def __contains__(self, name: object) -> bool:
        return name in self._current or name in self._by_full_name

    def __iter__(self) -> Iterator[AvroSchema]:
        return iter(self._current.values())

    def __len__(self) -> int:
        return len(self._current)
