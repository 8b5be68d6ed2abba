"""Arrow types from Avro types: the export's Parquet columns are typed by the records' schemas. Pure.

A column takes the type of the record field of its name, so a field's width (``int``: int32, ``long``: int64,
``float``: float32) and shape (arrays, maps, nested records) are stated once, in ``schemas/*.avsc``:

* ``["null", X]`` is ``X`` (every Arrow field is nullable); an enum is a string;
* ``timestamp-millis`` is ``timestamp("ms", tz="UTC")``;
* an array is a list, a map a ``map<string, values>``, a record a struct of its fields in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

__all__ = ["arrow_schema", "arrow_type", "field_types", "record_type"]

_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "bytes": pa.binary(),
}
_LOGICAL: dict[str, pa.DataType] = {"timestamp-millis": pa.timestamp("ms", tz="UTC")}


def _named(schema: Any, found: dict[str, Any]) -> None:
    """Every named type (record, enum) defined anywhere in ``schema``, by short and full name, into ``found``."""
    if isinstance(schema, list):
        for member in schema:
            _named(member, found)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "enum", "fixed") and "name" in schema:
            found[schema["name"]] = schema
            namespace = schema.get("namespace")
            if namespace:
                found[f"{namespace}.{schema['name']}"] = schema
        for key in ("fields", "items", "values"):
            if key in schema:
                _named(schema[key], found)
        if kind in ("record", "error"):
            for f in schema.get("fields", ()):
                _named(f["type"], found)
        elif isinstance(kind, (dict, list)):
            _named(kind, found)


def arrow_type(avro: Any, named: Mapping[str, Any]) -> pa.DataType:
    """The Arrow type of an Avro type (``named``: the named types it may refer to, :func:`field_types` finds them).

    Raises:
        ValueError: an Avro type with no Arrow counterpart here (a union of two non-null types, an unknown name).
    """
    if isinstance(avro, list):
        members = [m for m in avro if m != "null"]
        if len(members) != 1:
            raise ValueError(f"no Arrow type for the union {avro!r}")
        return arrow_type(members[0], named)
    if isinstance(avro, str):
        if avro in _PRIMITIVES:
            return _PRIMITIVES[avro]
        if avro in named:
            return arrow_type(named[avro], named)
        raise ValueError(f"no Arrow type for the Avro type {avro!r}")
    kind = avro.get("type")
    logical = avro.get("logicalType")
    if logical in _LOGICAL:
        return _LOGICAL[logical]
    if kind == "enum":
        return pa.string()
    if kind == "array":
        return pa.list_(arrow_type(avro["items"], named))
    if kind == "map":
        return pa.map_(pa.string(), arrow_type(avro["values"], named))
    if kind == "record":
        return record_type(avro, named)
    return arrow_type(kind, named)


def record_type(record: Mapping[str, Any], named: Mapping[str, Any]) -> pa.StructType:
    """An Avro record as an Arrow struct of its fields in order."""
    return pa.struct([(f["name"], arrow_type(f["type"], named)) for f in record["fields"]])


def field_types(records: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields of ``records`` by name (the first record that has a name wins) and every named type in them."""
    by_name: dict[str, Any] = {}
    named: dict[str, Any] = {}
    for record in records:
        _named(record, named)
        for f in record["fields"]:
            by_name.setdefault(f["name"], f["type"])
    return by_name, named


def arrow_schema(columns: Iterable[str], records: Iterable[Mapping[str, Any]], *,
                 sources: Mapping[str, Mapping[str, Any]] | None = None) -> pa.Schema:
    """An Arrow schema of ``columns`` in order, each typed by the Avro field of its name in ``records``.

    Args:
        columns: the column names, in order.
        records: Avro record schemas (raw JSON dicts), searched in order for each column's field.
        sources: columns typed by the field of their name in another record (``{"mentions": DocumentCompleted}``).

    Raises:
        ValueError: a column no record has a field of, or whose type has no Arrow counterpart.
    """
    listed = list(records)
    by_name, _ = field_types(listed)
    _, named = field_types(listed + list((sources or {}).values()))
    out = []
    for name in columns:
        source = (sources or {}).get(name)
        if source is not None:
            avro = next(f["type"] for f in source["fields"] if f["name"] == name)
        elif name in by_name:
            avro = by_name[name]
        else:
            raise ValueError(f"no record field types the column {name!r}")
        out.append(pa.field(name, arrow_type(avro, named)))
    return pa.schema(out)
