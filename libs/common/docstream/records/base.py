"""What every record shares: the base class of the generated records (``to_record()``/``from_record()``), the
clock they are stamped with, and :func:`copy_fields`, which copies fields by name between records and rows. Pure."""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, TypeVar, Union, get_args, get_origin, get_type_hints

__all__ = ["Record", "compiled", "copy_fields", "utc_now"]

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


def compiled(name: str, parameters: str, expression: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    """``def name(parameters): return expression``, compiled with ``namespace`` as its globals, the way
    ``dataclasses`` writes ``__init__``: for code made of a dataclass's field names, never of input."""
    exec(f"def {name}({parameters}):\n    return {expression}\n", namespace)  # noqa: S102 - field names, not input
    function: Callable[..., Any] = namespace[name]
    return function


def _aware(value: Any) -> Any:
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value


@dataclass(frozen=True, slots=True)
class _Codec:
    """A record class's ``to_record`` and ``from_record`` (every field given), compiled once for the class."""

    names: frozenset[str]
    to_record: Callable[[Any], dict[str, Any]]
    from_record: Callable[[Mapping[str, Any]], Any]


_CODECS: dict[type[Any], _Codec] = {}


def _codec(cls: type[Any]) -> _Codec:
    """``cls``'s codec, compiled on first use (as ``dataclasses`` writes ``__init__``): each field read by name,
    with no loop and no dict in between; a field that may hold a timestamp goes through ``_aware``."""
    codec = _CODECS.get(cls)
    if codec is not None:
        return codec
    hints = get_type_hints(cls)
    names = _field_names(cls)
    out = ", ".join(f"{name!r}: record.{name}" for name in names)
    read = ", ".join(f"{name}=aware(record[{name!r}])" if _may_hold_timestamp(hints[name])
                     else f"{name}=record[{name!r}]" for name in names)
    namespace: dict[str, Any] = {"cls": cls, "aware": _aware}
    codec = _CODECS[cls] = _Codec(frozenset(names), compiled("to_record", "record", f"{{{out}}}", namespace),
                                  compiled("from_record", "record", f"cls({read})", namespace))
    return codec


def _may_hold_timestamp(hint: Any) -> bool:
    return hint is datetime or datetime in get_args(hint)


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
        return _codec(type(self)).to_record(self)

    @classmethod
    def from_record(cls: type[_R], record: dict[str, Any]) -> _R:
        """Build from a decoded Avro dict (a timestamp without a zone is UTC); fields the class doesn't know are
        ignored, fields the dict lacks take their defaults."""
        codec = _codec(cls)
        if codec.names <= record.keys():  # what the Avro reader gives: every field
            built: _R = codec.from_record(record)
            return built
        values = {name: record[name] for name in codec.names if name in record}
        for key, value in values.items():
            values[key] = _aware(value)
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
    return _as_it_is


def _as_it_is(value: Any) -> Any:
    return value


_FieldPlan = tuple[tuple[int, str, Callable[[Any], Any]], ...]
_Copier = Callable[[tuple[Any, ...], dict[str, Any]], Any]
_PLANS: dict[tuple[type[Any], tuple[type[Any], ...], frozenset[str]], _Copier] = {}


def _copier(target: type[Any], plan: _FieldPlan) -> _Copier:
    """The plan as one function, compiled once (as ``dataclasses`` writes ``__init__``): each field read and
    passed by name, converted only where its type asks, with no dict of the found values in between."""
    names: dict[str, Any] = {"target": target}
    arguments = []
    for at, name, convert in plan:
        value = f"sources[{at}].{name}"
        if convert is not _as_it_is:
            names[f"convert_{name}"] = convert
            value = f"convert_{name}({value})"
        arguments.append(f"{name}={value}")
    copier: _Copier = compiled("copy", "sources, values", f"target({', '.join([*arguments, '**values'])})", names)
    return copier


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
    copy = _PLANS.get(key)
    if copy is None:
        copy = _PLANS[key] = _copier(target, _plan(target, key[1], key[2]))
    copied: R = copy(sources, values)
    return copied
