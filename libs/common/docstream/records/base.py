"""What every record shares: the base class of the generated records (``to_record()``/``from_record()``), the
clock they are stamped with, and :func:`copy_fields`, which copies fields by name between records and rows. Pure."""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from dataclasses import fields
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, TypeVar, Union, get_args, get_origin, get_type_hints

__all__ = ["Record", "copy_fields", "utc_now"]

_R = TypeVar("_R", bound="Record")
R = TypeVar("R")


def utc_now() -> datetime:
    """Now, UTC, millisecond precision (what timestamp-millis keeps)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=(now.microsecond // 1000) * 1000)


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


def _field_names(cls: type[Any]) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


class Record:
    """The base of the record dataclasses (``docstream.records.generated``, written from ``schemas/*.avsc``).

    Attributes:
        schema_name: the Avro record's name, the key of ``RECORD_TYPES``.
    """

    schema_name: ClassVar[str]

    def to_record(self) -> dict[str, Any]:
        """The dict written by the Avro serializer.

        Shallow: the values are the record's own (records are flat and frozen), so encoding a
        ChunkResult does not copy its embedding (``dataclasses.asdict`` deep-copies every list).
        """
        return {name: getattr(self, name) for name in _field_names(type(self))}

    @classmethod
    def from_record(cls: type[_R], record: dict[str, Any]) -> _R:
        """Build from a decoded Avro dict; fields the class doesn't know are ignored."""
        values = {name: record[name] for name in _field_names(cls) if name in record}
        for key, value in values.items():
            if isinstance(value, datetime) and value.tzinfo is None:
                values[key] = value.replace(tzinfo=UTC)
        return cls(**values)

    @property
    def key(self) -> str:
        """The Kafka record key (each record names its key field in its schema's doc: ``Key: doc_id``)."""
        raise NotImplementedError


# -- copy_fields: a record or a row from other dataclasses, field by field name ----------------------------


def _converter(hint: Any) -> Callable[[Any], Any]:
    """How a source's value becomes a field of type ``hint``: sequences become the field's tuple (of the items'
    records: ``Mention.from_record``) or list, maps are copied; other values are taken as they are."""
    if get_origin(hint) is Annotated:
        hint = get_args(hint)[0]
    if get_origin(hint) in (Union, types.UnionType):  # an optional sequence: None stays None
        inner = _converter(next(arg for arg in get_args(hint) if arg is not type(None)))
        return lambda value: None if value is None else inner(value)
    origin = get_origin(hint)
    if origin is tuple:
        item = get_args(hint)[0]
        from_record = getattr(item, "from_record", None)
        if from_record is not None:
            return lambda value: tuple(from_record(v) if isinstance(v, Mapping) else v for v in value)
        return tuple
    if origin is list:
        return list
    if origin is dict:
        return dict
    return lambda value: value


_FieldPlan = tuple[tuple[int, str, Callable[[Any], Any]], ...]
_PLANS: dict[tuple[type[Any], tuple[type[Any], ...], frozenset[str]], _FieldPlan] = {}


def _plan(target: type[Any], sources: tuple[type[Any], ...], given: frozenset[str]) -> _FieldPlan:
    hints = get_type_hints(target, include_extras=True)
    plan = []
    for f in fields(target):
        if f.name in given:
            continue
        holders = [i for i, source in enumerate(sources) if f.name in {s.name for s in fields(source)}]
        if len(holders) > 1:
            names = ", ".join(sources[i].__name__ for i in holders)
            raise TypeError(f"{target.__name__}.{f.name}: both {names} have it; give it in values")
        if holders:
            plan.append((holders[0], f.name, _converter(hints[f.name])))
    return tuple(plan)


def copy_fields(target: type[R], *sources: Any, **values: Any) -> R:
    """A ``target`` (a row or a record dataclass) holding every field of ``sources`` that it has a field of the
    same name for, as its type holds it (a list as a tuple, a tuple as a list), then ``values`` (what the sources
    do not say, or say otherwise).

    So a field added to a record reaches the row of the same name (``docstream.store.layout``) without another
    line (docs/architecture.md "Adding a field").

    Raises:
        TypeError: two sources have a field ``target`` has and ``values`` does not give (say which one wins).
    """
    key = (target, tuple(type(s) for s in sources), frozenset(values))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _plan(target, key[1], key[2])
    found = {name: convert(getattr(sources[at], name)) for at, name, convert in plan}
    return target(**found, **values)
