"""The Milvus engine of a sink (pymilvus): a Milvus server, or Milvus Lite's (``milvus-lite server``).

The collection: ``id`` VARCHAR primary key (the point's UUIDv5), ``tenant``, ``source``, ``doc_id`` (the filter
columns), ``vector`` FLOAT_VECTOR with a cosine index, ``payload`` JSON. A value in a filter expression is a
quoted string literal (``_literal``: JSON's quoting, which Milvus' expressions read), never pasted as it is:
Milvus Lite does not take ``filter_params`` templates.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from pymilvus import DataType, MilvusClient, MilvusException
from pymilvus.exceptions import (
    ConnectError,
    DataNotMatchException,
    DataTypeNotMatchException,
    MilvusUnavailableException,
    ParamError,
    PrimaryKeyException,
)

from docstream.errors import ConfigError, DocstreamError, PoisonRecord, RetryableError
from docstream.ids import MAX_SOURCE_KEY_BYTES
from docstream.settings import SinkSettings
from docstream_sink.engine import HeldPoint
from docstream_sink.points import SinkPoint

__all__ = ["MilvusEngine"]

_T = TypeVar("_T")
_REFUSED = (DataNotMatchException, DataTypeNotMatchException, ParamError, PrimaryKeyException)
_UNAVAILABLE = (ConnectError, MilvusUnavailableException, ConnectionError, TimeoutError)
_SCAN_BATCH = 1000
_DELETE_BATCH = 500
"""Most ids in one delete's filter expression."""


def _literal(value: str) -> str:
    """``value`` as a string literal of a Milvus filter expression: double quotes, backslash escapes."""
    return json.dumps(value, ensure_ascii=False)


def _call(what: str, fn: Callable[[], _T]) -> _T:
    """Run one client call, its errors as docstream's (engine.py)."""
    try:
        return fn()
    except _REFUSED as exc:
        raise PoisonRecord(f"milvus refused the {what}: {str(exc)[:300]}", code="sink_refused") from exc
    except _UNAVAILABLE as exc:
        raise RetryableError(f"milvus did not answer the {what}: {str(exc)[:300]}", code="sink_unavailable") from exc
    except MilvusException as exc:
        raise DocstreamError(f"milvus failed the {what}: {str(exc)[:300]}", code="sink_error") from exc


class MilvusEngine:
    """A sink's points in one Milvus collection."""

    overlaps_reads = True

    def __init__(self, settings: SinkSettings) -> None:
        self._name = settings.collection
        self._timeout = settings.timeout_s
        self._client = _call("connection", lambda: MilvusClient(uri=settings.uri.get_secret_value(),
                                                                timeout=settings.timeout_s))
        self._ready = False

    def ensure(self, dimensions: int) -> None:
        if self._ready:
            return
        if not _call("collection check", lambda: self._client.has_collection(self._name, timeout=self._timeout)):
            schema = self._client.create_schema(auto_id=False, enable_dynamic_field=False)
            schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=36)
            schema.add_field("tenant", DataType.VARCHAR, max_length=128)
            schema.add_field("source", DataType.VARCHAR, max_length=MAX_SOURCE_KEY_BYTES + 64)
            schema.add_field("doc_id", DataType.VARCHAR, max_length=128)
            schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dimensions)
            schema.add_field("payload", DataType.JSON)
            index = self._client.prepare_index_params()
            index.add_index("vector", metric_type="COSINE", index_type="AUTOINDEX")
            _call("collection creation", lambda: self._client.create_collection(
                self._name, schema=schema, index_params=index, timeout=self._timeout))
        held = self._dimensions()
        if held != dimensions:
            raise ConfigError(f"milvus collection {self._name!r} holds vectors of {held} dimensions, the sink's "
                              f"model gives {dimensions}: name another collection")
        self._ready = True

    def _dimensions(self) -> int | None:
        described = _call("collection description",
                          lambda: self._client.describe_collection(self._name, timeout=self._timeout))
        for fld in described.get("fields", []):
            if fld.get("name") == "vector":
                return int(fld.get("params", {}).get("dim", 0))
        return None

    def upsert(self, points: Sequence[SinkPoint]) -> None:
        rows = [{"id": p.id, "tenant": p.tenant, "source": p.source, "doc_id": p.doc_id, "vector": p.vector,
                 "payload": p.payload} for p in points]
        _call("upsert", lambda: self._client.upsert(self._name, rows, timeout=self._timeout))

    def _delete(self, what: str, expression: str) -> int:
        result = _call(what, lambda: self._client.delete(self._name, filter=expression, timeout=self._timeout))
        return int(result.get("delete_count", -1)) if isinstance(result, dict) else -1

    def delete_other_versions(self, tenant: str, source: str, doc_id: str) -> int:
        return self._delete("delete of other versions", f"tenant == {_literal(tenant)} and source == "
                            f"{_literal(source)} and doc_id != {_literal(doc_id)}")

    def delete_source(self, tenant: str, source: str) -> int:
        return self._delete("delete of a source", f"tenant == {_literal(tenant)} and source == {_literal(source)}")

    def delete_ids(self, ids: Sequence[str]) -> None:
        if ids:
            _call("delete by id", lambda: self._client.delete(self._name, ids=list(ids), timeout=self._timeout))

    def delete_if_held(self, points: Sequence[tuple[str, str]]) -> None:
        by_doc: dict[str, list[str]] = {}
        for point_id, doc_id in points:
            by_doc.setdefault(doc_id, []).append(point_id)
        for doc_id, ids in by_doc.items():
            for start in range(0, len(ids), _DELETE_BATCH):
                listed = ", ".join(_literal(i) for i in ids[start:start + _DELETE_BATCH])
                self._delete("delete of held points", f"doc_id == {_literal(doc_id)} and id in [{listed}]")

    def scan(self, tenant: str) -> Iterator[HeldPoint]:
        if not _call("collection check", lambda: self._client.has_collection(self._name, timeout=self._timeout)):
            return
        iterator = _call("scan", lambda: self._client.query_iterator(
            self._name, batch_size=_SCAN_BATCH, filter=f"tenant == {_literal(tenant)}",
            output_fields=["id", "doc_id", "vector"], timeout=self._timeout))
        try:
            while batch := _call("scan", iterator.next):
                for row in batch:
                    yield str(row["id"]), str(row["doc_id"]), [float(x) for x in row["vector"]]
        finally:
            iterator.close()

    def close(self) -> None:
        self._client.close()
