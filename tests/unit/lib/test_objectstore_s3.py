"""ObjectStore on s3:// through s3fs, against moto's S3 server on loopback (a stand-in for a cloud bucket)."""

from __future__ import annotations

import hashlib
import io
import random
import uuid
from collections.abc import Iterator

import pytest
import s3fs
from moto.server import ThreadedMotoServer

from docstream.errors import DocumentError, InputError
from docstream.objectstore import ObjectStore
from docstream.settings import ObjectStoreSettings
from tests.fixtures.services import free_port


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_store(s3_endpoint: str) -> ObjectStore:
    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}
    bucket = f"docstream-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(**options).mkdir(bucket)
    return ObjectStore(ObjectStoreSettings(url=f"s3://{bucket}/objects", storage_options=options))  # type: ignore[call-arg]


def test_s3_put_open_roundtrip_and_idempotency(s3_store: ObjectStore) -> None:
    data = b"%PDF-1.7 in a bucket"
    sha = hashlib.sha256(data).hexdigest()
    uri = s3_store.put(data, sha)
    assert uri == f"{s3_store.root_uri}/{sha[:2]}/{sha}"
    assert uri.startswith("s3://docstream-")
    assert s3_store.put(data, sha) == uri
    assert s3_store.open_bounded(uri, 1000) == data
    with pytest.raises(DocumentError) as caught:
        s3_store.open_bounded(uri, 5)
    assert caught.value.code == "too_large"


def test_s3_multipart_stream(s3_store: ObjectStore) -> None:
    data = random.Random(3).randbytes(12 * 1024 * 1024)
    sha = hashlib.sha256(data).hexdigest()
    uri = s3_store.put(io.BytesIO(data), sha)
    assert s3_store.open_bounded(uri, len(data)) == data


def test_s3_mismatch_leaves_no_object(s3_store: ObjectStore) -> None:
    wrong = hashlib.sha256(b"other").hexdigest()
    with pytest.raises(InputError) as caught:
        s3_store.put(b"these bytes", wrong)
    assert caught.value.code == "sha256_mismatch"
    assert not s3_store.exists(wrong)


def test_s3_missing_and_outside(s3_store: ObjectStore) -> None:
    with pytest.raises(DocumentError) as missing:
        s3_store.open_bounded(s3_store.uri_for("1" * 64), 100)
    assert missing.value.code == "source_not_found"
    with pytest.raises(InputError) as outside:
        s3_store.open_bounded(s3_store.root_uri + "-evil/x", 100)
    assert outside.value.code == "source_not_allowed"
