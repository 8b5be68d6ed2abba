"""ObjectStore: content-addressed document bytes on anything fsspec opens, read back confined.

Documents are written once under ``<root>/<sha[:2]>/<sha>`` (``root`` is
``settings.object_store.url``: a local folder by default, or ``file://``, ``s3://``,
``gs://``...). Writing the same bytes again is a no-op that returns the same URI.

``open_bounded`` is the only way services read a ``source_uri``; because external producers
may put any string in a DocumentSubmitted, it refuses URIs whose scheme is not allowed or
whose path is not under the store root or one of ``allowed_roots`` (local paths are
resolved first, so neither ``..`` nor a symbolic link leads out), and reads at most
``max_bytes``.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlsplit

from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from docstream.errors import ConfigError, DocumentError, InputError, RetryableError
from docstream.settings import ObjectStoreSettings

__all__ = ["ObjectStore"]

_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Location:
    """A scheme and a normalized path: an absolute resolved path for ``file``, ``bucket/key`` else."""

    scheme: str
    path: str

    def contains(self, other: _Location) -> bool:
        if other.scheme != self.scheme:
            return False
        if self.scheme == "file":
            return Path(other.path).is_relative_to(self.path)
        return other.path == self.path or other.path.startswith(self.path.rstrip("/") + "/")


def _refuse(uri: str, why: str) -> InputError:
    return InputError(f"source_uri {uri!r} is not allowed: {why}", code="source_not_allowed")


def _parse(uri: str) -> _Location:
    """Where a URI (or a bare local path) points; local paths resolved, ``..`` refused elsewhere."""
    parts = urlsplit(uri)
    if parts.query or parts.fragment:
        raise _refuse(uri, "query or fragment")
    scheme = parts.scheme.lower() or "file"
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise _refuse(uri, "file URI with a host")
        path = unquote(parts.path) if parts.scheme else uri
        if "\x00" in path:
            raise _refuse(uri, "NUL in path")
        return _Location("file", os.path.realpath(path))
    # fsspec takes remote keys literally (no percent-decoding), and so do we.
    segments = f"{parts.netloc}{parts.path}".split("/")
    if not segments[0] or any(s in (".", "..") for s in segments):
        raise _refuse(uri, "relative segments or no bucket")
    return _Location(scheme, "/".join(s for s in segments if s))


def _is_local(fs: AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


class ObjectStore:
    """Content-addressed document bytes; see the module docstring.

    Args:
        settings: ``settings.object_store``.

    Raises:
        ConfigError: the URL's scheme is unknown or its fsspec driver (s3fs, gcsfs) is missing.
        InputError: an allowed root is malformed.
    """

    def __init__(self, settings: ObjectStoreSettings) -> None:
        self._settings = settings
        self._options: dict[str, Any] = dict(settings.storage_options)
        try:
            fs, root = url_to_fs(settings.url, **self._options)
        except (ValueError, ImportError) as exc:
            raise ConfigError(f"object store {settings.url!r} cannot be opened: {exc}") from exc
        self._fs: AbstractFileSystem = fs
        self._local = _is_local(fs)
        self._scheme = "file" if self._local else (urlsplit(settings.url).scheme.lower())
        self._root = os.path.realpath(root) if self._local else root.rstrip("/")
        self._roots = [_Location(self._scheme, self._root)] + [_parse(r) for r in settings.allowed_roots]

    @property
    def root_uri(self) -> str:
        """The store root as a URI (``file:///abs/path`` or ``s3://bucket/prefix``)."""
        return self._uri(self._root)

    def uri_for(self, sha256: str) -> str:
        """The source_uri of the document whose bytes hash to ``sha256``.

        Raises:
            InputError: ``invalid_sha256`` when ``sha256`` is not 64 lowercase hex digits.
        """
        return self._uri(self._path_for(sha256))

    def put(self, data: bytes | IO[bytes], sha256: str) -> str:
        """Store document bytes under their hash; return their source_uri.

        Idempotent: when the object exists it is not written again. The bytes are streamed
        in 1 MiB pieces and hashed on the way; a mismatch leaves nothing behind.

        Args:
            data: the bytes, or a binary stream positioned at their start.
            sha256: hex SHA-256 of the bytes (the content address).

        Raises:
            InputError: ``invalid_sha256``; ``sha256_mismatch`` when the bytes hash differently
                (e.g. a file changed while it was being submitted).
            RetryableError: ``object_store_unavailable`` when the write fails.
        """
        path = self._path_for(sha256)
        try:
            if self._fs.exists(path):
                return self._uri(path)
            stream = io.BytesIO(data) if isinstance(data, bytes) else data
            if self._local:
                self._put_local(stream, sha256, path)
            else:
                self._put_remote(stream, sha256, path)
        except OSError as exc:
            raise RetryableError(f"object store write failed: {exc}", code="object_store_unavailable") from exc
        return self._uri(path)

    def exists(self, sha256: str) -> bool:
        """Whether the document with this hash is stored.

        Raises:
            InputError: ``invalid_sha256``.
        """
        return bool(self._fs.exists(self._path_for(sha256)))

    def check_uri(self, source_uri: str) -> str:
        """The confined, normalized location a source_uri may be read from.

        Raises:
            InputError: ``source_not_allowed`` when its scheme is not allowed or its path is not
                under the store root or an allowed root.
        """
        location = _parse(source_uri)
        if location.scheme not in self._settings.allowed_schemes and location.scheme != self._scheme:
            raise _refuse(source_uri, f"scheme {location.scheme!r} not in allowed_schemes")
        if not any(root.contains(location) for root in self._roots):
            raise _refuse(source_uri, "outside the object store and allowed roots")
        return location.path

    def open_bounded(self, source_uri: str, max_bytes: int) -> bytes:
        """Read a document's bytes, at most ``max_bytes`` of them.

        Args:
            source_uri: a DocumentSubmitted's source_uri.
            max_bytes: the largest document accepted.

        Raises:
            InputError: ``source_not_allowed`` (see ``check_uri``).
            DocumentError: ``too_large`` past ``max_bytes``; ``source_not_found``;
                ``source_unreadable`` (a directory, no permission).
            RetryableError: ``object_store_unavailable`` for other I/O failures.
        """
        path = self.check_uri(source_uri)
        scheme = urlsplit(source_uri).scheme.lower() or "file"
        fs = self._fs if scheme == self._scheme else url_to_fs(source_uri)[0]
        try:
            with fs.open(path, "rb") as stream:
                data: bytes = stream.read(max_bytes + 1)
        except FileNotFoundError as exc:
            raise DocumentError(f"document not found at {source_uri}", code="source_not_found") from exc
        except (IsADirectoryError, PermissionError) as exc:
            raise DocumentError(f"document at {source_uri} is unreadable: {exc}", code="source_unreadable") from exc
        except OSError as exc:
            raise RetryableError(f"object store read failed: {exc}", code="object_store_unavailable") from exc
        if len(data) > max_bytes:
            raise DocumentError(f"document is larger than {max_bytes} bytes", code="too_large")
        return data

    def _path_for(self, sha256: str) -> str:
        if not _SHA256.fullmatch(sha256):
            raise InputError("content_sha256 must be 64 lowercase hex digits", code="invalid_sha256")
        return f"{self._root}/{sha256[:2]}/{sha256}"

    def _uri(self, path: str) -> str:
        if self._local:
            return Path(path).as_uri()
        return f"{self._scheme}://{path}"

    def _put_local(self, stream: IO[bytes], sha256: str, path: str) -> None:
        # Write beside the target and rename: readers never see a partial object.
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            with temporary.open("wb") as out:
                digest = _copy_hashing(stream, out)
            if digest != sha256:
                raise _mismatch(sha256, digest)
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)

    def _put_remote(self, stream: IO[bytes], sha256: str, path: str) -> None:
        # An object store upload becomes visible only when the file closes: abort before that.
        out = self._fs.open(path, "wb")
        try:
            digest = _copy_hashing(stream, out)
            if digest != sha256:
                raise _mismatch(sha256, digest)
        except BaseException:
            self._abort(out, path)
            raise
        out.close()

    def _abort(self, out: Any, path: str) -> None:
        discard = getattr(out, "discard", None)
        if discard is None:
            out.close()
            self._fs.rm(path)
            return
        discard()
        out.closed = True  # fsspec would otherwise upload the rest when the file is collected


def _copy_hashing(source: IO[bytes], target: Any) -> str:
    digest = hashlib.sha256()
    while chunk := source.read(_CHUNK):
        digest.update(chunk)
        target.write(chunk)
    return digest.hexdigest()


def _mismatch(expected: str, actual: str) -> InputError:
    return InputError(
        f"bytes hash to {actual[:12]}..., not {expected[:12]}... (changed while submitting?)",
        code="sha256_mismatch",
    )
