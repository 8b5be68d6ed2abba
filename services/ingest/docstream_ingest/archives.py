"""Safe expansion of .zip, .tar and .tar.gz/.tgz archives: streamed, never extracted to disk.

Every archive is checked against the rules of docs/intake.md ("Archives"):

* names: no absolute paths, no ``..`` component, no NUL; backslashes count as separators;
* member types: regular files and directories only (symlinks, hard links, devices and
  FIFOs are refused: ``archive_link``);
* bounds: at most ``max_members`` files (and as many directories), at most
  ``max_expanded_bytes`` of member data counted while streaming, and a compression ratio
  per zip member (and over a whole .tar.gz stream) of at most ``max_compression_ratio``
  once more than 1 MiB came out of it (``archive_bomb``);
* nested archives are not expanded here: they come out as ordinary members and the
  caller decides (intake refuses them, code ``archive_nested``).

A refusal raises ``InputError`` with one of the codes in ``ARCHIVE_ERROR_CODES``. A zip's
central directory is checked whole before the first member is yielded; a tar stream is
checked member by member as it is read, so a caller that wants all-or-nothing keeps what
it received until the iterator is exhausted.
"""

from __future__ import annotations

import gzip
import io
import re
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, BinaryIO, Literal

from docstream.errors import InputError
from docstream.settings import IngestSettings

__all__ = [
    "ARCHIVE_ERROR_CODES",
    "ArchiveKind",
    "ArchiveLimits",
    "ArchiveMember",
    "archive_kind",
    "expand_archive",
    "safe_member_name",
]

ArchiveKind = Literal["zip", "tar", "tar.gz"]

ARCHIVE_ERROR_CODES = (
    "archive_path_traversal",
    "archive_too_large",
    "archive_too_many_files",
    "archive_bomb",
    "archive_corrupt",
    "archive_link",
    "archive_encrypted",
)

_SUFFIXES: tuple[tuple[str, ArchiveKind], ...] = (
    (".tar.gz", "tar.gz"),
    (".tgz", "tar.gz"),
    (".tar", "tar"),
    (".zip", "zip"),
)
_DRIVE = re.compile(r"^[A-Za-z]:")
# Below this many expanded bytes a high ratio is harmless (a small file of blanks).
_RATIO_FLOOR = 1024 * 1024
# Tar headers and block padding: room above the data budget for the raw tar stream.
_TAR_BYTES_PER_ENTRY = 2048
_TAR_SLACK = 1024 * 1024
_CHUNK = 1024 * 1024
# NotImplementedError: zipfile refuses a version or compression it does not know (found by the extraction fuzz).
_CORRUPT_ERRORS = (
    zipfile.BadZipFile, tarfile.TarError, zlib.error, EOFError, OSError, ValueError, NotImplementedError,
)


@dataclass(frozen=True, slots=True)
class ArchiveLimits:
    """Bounds on one archive."""

    max_members: int
    max_expanded_bytes: int
    max_compression_ratio: float

    @classmethod
    def from_settings(cls, ingest: IngestSettings) -> ArchiveLimits:
        """The limits of ``settings.ingest``."""
        return cls(
            max_members=ingest.max_archive_members,
            max_expanded_bytes=ingest.max_archive_expanded_bytes,
            max_compression_ratio=ingest.max_compression_ratio,
        )


@dataclass(frozen=True, slots=True)
class ArchiveMember:
    """One regular file of an archive.

    Attributes:
        name: its safe relative POSIX path inside the archive.
        size: its declared size (exact for tar; an upper bound for zip, whose reader stops there).
        stream: its bytes; valid only until the iterator advances. Reading it may raise
            ``InputError`` (``archive_too_large``, ``archive_bomb``, ``archive_corrupt``).
    """

    name: str
    size: int
    stream: BinaryIO


def archive_kind(name: str) -> ArchiveKind | None:
    """The archive kind a file name announces (case-insensitive), or None for any other file."""
    lowered = name.lower()
    for suffix, kind in _SUFFIXES:
        if lowered.endswith(suffix):
            return kind
    return None


def safe_member_name(raw: str) -> str:
    """The normalized relative path of an archive entry ("" for the archive root itself).

    Raises:
        InputError: ``archive_path_traversal`` for an absolute path, a drive letter, a ``..``
            component or a NUL byte.
    """
    if "\x00" in raw:
        raise InputError(f"archive member {raw!r} has a NUL byte in its name", code="archive_path_traversal")
    name = raw.replace("\\", "/")
    if name.startswith("/") or _DRIVE.match(name):
        raise InputError(f"archive member {raw!r} has an absolute path", code="archive_path_traversal")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise InputError(f"archive member {raw!r} leaves the archive root", code="archive_path_traversal")
    return "/".join(parts)


def expand_archive(fileobj: IO[bytes], kind: ArchiveKind, limits: ArchiveLimits) -> Iterator[ArchiveMember]:
    """Yield the regular files of an archive, safely.

    Args:
        fileobj: the archive's bytes (seekable for zip; tar is read as a stream).
        kind: what ``archive_kind`` said.
        limits: the bounds to enforce.

    Raises:
        InputError: the archive is refused; ``code`` is one of ``ARCHIVE_ERROR_CODES``.
    """
    if kind == "zip":
        return _expand_zip(fileobj, limits)
    return _expand_tar(fileobj, kind, limits)


class _Budget:
    """Expanded bytes of one archive, counted as they are read."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def spend(self, amount: int) -> None:
        self.used += amount
        if self.used > self.limit:
            raise InputError(f"archive expands to more than {self.limit} bytes", code="archive_too_large")


class _MemberRaw(io.RawIOBase):
    """A member's bytes: counted against the budget, reader errors turned into archive_corrupt."""

    def __init__(self, inner: IO[bytes] | io.BufferedIOBase, budget: _Budget, name: str) -> None:
        super().__init__()
        self._inner = inner
        self._budget = budget
        self._name = name

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        try:
            data = self._inner.read(len(buffer))
        except _CORRUPT_ERRORS as exc:
            raise InputError(f"archive member {self._name!r} is corrupt: {exc}", code="archive_corrupt") from exc
        size = len(data)
        self._budget.spend(size)
        buffer[:size] = data
        return size


def _member_stream(inner: IO[bytes] | io.BufferedIOBase, budget: _Budget, name: str) -> BinaryIO:
    return io.BufferedReader(_MemberRaw(inner, budget, name), buffer_size=_CHUNK)


def _too_many(limits: ArchiveLimits, what: str) -> InputError:
    return InputError(f"archive holds more than {limits.max_members} {what}", code="archive_too_many_files")


def _check_zip_entry(info: zipfile.ZipInfo, limits: ArchiveLimits) -> str:
    name = safe_member_name(info.filename)
    file_type = stat.S_IFMT(info.external_attr >> 16)
    if stat.S_ISLNK(file_type):
        raise InputError(f"archive member {name!r} is a symbolic link", code="archive_link")
    if file_type not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise InputError(f"archive member {name!r} is a special file", code="archive_link")
    if info.flag_bits & 0x1:
        raise InputError(f"archive member {name!r} is encrypted", code="archive_encrypted")
    ratio = info.file_size / max(info.compress_size, 1)
    if info.file_size > _RATIO_FLOOR and ratio > limits.max_compression_ratio:
        raise InputError(
            f"archive member {name!r} is compressed {ratio:.0f}:1 (limit {limits.max_compression_ratio:.0f}:1)",
            code="archive_bomb",
        )
    return name


def _expand_zip(fileobj: IO[bytes], limits: ArchiveLimits) -> Iterator[ArchiveMember]:
    try:
        archive = zipfile.ZipFile(fileobj)
    except _CORRUPT_ERRORS as exc:
        raise InputError(f"not a readable zip archive: {exc}", code="archive_corrupt") from exc
    with archive:
        files: list[tuple[str, zipfile.ZipInfo]] = []
        directories = declared = 0
        for info in archive.infolist():
            name = _check_zip_entry(info, limits)
            if not name or info.is_dir():  # is_dir() of an empty name raises IndexError
                directories += 1
                if directories > limits.max_members:
                    raise _too_many(limits, "directories")
                continue
            files.append((name, info))
            if len(files) > limits.max_members:
                raise _too_many(limits, "files")
            declared += info.file_size
            if declared > limits.max_expanded_bytes:
                raise InputError(
                    f"archive declares more than {limits.max_expanded_bytes} bytes", code="archive_too_large"
                )
        budget = _Budget(limits.max_expanded_bytes)
        for name, info in files:
            try:
                inner = archive.open(info)
            except _CORRUPT_ERRORS as exc:
                raise InputError(f"archive member {name!r} cannot be read: {exc}", code="archive_corrupt") from exc
            with inner:
                yield ArchiveMember(name=name, size=info.file_size, stream=_member_stream(inner, budget, name))


class _CountingReader(io.RawIOBase):
    """Counts the bytes read through it; past ``limit`` raises, past the ratio to ``source`` raises."""

    def __init__(
        self,
        inner: IO[bytes] | io.BufferedIOBase,
        *,
        limit: int | None = None,
        source: _CountingReader | None = None,
        max_ratio: float = 0.0,
        owns_inner: bool = False,
    ) -> None:
        super().__init__()
        self._inner = inner
        self._limit = limit
        self._source = source
        self._max_ratio = max_ratio
        self._owns_inner = owns_inner
        self.count = 0

    def close(self) -> None:
        if self._owns_inner and not self.closed:
            self._inner.close()
        super().close()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._inner.read(len(buffer))
        size = len(data)
        self.count += size
        if self._limit is not None and self.count > self._limit:
            raise InputError(f"archive stream exceeds {self._limit} bytes", code="archive_too_large")
        if self._source is not None and self.count > _RATIO_FLOOR:
            ratio = self.count / max(self._source.count, 1)
            if ratio > self._max_ratio:
                raise InputError(
                    f"archive is compressed {ratio:.0f}:1 (limit {self._max_ratio:.0f}:1)", code="archive_bomb"
                )
        buffer[:size] = data
        return size


def _tar_stream(fileobj: IO[bytes], kind: ArchiveKind, limits: ArchiveLimits) -> BinaryIO:
    cap = limits.max_expanded_bytes + _TAR_BYTES_PER_ENTRY * 2 * (limits.max_members + 1) + _TAR_SLACK
    if kind == "tar":
        return io.BufferedReader(_CountingReader(fileobj, limit=cap), buffer_size=_CHUNK)
    compressed = _CountingReader(fileobj)
    inflated = gzip.GzipFile(fileobj=io.BufferedReader(compressed, buffer_size=_CHUNK), mode="rb")
    counted = _CountingReader(
        inflated, limit=cap, source=compressed, max_ratio=limits.max_compression_ratio, owns_inner=True
    )
    return io.BufferedReader(counted, buffer_size=_CHUNK)


def _check_tar_entry(info: tarfile.TarInfo) -> str:
    name = safe_member_name(info.name)
    if info.issym() or info.islnk():
        raise InputError(f"archive member {name!r} is a link", code="archive_link")
    if info.isdev():
        raise InputError(f"archive member {name!r} is a special file", code="archive_link")
    if info.issparse():
        raise InputError(f"archive member {name!r} is a sparse file (unsupported)", code="archive_corrupt")
    if not (info.isreg() or info.isdir()):
        raise InputError(f"archive member {name!r} has an unsupported type", code="archive_corrupt")
    return name


def _next_tar_entry(archive: tarfile.TarFile) -> tarfile.TarInfo | None:
    try:
        return archive.next()
    except _CORRUPT_ERRORS as exc:
        raise InputError(f"not a readable tar archive: {exc}", code="archive_corrupt") from exc


def _expand_tar(fileobj: IO[bytes], kind: ArchiveKind, limits: ArchiveLimits) -> Iterator[ArchiveMember]:
    stream = _tar_stream(fileobj, kind, limits)
    try:
        archive = tarfile.open(fileobj=stream, mode="r|")
    except _CORRUPT_ERRORS as exc:
        stream.close()
        raise InputError(f"not a readable tar archive: {exc}", code="archive_corrupt") from exc
    budget = _Budget(limits.max_expanded_bytes)
    files = directories = declared = 0
    with stream, archive:
        while (info := _next_tar_entry(archive)) is not None:
            name = _check_tar_entry(info)
            if info.isdir() or not name:
                directories += 1
                if directories > limits.max_members:
                    raise _too_many(limits, "directories")
                continue
            files += 1
            if files > limits.max_members:
                raise _too_many(limits, "files")
            declared += info.size
            if declared > limits.max_expanded_bytes:
                raise InputError(
                    f"archive declares more than {limits.max_expanded_bytes} bytes", code="archive_too_large"
                )
            inner = archive.extractfile(info)
            if inner is None:  # not a regular file after all
                raise InputError(f"archive member {name!r} has no data", code="archive_corrupt")
            with inner:
                yield ArchiveMember(name=name, size=info.size, stream=_member_stream(inner, budget, name))
