"""Domain records: frozen dataclasses of ``schemas/*.avsc``, with paired converters.

The dataclasses are written from the schemas (``docstream.records.generated``, by ``python -m tools.gen_records``):
each field's type, default and docstring are its Avro field's. ``to_record()`` gives the dict fastavro writes;
``from_record()`` takes the dict fastavro reads (``docstream.records.base.Record``). Timestamps are timezone-aware
UTC datetimes. The ranges and enumerations of their fields are ``docstream.records.limits``'; a job's options,
typed, ``docstream.records.options.JobOptions``.

``ChunkEmbedded`` is the deprecated name of ``ChunkResult`` (docs/messaging.md "Renamed: ChunkEmbedded →
ChunkResult"): the same class, kept for one release.
"""

from docstream.records.base import Record, copy_fields, utc_now
from docstream.records.generated import (
    RECORD_TYPES,
    AnyRecord,
    ChunkCreated,
    ChunkResult,
    ChunkStatus,
    DocumentChunked,
    DocumentCompleted,
    DocumentStatus,
    DocumentSubmitted,
    JobState,
    JobStatus,
)
from docstream.records.limits import (
    CHUNK_MAX_TOKENS,
    CHUNK_OVERLAP_TOKENS,
    OUTPUT_TOO_LARGE,
    ChunkKind,
    Range,
    TextSource,
    output_too_large,
    record_limit,
)
from docstream.records.options import JobOptions

ChunkEmbedded = ChunkResult
"""Deprecated: the name of ``ChunkResult`` before the rename; the same class (``isinstance`` and construction work
as before). Kept for one release (docs/messaging.md "Renamed: ChunkEmbedded → ChunkResult")."""

__all__ = [
    "CHUNK_MAX_TOKENS",
    "CHUNK_OVERLAP_TOKENS",
    "OUTPUT_TOO_LARGE",
    "RECORD_TYPES",
    "AnyRecord",
    "ChunkCreated",
    "ChunkEmbedded",
    "ChunkKind",
    "ChunkResult",
    "ChunkStatus",
    "DocumentChunked",
    "DocumentCompleted",
    "DocumentStatus",
    "DocumentSubmitted",
    "JobOptions",
    "JobState",
    "JobStatus",
    "Range",
    "Record",
    "TextSource",
    "copy_fields",
    "output_too_large",
    "record_limit",
    "utc_now",
]
