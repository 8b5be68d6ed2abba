"""A job's options as a typed record. Pure.

The store keeps them, and the API shows them, as a map of strings (``JobRow.options``; a Cassandra
``map<text, text>``, SQLite JSON): :meth:`JobOptions.from_mapping` and :meth:`JobOptions.to_mapping` convert at
those edges, so what is on disk and on the wire stays as it was, and code that reads an option reads a typed field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, get_type_hints

from docstream.lanes import BATCH, Lane, lane_of

__all__ = ["JobOptions"]


@dataclass(frozen=True, slots=True)
class JobOptions:
    """What a job's submission asked for; None: not asked (the service's default). The options' keys in the stored
    map are the fields' names; every reader of a job's options reads them here, from a jobs row's ``options``.

    Attributes:
        model_id: the model of the job's embeddings; None or empty: the service's (the API's and the export's
            default model).
        chunk_max_tokens: the job's chunk size; a value that is not an int as ``str(int)`` writes it stays in
            ``other``.
        chunk_overlap_tokens: the job's chunk overlap; read as ``chunk_max_tokens``.
        tasks: canonical JSON of the job's ``TaskRequest`` records (``docstream.tasks.selection.tasks_option``,
            read back by ``docstream.tasks.selection.job_tasks``); None or empty: embed alone.
        priority: the lane asked for (``interactive``; batch is not written), as given; ``lane`` reads it.
        origin: ``external`` for a job the chunker made for an external producer's document.
        other: options this version does not know, or whose value it does not read, kept as they were.
    """

    model_id: str | None = None
    chunk_max_tokens: int | None = None
    chunk_overlap_tokens: int | None = None
    tasks: str | None = None
    priority: str | None = None
    origin: str | None = None
    other: Mapping[str, str] = field(default_factory=dict)

    @property
    def lane(self) -> Lane:
        """The job's lane: batch unless it asked for interactive (``docstream.lanes.lane_of``): no priority, an
        empty one or any other value (a foreign writer's) is batch."""
        return lane_of(self.priority or BATCH)

    @classmethod
    def from_mapping(cls, options: Mapping[str, str]) -> JobOptions:
        """The options of a stored map; never fails: a value that is not what its option holds stays in ``other``,
        so ``to_mapping`` gives the map back as it was."""
        typed: dict[str, Any] = {}
        other: dict[str, str] = {}
        for key, value in options.items():
            kind = _KINDS.get(key)
            if kind is int and _is_int(value):
                typed[key] = int(value)
            elif kind is str:
                typed[key] = value
            else:
                other[key] = value
        return cls(**typed, other=other)

    def to_mapping(self) -> dict[str, str]:
        """The map of strings the store keeps: every option asked for, then the others as they were."""
        given = {name: str(getattr(self, name)) for name in _KINDS if getattr(self, name) is not None}
        return {**given, **self.other}


def _is_int(text: str) -> bool:
    """Whether ``text`` is an int written as ``str(int)`` writes it (so it reads back to the same text)."""
    try:
        return str(int(text)) == text
    except ValueError:
        return False


_HINTS = get_type_hints(JobOptions)
_KINDS: dict[str, type] = {f.name: int if _HINTS[f.name] == int | None else str for f in fields(JobOptions)
                           if f.name != "other"}
"""The options this version reads, by key (the fields' names), and the type each holds."""
