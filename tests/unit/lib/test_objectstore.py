"""ObjectStore on a local folder: content addressing, idempotency, confinement of source URIs."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from docstream.errors import ConfigError, DocumentError, InputError
from docstream.objectstore import ObjectStore
from docstream.settings import ObjectStoreSettings


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "objects"


@pytest.fixture
def store(root: Path) -> ObjectStore:
    return ObjectStore(ObjectStoreSettings(url=str(root)))  # type: ignore[call-arg]


class _ExplodingStream(io.RawIOBase):
    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        raise AssertionError("an existing object must not be read again")


def test_put_is_content_addressed(store: ObjectStore, root: Path) -> None:
    data = b"%PDF-1.7 hello"
    sha = _sha(data)
    uri = store.put(data, sha)
    path = root.resolve() / sha[:2] / sha
    assert uri == path.as_uri()
    assert path.read_bytes() == data
    assert store.exists(sha)
    assert store.uri_for(sha) == uri


def test_put_is_idempotent_and_skips_existing(store: ObjectStore) -> None:
    data = b"same bytes"
    first = store.put(data, _sha(data))
    again = store.put(io.BufferedReader(_ExplodingStream()), _sha(data))
    assert first == again


def test_put_streams_a_file(store: ObjectStore, tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    source.write_bytes(b"0123456789abcdef" * 300_000)
    sha = hashlib.sha256(source.read_bytes()).hexdigest()
    with source.open("rb") as stream:
        uri = store.put(stream, sha)
    assert store.open_bounded(uri, 10 * 1024 * 1024) == source.read_bytes()


def test_put_with_the_wrong_hash_leaves_nothing(store: ObjectStore, root: Path) -> None:
    wrong = _sha(b"other")
    with pytest.raises(InputError) as caught:
        store.put(b"these bytes", wrong)
    assert caught.value.code == "sha256_mismatch"
    assert not store.exists(wrong)
    assert [p for p in root.rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("sha", ["../../etc/passwd", "ABC", "g" * 64, "A" * 64])
def test_put_refuses_a_malformed_hash(store: ObjectStore, sha: str) -> None:
    with pytest.raises(InputError) as caught:
        store.put(b"x", sha)
    assert caught.value.code == "invalid_sha256"


def test_open_bounded_reads_up_to_the_limit(store: ObjectStore) -> None:
    data = b"x" * 1000
    uri = store.put(data, _sha(data))
    assert store.open_bounded(uri, 1000) == data
    with pytest.raises(DocumentError) as caught:
        store.open_bounded(uri, 999)
    assert caught.value.code == "too_large"


def test_open_bounded_missing_and_directory(store: ObjectStore, root: Path) -> None:
    data = b"present"
    store.put(data, _sha(data))
    with pytest.raises(DocumentError) as missing:
        store.open_bounded(store.uri_for("0" * 64), 100)
    assert missing.value.code == "source_not_found"
    with pytest.raises(DocumentError) as directory:
        store.open_bounded(root.resolve().as_uri(), 100)
    assert directory.value.code == "source_unreadable"


def _refused(store: ObjectStore, uri: str) -> str:
    with pytest.raises(InputError) as caught:
        store.open_bounded(uri, 1 << 20)
    return caught.value.code


@pytest.mark.parametrize(
    "uri", ["file:///etc/passwd", "/etc/passwd", "file://evil.example/etc/passwd", "http://example.com/a.pdf"]
)
def test_foreign_sources_are_refused(store: ObjectStore, uri: str) -> None:
    assert _refused(store, uri) == "source_not_allowed"


def test_dotdot_out_of_the_root_is_refused(store: ObjectStore, root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    root.mkdir()
    assert _refused(store, f"{root.resolve().as_uri()}/../secret.txt") == "source_not_allowed"
    assert _refused(store, f"{root}/../secret.txt") == "source_not_allowed"


def test_sibling_with_the_root_as_prefix_is_refused(store: ObjectStore, root: Path) -> None:
    sibling = root.parent / (root.name + "-evil")
    sibling.mkdir()
    (sibling / "a.pdf").write_bytes(b"x")
    assert _refused(store, (sibling / "a.pdf").resolve().as_uri()) == "source_not_allowed"


def test_symlink_escaping_the_root_is_refused(store: ObjectStore, root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    root.mkdir()
    (root / "link.pdf").symlink_to(secret)
    (root / "linkdir").symlink_to(tmp_path)
    assert _refused(store, (root / "link.pdf").as_uri()) == "source_not_allowed"
    assert _refused(store, (root / "linkdir" / "secret.txt").as_uri()) == "source_not_allowed"


def test_symlink_inside_the_root_is_followed(store: ObjectStore, root: Path) -> None:
    data = b"inside"
    uri = store.put(data, _sha(data))
    (root / "alias.pdf").symlink_to(Path(uri.removeprefix("file://")))
    assert store.open_bounded((root / "alias.pdf").as_uri(), 100) == data


def test_allowed_roots_and_schemes(root: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "doc.txt").write_bytes(b"shared doc")
    store = ObjectStore(ObjectStoreSettings(url=str(root), allowed_roots=[str(shared)]))  # type: ignore[call-arg]
    assert store.open_bounded((shared / "doc.txt").as_uri(), 100) == b"shared doc"
    no_file = ObjectStore(
        ObjectStoreSettings(url="s3://bucket/objects", allowed_schemes=["s3"], allowed_roots=[str(shared)])  # type: ignore[call-arg]
    )
    assert _refused(no_file, (shared / "doc.txt").as_uri()) == "source_not_allowed"


@pytest.mark.parametrize(
    "uri",
    [
        "s3://bucket/objects-evil/a.pdf",
        "s3://other/objects/a.pdf",
        "s3://bucket/objects/../secrets/a.pdf",
        "s3://bucket/objects/./a.pdf",
        "s3:///objects/a.pdf",
        "s3://bucket/objects/a.pdf?versionId=1",
        "gs://bucket/objects/a.pdf",
    ],
)
def test_remote_confinement(uri: str) -> None:
    store = ObjectStore(ObjectStoreSettings(url="s3://bucket/objects"))  # type: ignore[call-arg]
    with pytest.raises(InputError) as caught:
        store.check_uri(uri)
    assert caught.value.code == "source_not_allowed"
    assert store.check_uri("s3://bucket/objects/ab/abc") == "bucket/objects/ab/abc"


def test_unknown_scheme_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        ObjectStore(ObjectStoreSettings(url="nosuchscheme://x/y"))  # type: ignore[call-arg]
