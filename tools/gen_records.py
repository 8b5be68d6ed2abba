"""Write the record dataclasses from ``schemas/*.avsc`` and the store's row dataclasses from their declarations.

Run with the project's Python after changing a schema or a row declaration::

    .venv/bin/python -m tools.gen_records          # write the generated modules
    .venv/bin/python -m tools.gen_records --check  # exit 1 when they are not what the schemas give

It writes two modules, each a pure function of its inputs (``tests/unit/lib/records/test_generated.py`` regenerates
them in memory and compares):

* ``libs/common/docstream/records/generated.py``: one frozen dataclass per schema, its fields' types, defaults and
  docstrings the Avro fields'; the Avro enums as ``Literal`` types; ``AnyRecord`` and ``RECORD_TYPES``;
* ``libs/common/docstream/store/generated.py``: the rows ``docstream.store.layout`` declares (the records' fields,
  less those the store does not hold, in the store's form, plus its own).

A record's fields keep the order positional arguments need: the ones without a default in schema order, then the
ones with a default in schema order.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["LAYOUT", "RECORDS_MODULE", "ROOT", "ROWS_MODULE", "load_schemas", "main", "render", "render_records",
           "render_rows"]

ROOT = Path(__file__).resolve().parents[1]
RECORDS_MODULE = Path("libs/common/docstream/records/generated.py")
ROWS_MODULE = Path("libs/common/docstream/store/generated.py")


def _load_layout() -> ModuleType:
    """``docstream.store.layout`` read from its file, not imported: importing ``docstream.store`` imports the rows
    this tool writes, so a stale or broken generated module would stop the tool that mends it."""
    name = "_docstream_store_layout"
    spec = importlib.util.spec_from_file_location(name, ROOT / "libs/common/docstream/store/layout.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the dataclasses of a module with postponed annotations look it up
    spec.loader.exec_module(module)
    return module


LAYOUT = _load_layout()
"""The row declarations (``docstream.store.layout``)."""

_LINE = 120
_PRIMITIVES = {"string": "str", "int": "int", "long": "int", "float": "float", "double": "float", "boolean": "bool",
               "bytes": "bytes"}
_KEY = re.compile(r"\bKey: (\w+)\.")

Schemas = Mapping[str, Mapping[str, Any]]


def load_schemas(folder: Path) -> dict[str, dict[str, Any]]:
    """The current schemas of ``folder`` (its ``*.avsc``, not its sub-folders' older versions), by record name, in
    file name order. A record's ``aliases`` (the names of a renamed record's older writers) make no class: the
    class is the record's name (``docstream.records`` keeps a deprecated Python name by hand, for one release).

    Raises:
        ValueError: two files define one record, or an alias is the name of a record.
    """
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.avsc")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        if schema["name"] in found:
            raise ValueError(f"record {schema['name']} defined twice in {folder}")
        found[schema["name"]] = schema
    for name, schema in found.items():
        taken = [a for a in schema.get("aliases", ()) if a.rsplit(".", 1)[-1] in found]
        if taken:
            raise ValueError(f"record {name}: its aliases {taken} name records of {folder}")
    return found


# -- Avro types as Python types -----------------------------------------------------------------------------


def _named(schema: Any, found: dict[str, Mapping[str, Any]]) -> None:
    """Every named type (record, enum) defined in ``schema``, by short name, into ``found``.

    Raises:
        ValueError: two different types of one name.
    """
    if isinstance(schema, list):
        for member in schema:
            _named(member, found)
        return
    if not isinstance(schema, Mapping):
        return
    if schema.get("type") in ("record", "enum") and "name" in schema:
        name = str(schema["name"]).rsplit(".", 1)[-1]
        known = found.get(name)
        if known is not None and _shape(known) != _shape(schema):
            raise ValueError(f"two Avro types are named {name}")
        found.setdefault(name, schema)
    for key in ("items", "values", "type"):
        if key in schema and not isinstance(schema[key], str):
            _named(schema[key], found)
    for f in schema.get("fields", ()) if schema.get("type") == "record" else ():
        _named(f["type"], found)


def _shape(schema: Mapping[str, Any]) -> Any:
    return schema.get("symbols") if schema.get("type") == "enum" else [f["name"] for f in schema.get("fields", ())]


def named_types(schemas: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Every named Avro type of ``schemas``, by short name, in order of appearance."""
    found: dict[str, Mapping[str, Any]] = {}
    for schema in schemas:
        for f in schema["fields"]:
            _named(f["type"], found)
    return found


def python_type(avro: Any, named: Mapping[str, Mapping[str, Any]], *, row: bool = False) -> str:
    """The Python type of an Avro type, as source: a nested record is a ``dict``, an enum its ``Literal`` alias, an
    array a list (a tuple in a row: rows are immutable), and an array of floats a ``Sequence[float]``: a vector, which
    the model's output and the decoder give as a ``docstream.avro.segments.Float32Vector``.

    Raises:
        ValueError: a type with no Python counterpart here (a union of two non-null types, an unknown name).
    """
    if isinstance(avro, list):
        members = [m for m in avro if m != "null"]
        if len(members) != 1:
            raise ValueError(f"no Python type for the union {avro!r}")
        inner = python_type(members[0], named, row=row)
        return f"{inner} | None" if len(members) < len(avro) else inner
    if isinstance(avro, str):
        if avro in _PRIMITIVES:
            return _PRIMITIVES[avro]
        short = avro.rsplit(".", 1)[-1]
        if short not in named:
            raise ValueError(f"no Python type for the Avro type {avro!r}")
        return python_type(named[short], named, row=row)
    kind = avro["type"]
    if avro.get("logicalType") == "timestamp-millis":
        return "datetime"
    if kind == "enum":
        return str(avro["name"])
    if kind == "array":
        item = python_type(avro["items"], named, row=row)
        if item == "float":
            return "Sequence[float]"
        return f"tuple[{item}, ...]" if row else f"list[{item}]"
    if kind == "map":
        return f"dict[str, {python_type(avro['values'], named, row=row)}]"
    if kind == "record":
        return "dict[str, Any]"
    return python_type(kind, named, row=row)


def _default(field: Mapping[str, Any], type_text: str) -> str | None:
    """A field's Avro default as Python source (None: it has none)."""
    if "default" not in field:
        return None
    value = field["default"]
    if value is None or isinstance(value, bool):
        return repr(value)
    if value == []:
        return "()" if type_text.startswith(("tuple[", "Annotated[tuple[")) else "field(default_factory=list)"
    if value == {}:
        return "field(default_factory=dict)"
    if isinstance(value, str) and type_text == "bytes":  # Avro writes a bytes default as its bytes' code points
        return repr(value.encode("latin-1"))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)):
        return repr(value)
    raise ValueError(f"field {field['name']}: no Python default for {value!r}")


def _record_note(avro: Any, named: Mapping[str, Mapping[str, Any]]) -> str:
    """What a field of nested records holds in Python: "Each a ``TaskRequest`` record, as a dict."."""
    members = [m for m in avro if m != "null"] if isinstance(avro, list) else [avro]
    kind = members[0] if len(members) == 1 else None
    if isinstance(kind, str) and kind.rsplit(".", 1)[-1] in named:
        kind = named[kind.rsplit(".", 1)[-1]]
    if isinstance(kind, Mapping) and kind.get("type") == "record":
        return f" A ``{kind['name']}`` record, as a dict."
    if isinstance(kind, Mapping) and kind.get("type") == "array":
        items = kind["items"]
        if isinstance(items, str) and items.rsplit(".", 1)[-1] in named:
            items = named[items.rsplit(".", 1)[-1]]
        if isinstance(items, Mapping) and items.get("type") == "record":
            return f" Each a ``{items['name']}`` record, as a dict."
    return ""


# -- source text --------------------------------------------------------------------------------------------


def _docstring(text: str, indent: str) -> str:
    """``text`` as a docstring at ``indent``, wrapped to the line length."""
    text = " ".join(text.split()).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if text.endswith('"'):
        text = text[:-1] + '\\"'
    lines = textwrap.wrap(text, width=_LINE - len(indent) - 6, break_long_words=False, break_on_hyphens=False)
    lines = lines or [""]
    lines[0] = '"""' + lines[0]
    lines[-1] += '"""'
    return "\n".join(indent + line for line in lines)


def _all(names: Iterable[str]) -> str:
    def order(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    return "__all__ = [\n" + "".join(f'    "{name}",\n' for name in sorted(names, key=order)) + "]\n"


def _header(doc: str, body: str, imports: Mapping[str, Sequence[str]]) -> str:
    """A module: its docstring, its imports (those ``body`` uses), ``body``."""
    used = {module: [n for n in names if re.search(rf"\b{re.escape(n)}\b", body)] for module, names in imports.items()}
    stdlib = [f"from {m} import {', '.join(ns)}" for m, ns in used.items() if ns and not m.startswith("docstream")]
    ours = [f"from {m} import {', '.join(ns)}" for m, ns in used.items() if ns and m.startswith("docstream")]
    parts = [doc, "from __future__ import annotations", "\n".join(stdlib), "\n".join(ours)]
    return "\n\n".join(p for p in parts if p) + "\n\n" + body


_STDLIB: dict[str, Sequence[str]] = {
    "collections.abc": ("Sequence",),
    "dataclasses": ("dataclass", "field"),
    "datetime": ("datetime",),
    "typing": ("Annotated", "Any", "ClassVar", "Literal"),
}


def _field_source(name: str, type_text: str, default: str | None, doc: str) -> str:
    line = f"    {name}: {type_text}" + (f" = {default}" if default is not None else "")
    if len(line) > _LINE:
        raise ValueError(f"field {name}: its declaration is longer than {_LINE} characters")
    return line + "\n" + _docstring(doc, "    ") + "\n"


def _record_class(schema: Mapping[str, Any], named: Mapping[str, Mapping[str, Any]]) -> str:
    name = schema["name"]
    key = _KEY.search(schema.get("doc", ""))
    if key is None or key.group(1) not in {f["name"] for f in schema["fields"]}:
        raise ValueError(f"{name}: its doc names no key field (\"Key: doc_id.\")")
    declared = []
    for f in schema["fields"]:
        type_text = python_type(f["type"], named)
        if not f.get("doc"):
            raise ValueError(f"{name}.{f['name']}: no doc")
        declared.append((f["name"], type_text, _default(f, type_text), f["doc"] + _record_note(f["type"], named)))
    ordered = [d for d in declared if d[2] is None] + [d for d in declared if d[2] is not None]
    body = "".join(_field_source(*d) for d in ordered)
    return (f"@dataclass(frozen=True, slots=True)\nclass {name}(Record):\n{_docstring(schema['doc'], '    ')}\n\n"
            f'    schema_name: ClassVar[str] = "{name}"\n\n{body}\n'
            f"    @property\n    def key(self) -> str:\n"
            f'        """The Kafka record key: ``{key.group(1)}``."""\n        return self.{key.group(1)}\n')


def render_records(schemas: Schemas) -> str:
    """The source of ``docstream.records.generated`` for ``schemas`` (record schemas by name)."""
    named = named_types(schemas.values())
    enums = [t for t in named.values() if t.get("type") == "enum"]
    parts = []
    for enum in enums:
        symbols = ", ".join(json.dumps(s) for s in enum["symbols"])
        parts.append(f"{enum['name']} = Literal[{symbols}]\n" + _docstring(enum.get("doc", enum["name"]), "") + "\n")
    parts += [_record_class(schema, named) for schema in schemas.values()]
    names = list(schemas)
    parts.append(f"AnyRecord = {' | '.join(names)}\n" + _docstring("Any record of ``schemas/``.", "") + "\n")
    parts.append("RECORD_TYPES: dict[str, type[Record]] = {\n    cls.schema_name: cls for cls in (\n"
                 + textwrap.fill(", ".join(names), width=_LINE - 8, initial_indent=" " * 8,
                                 subsequent_indent=" " * 8, break_on_hyphens=False)
                 + ",\n    )\n}\n" + _docstring("Each record dataclass by its schema's name.", "") + "\n")
    body = _all([*(e["name"] for e in enums), *names, "AnyRecord", "RECORD_TYPES"]) + "\n" + "\n\n".join(parts)
    doc = _docstring(
        "The records of ``schemas/*.avsc``, one frozen dataclass each (its fields' types, defaults and docstrings "
        "the Avro fields'), and the Avro enums as ``Literal`` types. Written by ``python -m tools.gen_records``: do "
        "not edit; change the schema and run it again (docs/architecture.md \"Adding a field\").", "")
    return _header(doc, body, {**_STDLIB, "docstream.records.base": ("Record",)})


def _row_field_source(f: Any, named: Mapping[str, Mapping[str, Any]]) -> str:
    assert f.stored is not None or f.avro is not None
    if f.stored is not None and f.stored.type:
        type_text = f.stored.type
    else:
        type_text = python_type(f.avro["type"], named, row=True)
    if f.stored is not None and f.stored.default is not None:
        default = None if f.stored.default == LAYOUT.REQUIRED else f.stored.default
    else:
        default = _default(f.avro, type_text) if f.avro is not None else None
    note = _record_note(f.avro["type"], named) if f.avro is not None and "dict[str, Any]" in type_text else ""
    return _field_source(f.name, type_text, default, f.doc + note)


def render_rows(schemas: Schemas, specs: Sequence[Any] | None = None) -> str:
    """The source of ``docstream.store.generated``: the rows ``specs`` declare (``docstream.store.layout.RowSpec``;
    None: ``ROW_SPECS``), against ``schemas``."""
    specs = LAYOUT.ROW_SPECS if specs is None else specs
    named = named_types(schemas.values())
    parts = []
    for spec in specs:
        body = "".join(_row_field_source(f, named) for f in LAYOUT.row_fields(spec, schemas))
        parts.append(f"@dataclass(frozen=True, slots=True)\nclass {spec.name}:\n{_docstring(spec.doc, '    ')}\n\n"
                     + body)
    body = _all(spec.name for spec in specs) + "\n\n" + "\n\n".join(parts)
    doc = _docstring(
        "The store's rows that hold records' fields, as ``docstream.store.layout`` declares them: the fields each "
        "holds have their record field's type, default and doc unless the declaration says otherwise. Written by "
        "``python -m tools.gen_records``: do not edit; change the declaration or the schema and run it again "
        "(docs/architecture.md \"Adding a field\").", "")
    return _header(doc, body, {**_STDLIB, **LAYOUT.TYPE_IMPORTS})


def render(schemas_dir: Path, specs: Sequence[Any] | None = None) -> dict[Path, str]:
    """Both generated modules for the schemas of ``schemas_dir``, by path relative to the repository."""
    schemas = load_schemas(schemas_dir)
    return {RECORDS_MODULE: render_records(schemas), ROWS_MODULE: render_rows(schemas, specs)}


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or ``--check``) the generated modules; 1 when a check finds one that differs."""
    parser = argparse.ArgumentParser(prog="python -m tools.gen_records", description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=Path, default=ROOT / "schemas", help="the folder of the *.avsc")
    parser.add_argument("--out", type=Path, default=ROOT, help="the repository root to write under")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a module differs")
    args = parser.parse_args(argv)
    stale = []
    for relative, text in render(args.schemas).items():
        target = args.out / relative
        if target.is_file() and target.read_text(encoding="utf-8") == text:
            continue
        stale.append(str(relative))
        if not args.check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    verb = "stale" if args.check else "written"
    sys.stdout.write("".join(f"{verb}: {name}\n" for name in stale) or "up to date\n")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
