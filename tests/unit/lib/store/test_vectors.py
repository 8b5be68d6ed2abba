"""Float vectors bound by numpy write the bytes the driver's own serializer writes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cassandra.cqltypes import VectorType, lookup_casstype
from cassandra.protocol import ColumnMetadata
from cassandra.query import PreparedStatement

from docstream.store import vectors
from docstream.store.vectors import fast_float_vectors, float32_vector_type


def _vector_type(size: int) -> type:
    marshal = "org.apache.cassandra.db.marshal"
    return lookup_casstype(f"{marshal}.VectorType({marshal}.FloatType, {size})")


@pytest.mark.parametrize("values", [
    [1.0, 2.5, -3.0, 4.0],
    [0.0, -0.0, 1e-38, 3.4e38],
    [math.inf, -math.inf, 0.1, -0.1],
])
def test_same_bytes_as_the_driver(values: list[float]) -> None:
    driver = _vector_type(4)
    fast = float32_vector_type(driver)
    assert issubclass(fast, driver)
    assert fast.serialize(values, 5) == driver.serialize(values, 5)
    assert fast.serialize(np.asarray(values, dtype="<f4"), 5) == driver.serialize(values, 5)


def test_a_row_of_the_model_dimension() -> None:
    driver = _vector_type(384)
    row = np.random.default_rng(7).standard_normal(384).astype(np.float32)
    assert float32_vector_type(driver).serialize(row, 5) == driver.serialize(row.tolist(), 5)


def test_wrong_length_is_refused() -> None:
    fast = float32_vector_type(_vector_type(4))
    with pytest.raises(ValueError, match="size 4"):
        fast.serialize([1.0, 2.0, 3.0], 5)


def test_only_float_vectors() -> None:
    with pytest.raises(ValueError, match="not a vector<float"):
        float32_vector_type(lookup_casstype("org.apache.cassandra.db.marshal.Int32Type"))


def _statement() -> PreparedStatement:
    columns = [
        ColumnMetadata("ks", "t", "doc_id", lookup_casstype("org.apache.cassandra.db.marshal.UTF8Type")),
        ColumnMetadata("ks", "t", "embedding", _vector_type(3)),
    ]
    return PreparedStatement(columns, b"id", [0], "INSERT ...", "ks", 5, None, None, None)


def test_only_vector_columns_are_replaced() -> None:
    statement = fast_float_vectors(_statement())
    doc_id, embedding = statement.column_metadata
    assert doc_id.type is lookup_casstype("org.apache.cassandra.db.marshal.UTF8Type")
    assert issubclass(embedding.type, VectorType) and embedding.type.__name__ == "Float32Vector3"
    assert statement.bind(("d", [1.0, 2.0, 3.0])).values[1] == _vector_type(3).serialize([1.0, 2.0, 3.0], 5)


def test_an_unchecked_driver_release_keeps_the_driver_serializer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectors, "DRIVER_VERSIONS", frozenset({"0.0.0"}))
    statement = _statement()
    before = list(statement.column_metadata)
    assert fast_float_vectors(statement).column_metadata == before
