"""Source keys: bounded in UTF-8 bytes and free of control, unassigned and private characters
(``docstream.ids.check_source_key``), so that no store or sink refuses one later; a path's key is its file URI,
whose percent-encoding makes any legal file name a key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from docstream import ids
from docstream.errors import InputError
from docstream.ids import MAX_SOURCE_KEY_BYTES, check_source_key
from docstream_cli.ops.delete import source_key_of


@pytest.mark.parametrize("key", [
    "s3://bucket/report.pdf", "file:///data/a%0Ab.pdf", "https://example.com/q?x=1#p", "crm:contact/42",
    "Zürich 東京 Жизнь/ü.pdf", "emoji-😀",
])
def test_a_key_of_printable_characters_is_kept_as_it_is(key: str) -> None:
    assert check_source_key(key) == key


def test_the_bound_is_in_utf8_bytes_not_characters() -> None:
    assert check_source_key("x" * MAX_SOURCE_KEY_BYTES)
    assert check_source_key("😀" * (MAX_SOURCE_KEY_BYTES // 4))  # 1,024 characters, 4,096 bytes
    for key in ("x" * (MAX_SOURCE_KEY_BYTES + 1), "😀" * (MAX_SOURCE_KEY_BYTES // 4 + 1),
                "😀" * MAX_SOURCE_KEY_BYTES):  # the last: 4,096 characters, 16 KiB
        with pytest.raises(InputError) as refused:
            check_source_key(key)
        assert refused.value.code == "invalid_source_key"
        assert refused.value.message == (f"a source key is at most {MAX_SOURCE_KEY_BYTES} UTF-8 bytes, "
                                         f"got {len(key.encode())}")


@pytest.mark.parametrize(("key", "char"), [
    ("a\x00b", 0x00), ("a\nb", 0x0A), ("a\tb", 0x09), ("a\rb", 0x0D), ("a\x1bb", 0x1B), ("a\x7fb", 0x7F),
    ("a\x85b", 0x85), ("a\u2028b", 0x2028), ("a\u2029b", 0x2029), ("a\ue000b", 0xE000), ("a\U000f0000b", 0xF0000),
    ("a\u0378b", 0x0378),  # unassigned
])
def test_control_separator_private_and_unassigned_characters_are_refused(key: str, char: int) -> None:
    with pytest.raises(InputError) as refused:
        check_source_key(key)
    assert refused.value.code == "invalid_source_key"
    assert f"U+{char:04X} at 1" in refused.value.message
    assert key not in refused.value.message  # the key itself is never echoed


@pytest.mark.parametrize("key", ["", " ", "\t \n"])
def test_a_blank_key_is_refused(key: str) -> None:
    with pytest.raises(InputError, match="must not be blank") as refused:
        check_source_key(key)
    assert refused.value.code == "invalid_source_key"


def test_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(InputError, match="no lone surrogate") as refused:
        check_source_key("a\udcffb")
    assert refused.value.code == "invalid_source_key"


@pytest.mark.parametrize("name", ["new\nline.pdf", "tab\there.pdf", "bell\x07.pdf", "sep\u2028.pdf",
                                  "private\ue000.pdf", "undecodable-\udcff.pdf", "ü 東京.pdf"])
def test_any_legal_file_name_makes_a_key_its_file_uri_percent_encoded(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"%PDF")
    key = source_key_of(str(path))
    assert key == Path(os.path.realpath(path)).as_uri()
    assert key.isascii() and key.isprintable() and " " not in key
    assert check_source_key(key) == key


def test_a_path_whose_file_uri_is_past_the_bound_is_refused(tmp_path: Path) -> None:
    # 1,400 characters of a two-byte letter: 2,800 bytes of path, 8,400 characters of percent-encoded URI
    with pytest.raises(InputError) as refused:
        source_key_of(str(tmp_path / "/".join(["é" * 100] * 14)))
    assert refused.value.code == "invalid_source_key" and "UTF-8 bytes" in refused.value.message


@pytest.mark.parametrize("given", ["s3://b/a\x00.pdf", "s3://b/" + "😀" * 1100, "  "])
def test_a_uri_given_to_delete_is_checked_like_any_key(given: str) -> None:
    with pytest.raises(InputError) as refused:
        source_key_of(given)
    assert refused.value.code == "invalid_source_key"


def test_a_name_someone_else_chose_becomes_a_key_part_with_what_no_key_holds_encoded() -> None:
    part = ids.key_part("a\nb\x00c\u2028d é.pdf")
    assert part == "a%0Ab%00c%E2%80%A8d é.pdf"  # printable characters, spaces and letters kept as they are
    assert ids.check_source_key(f"file:///x.zip!/{part}")
