"""Response models whose fields are a store row's, or an Avro record's: each typed as the row (or the record) types it
and described by the doc of the record field it holds (``docstream.store.layout``), so a field added to the row or
the record is in the API without an edit here (docs/architecture.md "Adding a field")."""

from __future__ import annotations

import types
from collections.abc import Callable, Collection, Mapping
from dataclasses import fields
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel, Field, create_model

from docstream.avro.schemas import SchemaSet

__all__ = ["api_type", "avro_schemas", "with_record_fields", "with_row_fields"]

M = TypeVar("M", bound=BaseModel)


def avro_schemas() -> dict[str, dict[str, Any]]:
    """The records' Avro schemas (``schemas/*.avsc``) by name: where the row fields' docs come from."""
    return {schema.name: schema.raw for schema in SchemaSet.load()}


_AVRO_PRIMITIVES: dict[str, type] = {"int": int, "long": int, "float": float, "double": float, "string": str,
                                     "boolean": bool}


def with_record_fields(record: Mapping[str, Any], *, nested: Mapping[str, type[BaseModel]] | None = None,
                       ) -> Callable[[type[M]], type[M]]:
    """A class decorator: the response model it decorates, with the fields of the Avro record schema ``record`` in
    the record's order, each typed as Avro types it, described by its doc and required unless Avro gives it a
    default, then the model's own fields.

    Args:
        record: the record schema (a record of ``avro_schemas``, or one named in them:
            ``docstream_ingest.arrow.field_types`` finds those).
        nested: the response model of each record nested in it, by Avro name.

    Raises:
        ValueError: a field's type is one a response model does not show (bytes, enum, fixed, a logical type, a
            nested record not in ``nested``).
    """
    models = dict(nested or {})

    def kind(avro: Any) -> Any:
        if isinstance(avro, list):
            members = [kind(member) for member in avro if member != "null"]
            if len(members) != 1:
                raise ValueError(f"a union of {avro} is not shown")
            return members[0] | None if "null" in avro else members[0]
        if isinstance(avro, str):
            if avro in _AVRO_PRIMITIVES:
                return _AVRO_PRIMITIVES[avro]
            if avro in models:
                return models[avro]
        if isinstance(avro, dict) and "logicalType" not in avro:
            if avro.get("type") == "array":
                return list[kind(avro["items"])]  # type: ignore[misc]
            if avro.get("type") == "map":
                return dict[str, kind(avro["values"])]  # type: ignore[misc]
            if avro.get("type") == "record" and avro.get("name") in models:
                return models[avro["name"]]
            if avro.get("type") in _AVRO_PRIMITIVES:
                return _AVRO_PRIMITIVES[avro["type"]]
        raise ValueError(f"an Avro field of type {avro} is not shown")

    definitions: dict[str, Any] = {
        f["name"]: (kind(f["type"]), Field(f.get("default", ...), description=f.get("doc")))
        for f in record["fields"]
    }

    def decorate(model: type[M]) -> type[M]:
        own = {name: (info.annotation, info) for name, info in model.model_fields.items() if name not in definitions}
        return _rebuilt(model, {**definitions, **own})

    return decorate


def _rebuilt(model: type[M], definitions: dict[str, Any]) -> type[M]:
    """``model`` built again with the fields ``definitions`` gives, in its order (its name, config, doc, module)."""
    built: type[M] = create_model(
        model.__name__, __config__=model.model_config or None, __doc__=model.__doc__, __module__=model.__module__,
        **definitions,
    )
    return built


def api_type(hint: Any) -> Any:
    """A row field's type as a response shows it: a tuple as a list, ``Annotated`` marks dropped."""
    if get_origin(hint) is Annotated:
        return api_type(get_args(hint)[0])
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        members = tuple(api_type(arg) for arg in get_args(hint))
        return Union[members]  # noqa: UP007 - built from a tuple of types
    if origin is tuple and len(get_args(hint)) == 2 and get_args(hint)[1] is Ellipsis:
        return list[api_type(get_args(hint)[0])]  # type: ignore[misc]
    return hint


def with_row_fields(row: type[Any], docs: Mapping[str, str], *, hidden: Mapping[str, str] | None = None,
                    shown_as: Mapping[str, str] | None = None,
                    narrowed: Mapping[str, Any] | None = None,
                    picks: Collection[str] | None = None, absent: str = "") -> Callable[[type[M]], type[M]]:
    """A class decorator: the response model it decorates, with every field of the ``row`` dataclass first, in the
    row's order, then the model's own fields (its fields not named as row fields).

    Every row field a response shows is always there (required), typed as the row types it (``api_type``) and
    described by ``docs`` (``docstream.store.layout.row_docs``: its Avro field's doc). A row a response may show
    before it exists gives only ``picks``, each typed ``| None`` (null: no row yet).

    Args:
        row: the row dataclass.
        docs: each row field's description, by name.
        hidden: the row fields a response does not show, and why.
        shown_as: row fields a response shows as one of the model's own fields instead (in the row field's place).
        narrowed: row fields whose type a response narrows (a ``Literal`` of the values it shows).
        picks: the only row fields a response shows, each null before the row exists; with ``hidden``, refused.
        absent: what a picked field's null means, added to its description.

    Raises:
        ValueError: ``hidden``, ``shown_as``, ``narrowed`` or ``picks`` names no row field, or both ``hidden`` and
            ``picks`` are given.
    """
    shown = dict(shown_as or {})
    narrow = dict(narrowed or {})
    names = {f.name for f in fields(row)}
    unknown = (set(hidden or {}) | set(shown) | set(narrow) | set(picks or ())) - names
    if unknown:
        raise ValueError(f"{row.__name__} has no fields {sorted(unknown)}")
    if hidden is not None and picks is not None:
        raise ValueError(f"{row.__name__}: give the fields hidden or the fields picked, not both")
    hide = set(hidden or {}) if picks is None else names - set(picks)
    ours = names if picks is None else set(picks)

    def decorate(model: type[M]) -> type[M]:
        hints = get_type_hints(row, include_extras=True)
        # a field of the model named as a row field is the row's (a model built before, decorated again)
        own = {name: (info.annotation, info) for name, info in model.model_fields.items()
               if name not in ours or name in shown.values()}
        definitions: dict[str, Any] = {}
        for f in fields(row):
            if f.name in shown:
                definitions[shown[f.name]] = own.pop(shown[f.name])
            elif f.name not in hide:
                kind = narrow.get(f.name, api_type(hints[f.name]))
                described = docs.get(f.name) or ""
                if picks is not None:
                    kind, described = kind | None, f"{described} {absent}".strip()
                definitions[f.name] = (kind, Field(..., description=described or None))
        definitions.update(own)
        return _rebuilt(model, definitions)

    return decorate
