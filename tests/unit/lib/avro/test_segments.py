"""Float arrays written and read a segment at a time: the bytes fastavro writes, any block layout read."""

from __future__ import annotations

import copy
import io
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from docstream.avro.segments import Float32Vector, float32_bytes, read_body, segment_plan, write_body
from docstream.records import ChunkResult, DocumentCompleted, utc_now

SCHEMAS = Path(__file__).resolve().parents[4] / "schemas"


def _raw(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.avsc").read_text())


def _result(embedding: list[float]) -> dict:
    return ChunkResult(
        job_id="j", doc_id="d", chunk_id="c", chunk_index=3, chunk_count=9, model_id="m", status="ok",
        token_count=200, page_start=1, page_end=2, embedded_at=utc_now(), embedding=embedding,
        error_code=None, error="é", chunker_settings="max=256",
    ).to_record()


def _completed(embedding: list[float]) -> dict:
    return DocumentCompleted(
        job_id="j", doc_id="d", status="partial", model_id="m", chunk_count=4, failed_chunks=1, token_count=900,
        embedding=embedding, completed_at=utc_now(), error_code="model_error", error=None, filename="a.pdf",
    ).to_record()


def _fastavro(raw: dict, record: dict) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(raw, named_schemas={}), record, strict_allow_default=True)
    return out.getvalue()


EMBEDDINGS = [
    [],
    [0.5],
    np.random.default_rng(1).standard_normal(384).astype(np.float32).tolist(),
    [0.0, -0.0, 1e-38, -3.4e38, float("inf"), 0.1],
]


@pytest.mark.parametrize("embedding", EMBEDDINGS, ids=["empty", "one", "384", "edges"])
@pytest.mark.parametrize(("name", "make"), [("ChunkResult", _result), ("DocumentCompleted", _completed)])
def test_the_bytes_fastavro_writes_and_back(name: str, make, embedding: list[float]) -> None:
    raw = _raw(name)
    plan = segment_plan(raw)
    assert plan is not None
    record = make(embedding)
    out = io.BytesIO()
    write_body(plan, record, out)
    assert out.getvalue() == _fastavro(raw, record)
    stream = io.BytesIO(out.getvalue())
    back = read_body(plan, stream)
    assert stream.tell() == len(out.getvalue())
    expected = schemaless_reader(io.BytesIO(out.getvalue()), parse_schema(raw, named_schemas={}), None)
    assert back == expected


def test_no_float_array_no_plan() -> None:
    assert segment_plan(_raw("ChunkCreated")) is None


def _long(value: int) -> bytes:
    n, out = (value << 1) ^ (value >> 63), bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_reads_several_blocks_and_negative_counts() -> None:
    raw = {"type": "record", "name": "V", "fields": [{"name": "a", "type": "int"},
                                                      {"name": "v", "type": {"type": "array", "items": "float"}},
                                                      {"name": "b", "type": "string"}]}
    plan = segment_plan(raw)
    assert plan is not None
    floats = np.asarray([1.0, 2.0, 3.0], dtype="<f4")
    body = (_long(7) + _long(2) + floats[:2].tobytes() + _long(-1) + _long(4) + floats[2:].tobytes() + b"\x00"
            + _long(2) + b"hi")
    assert read_body(plan, io.BytesIO(body)) == {"a": 7, "v": [1.0, 2.0, 3.0], "b": "hi"}


def test_truncated_array_is_refused() -> None:
    plan = segment_plan(_raw("ChunkResult"))
    assert plan is not None
    out = io.BytesIO()
    write_body(plan, _result([0.25] * 8), out)
    data = out.getvalue()
    cut = data.index(np.asarray([0.25], dtype="<f4").tobytes()) + 10
    with pytest.raises(EOFError):
        read_body(plan, io.BytesIO(data[:cut]))


def test_unknown_fields_are_refused_as_fastavro_strict_does() -> None:
    plan = segment_plan(_raw("ChunkResult"))
    assert plan is not None
    with pytest.raises(ValueError, match="more fields than the schema"):
        write_body(plan, {**_result([1.0]), "surprise": 1}, io.BytesIO())


def test_a_nested_sequence_is_refused() -> None:
    plan = segment_plan(_raw("ChunkResult"))
    assert plan is not None
    with pytest.raises(ValueError, match="flat sequence"):
        write_body(plan, _result([[1.0, 2.0]]), io.BytesIO())  # type: ignore[list-item]


VALUES = [
    [],
    [0.5, -0.0, 1e-45, 3.4e38, -3.4e38, float("inf"), float("-inf"), 0.1, 1, True],
    np.random.default_rng(2).standard_normal(384).tolist(),
]


@pytest.mark.parametrize("values", VALUES, ids=["empty", "edges", "384 doubles"])
def test_float32_bytes_are_numpys_little_endian_float32_bytes(values: list[float]) -> None:
    assert float32_bytes(values) == np.asarray(values, dtype="<f4").tobytes()
    assert float32_bytes(np.asarray(values, dtype=np.float64)) == np.asarray(values, dtype="<f4").tobytes()


def test_float32_bytes_of_a_value_beyond_float32_is_infinity_as_numpy_casts_it() -> None:
    with np.errstate(over="ignore"):
        assert float32_bytes([1e39, -1e300]) == np.asarray([np.inf, -np.inf], dtype="<f4").tobytes()


def test_float32_bytes_refuses_what_is_not_a_flat_sequence_of_numbers() -> None:
    for bad in (["x"], [None], [[1.0, 2.0]], np.ones((2, 2))):
        with pytest.raises(ValueError, match="flat sequence of floats"):
            float32_bytes(bad)  # type: ignore[arg-type]


def test_a_float32_vector_reads_as_its_floats_and_gives_the_bytes_it_came_from() -> None:
    row = np.random.default_rng(3).standard_normal(384).astype(np.float32)
    vector = Float32Vector(row)
    assert vector == row.tolist() and row.tolist() == vector and list(vector) == row.tolist()
    assert len(vector) == 384 and vector[0] == row.tolist()[0] and vector[-1] == row.tolist()[-1]
    assert vector[2:5] == row.tolist()[2:5] and vector.tolist() == row.tolist()
    assert vector != row.tolist()[:-1] and vector != [*row.tolist()[:-1], 0.5] and vector != "abc"
    assert float32_bytes(vector) == vector.packed == row.astype("<f4").tobytes()
    # numpy reads its bytes as they are
    assert np.array_equal(np.asarray(vector), row) and np.asarray(vector, dtype=np.float64).dtype == np.float64
    assert not np.asarray(vector).flags.writeable and np.array(vector, copy=True).flags.writeable
    plan = segment_plan(_raw("ChunkResult"))
    assert plan is not None
    record = _result(vector)
    out = io.BytesIO()
    write_body(plan, record, out)
    expected = _fastavro(_raw("ChunkResult"), {**record, "embedding": row.tolist()})
    assert out.getvalue() == expected, "the bytes fastavro writes"
    assert _fastavro(_raw("ChunkResult"), record) == expected, "fastavro writes it as the list of its floats"
    # a view of a model's batch (a broadcast row, a column slice) keeps its values
    batch = np.broadcast_to(np.arange(4, dtype=np.float32), (3, 4))
    assert Float32Vector(batch[1]).packed == np.arange(4, dtype="<f4").tobytes()
    assert Float32Vector(np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1]) == [1.0, 5.0, 9.0]
    assert Float32Vector([1, 2.5]) == [1.0, 2.5] and repr(Float32Vector([1, 2.5])) == "[1.0, 2.5]"


def test_a_float32_vector_cannot_change_so_its_bytes_stay_its_values() -> None:
    vector = Float32Vector(np.arange(3, dtype=np.float32))
    changes = [lambda: vector.append(1.0), lambda: vector.__setitem__(0, 9.0),  # type: ignore[attr-defined, index]
               lambda: vector.__delitem__(0), lambda: vector.sort()]  # type: ignore[attr-defined]
    for change in changes:
        with pytest.raises((TypeError, AttributeError)):
            change()
    with pytest.raises(TypeError, match="unhashable"):
        hash(vector)
    assert vector == [0.0, 1.0, 2.0] and vector.packed == np.arange(3, dtype="<f4").tobytes()


def test_a_float32_vector_pickles_and_copies_with_its_bytes() -> None:
    vector = Float32Vector(np.linspace(0, 1, 5, dtype=np.float32))
    for twin in (pickle.loads(pickle.dumps(vector)), copy.copy(vector), copy.deepcopy(vector)):
        assert type(twin) is Float32Vector and twin == vector and twin.packed == vector.packed


def test_a_float32_vector_is_made_of_one_dimension() -> None:
    with pytest.raises(ValueError, match="one-dimensional"):
        Float32Vector(np.ones((2, 2), dtype=np.float32))


def test_a_models_batch_becomes_one_float32_vector_a_row_each_with_its_bytes() -> None:
    batch = np.random.default_rng(4).standard_normal((5, 384)).astype(np.float32)
    vectors = Float32Vector.rows(batch)
    assert [type(v) for v in vectors] == [Float32Vector] * 5
    assert [list(v) for v in vectors] == batch.tolist()
    assert [v.packed for v in vectors] == [row.astype("<f4").tobytes() for row in batch]
    assert [v.packed for v in Float32Vector.rows(np.broadcast_to(batch[0], (2, 384)))] == [batch[0].tobytes()] * 2
    assert Float32Vector.rows(np.zeros((0, 384), dtype=np.float32)) == []
    assert Float32Vector.rows(np.zeros((2, 0), dtype=np.float32)) == [[], []]  # a row each, empty
    with pytest.raises(ValueError, match="two-dimensional"):
        Float32Vector.rows(batch[0])


def test_a_decoded_float_array_is_a_float32_vector_holding_the_bytes_it_came_in() -> None:
    plan = segment_plan(_raw("ChunkResult"))
    assert plan is not None
    row = np.random.default_rng(6).standard_normal(384).astype(np.float32)
    out = io.BytesIO()
    write_body(plan, _result(row.tolist()), out)
    back = read_body(plan, io.BytesIO(out.getvalue()))
    assert type(back["embedding"]) is Float32Vector and back["embedding"] == row.tolist()
    assert back["embedding"].packed == row.astype("<f4").tobytes()
    assert read_body(plan, io.BytesIO(_fastavro(_raw("ChunkResult"), _result([]))))["embedding"] == []
