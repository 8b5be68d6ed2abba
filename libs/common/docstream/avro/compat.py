"""Backward compatibility of Avro schemas (new reader, old writer) and sample records. Pure.

docs/messaging.md "Schema evolution": evolution is backward compatible: new fields have defaults; nothing is renamed or
removed. ``check_backward_compatible(old, new)`` applies Avro's schema-resolution rules
(type promotion, unions, enums, named types) plus that policy, and lists what breaks.
``sample_records(schema)`` makes records that touch every field and every union branch and
enum symbol, for round-trip checks with fastavro.
"""

from __future__ import annotations

from typing import Any

from fastavro import parse_schema
from fastavro.schema import SchemaParseException
from fastavro.validation import validate

__all__ = ["check_backward_compatible", "sample_records"]

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# Avro spec "Schema Resolution": the writer's type may be promoted to these reader types.
_PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}

_Names = dict[str, Any]


def _collect_names(schema: Any, names: _Names) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _collect_names(branch, names)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            names[schema["name"]] = schema
        if kind in ("record", "error"):
            for field in schema["fields"]:
                _collect_names(field["type"], names)
        elif kind == "array":
            _collect_names(schema["items"], names)
        elif kind == "map":
            _collect_names(schema["values"], names)


def _parsed(schema: Any) -> tuple[Any, _Names]:
    parsed = parse_schema(schema, named_schemas={}, _write_hint=False)
    names: _Names = {}
    _collect_names(parsed, names)
    return parsed, names


def _resolve(schema: Any, names: _Names) -> Any:
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        return names[schema]
    return schema


def _expand(schema: Any, names: _Names, depth: int = 0) -> Any:
    """``schema`` with named references replaced by their definitions (for fastavro.validate)."""
    if depth > 32:
        raise ValueError("schema nests too deeply (recursive type?)")
    schema = _resolve(schema, names)
    if isinstance(schema, list):
        return [_expand(b, names, depth + 1) for b in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if out.get("type") in ("record", "error"):
        out["fields"] = [{**f, "type": _expand(f["type"], names, depth + 1)} for f in out["fields"]]
    elif out.get("type") == "array":
        out["items"] = _expand(out["items"], names, depth + 1)
    elif out.get("type") == "map":
        out["values"] = _expand(out["values"], names, depth + 1)
    return out


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, str):
        return schema
    kind = schema["type"]
    return "record" if kind == "error" else str(kind)


def _logical(schema: Any) -> str | None:
    return schema.get("logicalType") if isinstance(schema, dict) else None


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _same_name(writer: dict[str, Any], reader: dict[str, Any]) -> bool:
    aliases = {_short(a) for a in reader.get("aliases", [])}
    return _short(writer["name"]) == _short(reader["name"]) or _short(writer["name"]) in aliases


class _Checker:
    def __init__(self, writer_names: _Names, reader_names: _Names) -> None:
        self._wn = writer_names
        self._rn = reader_names
        self._seen: set[tuple[str, str]] = set()

    def check(self, writer: Any, reader: Any, path: str) -> list[str]:
        w, r = _resolve(writer, self._wn), _resolve(reader, self._rn)
        wk, rk = _kind(w), _kind(r)
        if wk == "union":
            return [p for i, branch in enumerate(w) for p in self.check(branch, r, f"{path}<branch {i}>")]
        if rk == "union":
            return self._branch(w, r, path)
        if _logical(w) != _logical(r):
            return [f"{path}: logical type changed from {_logical(w)} to {_logical(r)}"]
        if wk in _PRIMITIVES or rk in _PRIMITIVES:
            if wk == rk or rk in _PROMOTIONS.get(wk, frozenset()):
                return []
            return [f"{path}: type changed from {wk} to {rk} (not a promotion)"]
        if wk != rk:
            return [f"{path}: type changed from {wk} to {rk}"]
        return getattr(self, f"_{wk}")(w, r, path)  # type: ignore[no-any-return]

    def _branch(self, writer: Any, reader_union: list[Any], path: str) -> list[str]:
        if any(not self.check(writer, branch, path) for branch in reader_union):
            return []
        return [f"{path}: {_kind(_resolve(writer, self._wn))} is in no branch of the new union"]

    def _record(self, w: dict[str, Any], r: dict[str, Any], path: str) -> list[str]:
        if not _same_name(w, r):
            return [f"{path}: record renamed from {w['name']} to {r['name']}"]
        key = (w["name"], r["name"])
        if key in self._seen:
            return []
        self._seen.add(key)
        problems: list[str] = []
        w_fields = {f["name"]: f for f in w["fields"]}
        matched: set[str] = set()
        for field in r["fields"]:
            names = [field["name"], *field.get("aliases", [])]
            source = next((w_fields[n] for n in names if n in w_fields), None)
            where = f"{path}.{field['name']}"
            if source is None:
                problems.extend(self._new_field(field, where))
            else:
                matched.add(source["name"])
                problems.extend(self.check(source["type"], field["type"], where))
        for name in w_fields.keys() - matched:
            problems.append(f"{path}.{name}: field removed or renamed")
        return problems

    def _new_field(self, field: dict[str, Any], where: str) -> list[str]:
        if "default" not in field:
            return [f"{where}: new field has no default"]
        default_type = field["type"][0] if isinstance(field["type"], list) else field["type"]
        if not validate(field["default"], _expand(default_type, self._rn), raise_errors=False):
            return [f"{where}: default {field['default']!r} does not fit the field's type"]
        return []

    def _enum(self, w: dict[str, Any], r: dict[str, Any], path: str) -> list[str]:
        if not _same_name(w, r):
            return [f"{path}: enum renamed from {w['name']} to {r['name']}"]
        missing = [s for s in w["symbols"] if s not in r["symbols"]]
        if missing and "default" not in r:
            return [f"{path}: enum symbols removed: {missing}"]
        return []

    def _fixed(self, w: dict[str, Any], r: dict[str, Any], path: str) -> list[str]:
        if not _same_name(w, r) or w["size"] != r["size"]:
            return [f"{path}: fixed {w['name']}[{w['size']}] became {r['name']}[{r['size']}]"]
        return []

    def _array(self, w: dict[str, Any], r: dict[str, Any], path: str) -> list[str]:
        return self.check(w["items"], r["items"], f"{path}[]")

    def _map(self, w: dict[str, Any], r: dict[str, Any], path: str) -> list[str]:
        return self.check(w["values"], r["values"], f"{path}{{}}")


def check_backward_compatible(old: Any, new: Any) -> list[str]:
    """What stops ``new`` (reader) from reading data written with ``old`` (writer).

    Besides Avro's resolution rules, a field of ``old`` missing from ``new`` counts as a
    problem (nothing is removed or renamed), as does a changed logical type.

    Args:
        old: the previous schema (JSON document as loaded).
        new: the new schema.

    Returns:
        Problems, one line each; empty when compatible.
    """
    try:
        old_parsed, old_names = _parsed(old)
    except (SchemaParseException, ValueError, TypeError, KeyError) as exc:
        return [f"old schema is invalid: {exc}"]
    try:
        new_parsed, new_names = _parsed(new)
    except (SchemaParseException, ValueError, TypeError, KeyError) as exc:
        return [f"new schema is invalid: {exc}"]
    root = _short(old_parsed["name"]) if isinstance(old_parsed, dict) and "name" in old_parsed else "$"
    return _Checker(old_names, new_names).check(old_parsed, new_parsed, root)


def _variants(schema: Any, names: _Names, seen: frozenset[str] = frozenset()) -> int:
    schema = _resolve(schema, names)
    kind = _kind(schema)
    if kind == "union":
        return max([len(schema), *(_variants(b, names, seen) for b in schema)])
    if kind == "enum":
        return len(schema["symbols"])
    if kind == "record":
        if schema["name"] in seen:
            return 1
        inner = seen | {schema["name"]}
        return max([1, *(_variants(f["type"], names, inner) for f in schema["fields"])])
    if kind == "array":
        return _variants(schema["items"], names, seen)
    if kind == "map":
        return _variants(schema["values"], names, seen)
    return 1


def _sample(schema: Any, names: _Names, i: int, depth: int = 0) -> Any:
    schema = _resolve(schema, names)
    kind = _kind(schema)
    if kind == "union":
        branches = [b for b in schema if _kind(_resolve(b, names)) != "null"] if depth > 8 else schema
        # variant 0 takes the last branch (the value, for ["null", X]); others walk the branches
        return _sample(branches[(len(branches) - 1 + i) % len(branches)], names, i, depth + 1)
    samples: dict[str, Any] = {
        "null": None,
        "boolean": i % 2 == 0,
        "int": 7 + i,
        "long": 2**40 + i,
        "float": 0.5 + i,
        "double": 0.25 + i,
        "bytes": bytes([i % 256, 1, 2]),
        "string": f"sample-{i}",
    }
    if kind in samples:
        return samples[kind]
    if kind == "record":
        return {f["name"]: _sample(f["type"], names, i, depth + 1) for f in schema["fields"]}
    if kind == "enum":
        return schema["symbols"][i % len(schema["symbols"])]
    if kind == "fixed":
        return bytes([i % 256]) * int(schema["size"])
    if kind == "array":
        return [] if i % 2 else [_sample(schema["items"], names, i, depth + 1) for _ in range(2)]
    if kind == "map":
        return {} if i % 2 else {"k": _sample(schema["values"], names, i, depth + 1)}
    raise ValueError(f"unsupported Avro type {kind}")


def sample_records(schema: Any) -> list[Any]:
    """Records of ``schema`` covering every field, union branch and enum symbol.

    At least two: the first fills optional fields and arrays, the second takes the first
    union branch (null) and empty collections.

    Raises:
        ValueError: the schema uses a type this generator does not know.
    """
    parsed, names = _parsed(schema)
    count = max(2, _variants(parsed, names))
    return [_sample(parsed, names, i) for i in range(count)]
