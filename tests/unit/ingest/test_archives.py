"""Safe archive expansion: every malicious archive is crafted in memory."""

from __future__ import annotations

import io
import random
import stat
import struct
import tarfile
import zipfile

import pytest

from docstream.errors import InputError
from docstream.settings import IngestSettings
from docstream_ingest.archives import (
    ArchiveLimits,
    archive_kind,
    expand_archive,
    safe_member_name,
)

LIMITS = ArchiveLimits(max_members=100, max_expanded_bytes=64 * 1024 * 1024, max_compression_ratio=200.0)


def _zip(entries: dict[str, bytes], *, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _tar(entries: list[tarfile.TarInfo | tuple[str, bytes]], *, gz: bool = False) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if gz else "w") as archive:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                archive.addfile(entry)
            else:
                name, data = entry
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _expand(data: bytes, kind: str, limits: ArchiveLimits = LIMITS) -> dict[str, bytes]:
    return {member.name: member.stream.read() for member in expand_archive(io.BytesIO(data), kind, limits)}  # type: ignore[arg-type]


def _refusal(data: bytes, kind: str, limits: ArchiveLimits = LIMITS) -> str:
    with pytest.raises(InputError) as caught:
        _expand(data, kind, limits)
    return caught.value.code


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("a.zip", "zip"),
        ("A.ZIP", "zip"),
        ("x.tar", "tar"),
        ("x.tar.gz", "tar.gz"),
        ("x.TGZ", "tar.gz"),
        ("x.pdf", None),
        ("zip", None),
        ("x.tar.bz2", None),
    ],
)
def test_archive_kind_follows_the_suffix(name: str, kind: str | None) -> None:
    assert archive_kind(name) == kind


@pytest.mark.parametrize(
    ("raw", "safe"),
    [("a/b.pdf", "a/b.pdf"), ("./a//b.pdf", "a/b.pdf"), ("dir/", "dir"), ("./", ""), ("a\\b.pdf", "a/b.pdf")],
)
def test_safe_member_name_normalizes(raw: str, safe: str) -> None:
    assert safe_member_name(raw) == safe


@pytest.mark.parametrize(
    "raw", ["../../evil", "a/../../evil", "a/../b", "/etc/passwd", "\\evil", "..\\..\\evil", "C:/evil", "a\x00b"]
)
def test_safe_member_name_refuses_escapes(raw: str) -> None:
    with pytest.raises(InputError) as caught:
        safe_member_name(raw)
    assert caught.value.code == "archive_path_traversal"


def test_zip_yields_regular_files_with_their_bytes() -> None:
    data = _zip({"a.txt": b"alpha", "dir/": b"", "dir/b.txt": b"beta", "inner.zip": _zip({"c": b"c"})})
    members = _expand(data, "zip")
    assert members["a.txt"] == b"alpha"
    assert members["dir/b.txt"] == b"beta"
    assert set(members) == {"a.txt", "dir/b.txt", "inner.zip"}  # nested archive left as a member


@pytest.mark.parametrize("gz", [False, True])
def test_tar_yields_regular_files_with_their_bytes(gz: bool) -> None:
    directory = tarfile.TarInfo("dir")
    directory.type = tarfile.DIRTYPE
    data = _tar([directory, ("dir/a.txt", b"alpha"), ("./b.txt", b"beta" * 100_000)], gz=gz)
    assert _expand(data, "tar.gz" if gz else "tar") == {"dir/a.txt": b"alpha", "b.txt": b"beta" * 100_000}


def test_member_stream_reads_in_pieces() -> None:
    payload = random.Random(7).randbytes(3 * 1024 * 1024)
    members = expand_archive(io.BytesIO(_zip({"big.bin": payload})), "zip", LIMITS)
    member = next(members)
    pieces = []
    while piece := member.stream.read(65_536):
        pieces.append(piece)
    assert member.size == len(payload)
    assert b"".join(pieces) == payload
    assert next(members, None) is None


@pytest.mark.parametrize("name", ["../../evil", "/abs/evil", "ok/../../evil"])
def test_zip_slip_is_refused(name: str) -> None:
    assert _refusal(_zip({"fine.txt": b"x", name: b"evil"}), "zip") == "archive_path_traversal"


@pytest.mark.parametrize("name", ["../../evil", "/abs/evil"])
@pytest.mark.parametrize("gz", [False, True])
def test_tar_slip_is_refused(name: str, gz: bool) -> None:
    assert _refusal(_tar([(name, b"evil")], gz=gz), "tar.gz" if gz else "tar") == "archive_path_traversal"


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.FIFOTYPE])
def test_tar_links_and_devices_are_refused(kind: bytes) -> None:
    entry = tarfile.TarInfo("innocent.txt")
    entry.type = kind
    entry.linkname = "/etc/passwd"
    assert _refusal(_tar([("fine.txt", b"x"), entry]), "tar") == "archive_link"


def test_zip_symlink_is_refused() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        link = zipfile.ZipInfo("link")
        link.create_system = 3
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
    assert _refusal(buffer.getvalue(), "zip") == "archive_link"


def test_zip_bomb_is_refused_by_ratio() -> None:
    bomb = _zip({"zeros.bin": b"\0" * (8 * 1024 * 1024)})
    assert len(bomb) < 64 * 1024
    assert _refusal(bomb, "zip") == "archive_bomb"


def test_tar_gz_bomb_is_refused_by_ratio_while_streaming() -> None:
    bomb = _tar([("zeros.bin", b"\0" * (8 * 1024 * 1024))], gz=True)
    assert _refusal(bomb, "tar.gz") == "archive_bomb"


def test_small_highly_compressible_member_is_fine() -> None:
    assert _expand(_zip({"blank.txt": b" " * 100_000}), "zip") == {"blank.txt": b" " * 100_000}


def test_too_many_files_is_refused() -> None:
    limits = ArchiveLimits(max_members=3, max_expanded_bytes=1 << 20, max_compression_ratio=200.0)
    entries = {f"f{i}.txt": b"x" for i in range(4)}
    assert _refusal(_zip(entries), "zip", limits) == "archive_too_many_files"
    assert _refusal(_tar(list(entries.items()), gz=True), "tar.gz", limits) == "archive_too_many_files"


def test_too_many_directories_is_refused() -> None:
    limits = ArchiveLimits(max_members=2, max_expanded_bytes=1 << 20, max_compression_ratio=200.0)
    directories = []
    for i in range(3):
        entry = tarfile.TarInfo(f"d{i}")
        entry.type = tarfile.DIRTYPE
        directories.append(entry)
    assert _refusal(_tar(directories), "tar", limits) == "archive_too_many_files"


def test_too_many_bytes_is_refused() -> None:
    limits = ArchiveLimits(max_members=100, max_expanded_bytes=10_000, max_compression_ratio=200.0)
    entries = {"a.bin": bytes(range(256)) * 30, "b.bin": bytes(range(256)) * 30}
    assert _refusal(_zip(entries), "zip", limits) == "archive_too_large"
    assert _refusal(_tar(list(entries.items())), "tar", limits) == "archive_too_large"


def _patch_sizes(data: bytes, real: int, fake: int) -> bytes:
    # Rewrite the uncompressed size in the local header (offset 22) and central directory (offset 24).
    out = bytearray(data)
    local = out.index(b"PK\x03\x04")
    central = out.index(b"PK\x01\x02")
    assert struct.unpack_from("<I", out, local + 22)[0] == real
    struct.pack_into("<I", out, local + 22, fake)
    struct.pack_into("<I", out, central + 24, fake)
    return bytes(out)


def test_zip_whose_header_lies_about_size_is_corrupt() -> None:
    payload = bytes(range(256)) * 100
    lying = _patch_sizes(_zip({"a.bin": payload}), len(payload), 100)
    assert _refusal(lying, "zip") == "archive_corrupt"


def test_encrypted_zip_is_refused() -> None:
    out = bytearray(_zip({"secret.txt": b"s"}))
    out[out.index(b"PK\x03\x04") + 6] |= 0x1
    out[out.index(b"PK\x01\x02") + 8] |= 0x1
    assert _refusal(bytes(out), "zip") == "archive_encrypted"


@pytest.mark.parametrize("kind", ["zip", "tar", "tar.gz"])
def test_garbage_is_corrupt(kind: str) -> None:
    assert _refusal(b"this is not an archive at all" * 40, kind) == "archive_corrupt"


def test_truncated_tar_gz_is_corrupt() -> None:
    data = _tar([("a.bin", bytes(range(256)) * 4000)], gz=True)
    assert _refusal(data[: len(data) // 2], "tar.gz") == "archive_corrupt"


# Found by the extraction fuzz (docs/chunking.md "Robustness"): both escaped expand_archive untyped.
def test_zip_of_a_version_zipfile_does_not_support_is_corrupt() -> None:
    out = bytearray(_zip({"a.txt": b"a"}))
    struct.pack_into("<H", out, out.index(b"PK\x01\x02") + 6, 84)  # "version needed to extract": 8.4
    assert _refusal(bytes(out), "zip") == "archive_corrupt"  # was NotImplementedError


def test_zip_entry_with_an_empty_name_is_skipped_like_the_root() -> None:
    out = bytearray(_zip({"x": b"a", "b.txt": b"b"}))
    central = out.index(b"PK\x01\x02")
    struct.pack_into("<H", out, central + 28, 0)  # the first entry's name length: 0 ...
    struct.pack_into("<H", out, central + 32, 1)  # ... and its one name byte read as its comment
    assert list(_expand(bytes(out), "zip")) == ["b.txt"]  # was IndexError from ZipInfo.is_dir()


def test_limits_come_from_ingest_settings() -> None:
    ingest = IngestSettings(max_archive_members=7, max_archive_expanded_bytes=99, max_compression_ratio=5.0)  # type: ignore[call-arg]
    assert ArchiveLimits.from_settings(ingest) == ArchiveLimits(7, 99, 5.0)
