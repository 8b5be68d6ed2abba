"""Every schemas/*.avsc reads data written with its previous committed version (docs/messaging.md "Schema evolution").

The previous version of a schema is HEAD's when the working copy differs from HEAD, else the
version just before the latest commit that touched the file. A renamed record (ChunkResult, once
ChunkEmbedded) with no previous version of its own is checked against the newest schemas/history
version of the name its alias gives. A schema with no previous version at all (its first commit)
is checked against itself, and the test says so. Every schema also reads every schemas/history
version of its name and of its aliases.
"""

from __future__ import annotations

import copy
import io
import json
import subprocess
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.read import SchemaResolutionError

from docstream.avro import find_schemas_dir
from docstream.records import DocumentCompleted
from tests.fixtures.avro_compat import check_backward_compatible, sample_records

_SCHEMAS = find_schemas_dir()
_REPO = _SCHEMAS.parent


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)


def _previous_version(path: Path, repo: Path = _REPO) -> tuple[dict[str, Any] | None, str]:
    rel = path.relative_to(repo).as_posix()
    if _git(repo, "rev-parse", "--git-dir").returncode != 0:
        return None, "not a git checkout"
    head = _git(repo, "show", f"HEAD:{rel}")
    if head.returncode != 0:
        return None, "not committed yet"
    if head.stdout != path.read_text(encoding="utf-8"):
        return json.loads(head.stdout), "HEAD"
    commits = _git(repo, "log", "--format=%H", "--", rel).stdout.split()
    if not commits:
        return None, "no commit touches it"
    before = _git(repo, "show", f"{commits[0]}^:{rel}")
    if before.returncode != 0:
        return None, f"first added in {commits[0][:10]}"
    return json.loads(before.stdout), f"{commits[0][:10]}^"


def _write(schema: Any, record: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(copy.deepcopy(schema), named_schemas={}), record)
    return out.getvalue()


def _read(data: bytes, writer: Any, reader: Any) -> Any:
    parse = fastavro.parse_schema
    return fastavro.schemaless_reader(
        io.BytesIO(data), parse(copy.deepcopy(writer), named_schemas={}), parse(copy.deepcopy(reader), named_schemas={})
    )


def _projected(value: Any, like: Any) -> Any:
    """``value`` with only the record fields ``like`` has, at every depth: a field added to a nested record (a
    new field of TaskRequest inside ``tasks``) is left out, so the rest compares as written."""
    if isinstance(value, dict) and isinstance(like, dict):
        return {k: _projected(value[k], like[k]) if k in value else value.get(k) for k in like}
    if isinstance(value, list) and isinstance(like, list) and len(value) == len(like):
        return [_projected(v, w) for v, w in zip(value, like, strict=True)]
    return value


def _assert_old_data_reads_with_new_schema(old: dict[str, Any], new: dict[str, Any]) -> int:
    new_fields = {f["name"]: f for f in new["fields"]}
    samples = sample_records(old)
    for sample in samples:
        data = _write(old, sample)
        as_old = _read(data, old, old)
        as_new = _read(data, old, new)
        assert set(as_new) == set(new_fields)
        for name, value in as_old.items():
            assert _projected(as_new[name], value) == value, f"field {name} changed when read with the new schema"
        for name in new_fields.keys() - as_old.keys():
            assert as_new[name] == new_fields[name]["default"]
    return len(samples)


def _previous_or_renamed(path: Path, new: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """``_previous_version``, else (a record renamed since its last version) the newest history version of the
    name one of its aliases gives."""
    old, origin = _previous_version(path)
    if old is not None:
        return old, origin
    for alias in new.get("aliases", []):
        found = _newest_history(alias.rsplit(".", 1)[-1])
        if found is not None:
            return found
    return None, origin


@pytest.mark.parametrize("path", sorted(_SCHEMAS.glob("*.avsc")), ids=lambda p: p.stem)
def test_schema_is_backward_compatible_with_its_previous_version(path: Path) -> None:
    new = json.loads(path.read_text(encoding="utf-8"))
    old, origin = _previous_or_renamed(path, new)
    if old is None:
        warnings.warn(f"{path.name}: no previous version ({origin}); checked against itself", stacklevel=1)
        old = new
    assert check_backward_compatible(old, new) == [], f"{path.name} vs {origin}"
    assert _assert_old_data_reads_with_new_schema(old, new) >= 2


def _versions_read(path: Path) -> list[Path]:
    """The schemas/history versions ``path``'s schema reads: of its own name and of each of its aliases."""
    new = json.loads(path.read_text(encoding="utf-8"))
    names = [path.stem, *(alias.rsplit(".", 1)[-1] for alias in new.get("aliases", []))]
    return [old for name in names for old in sorted((_SCHEMAS / "history").glob(f"{name}.v*.avsc"))]


@pytest.mark.parametrize(("path", "old_path"),
                         [(p, old) for p in sorted(_SCHEMAS.glob("*.avsc")) for old in _versions_read(p)],
                         ids=lambda p: p.stem)
def test_schema_reads_every_older_version_of_its_name_and_aliases(path: Path, old_path: Path) -> None:
    """What decoding leans on (docstream.avro.SchemaSet resolves a fingerprint in schemas/history): records of any
    kept version, ChunkResult's of every ChunkEmbedded version included, read with today's schema."""
    new = json.loads(path.read_text(encoding="utf-8"))
    old = json.loads(old_path.read_text(encoding="utf-8"))
    assert check_backward_compatible(old, new) == [], f"{path.name} vs {old_path.name}"
    assert _assert_old_data_reads_with_new_schema(old, new) >= 2


def test_chunk_result_reads_the_last_chunk_embedded_through_its_alias_only() -> None:
    """The rename: ChunkResult has the fields of the last ChunkEmbedded and reads it because its alias names it;
    without the alias the same schema is a rename, and fastavro refuses the records."""
    new = json.loads((_SCHEMAS / "ChunkResult.avsc").read_text(encoding="utf-8"))
    old = json.loads((_SCHEMAS / "history" / "ChunkEmbedded.v5.avsc").read_text(encoding="utf-8"))
    assert new["aliases"] == ["io.docstream.v1.ChunkEmbedded"]
    assert [(f["name"], f["type"]) for f in new["fields"]] == [(f["name"], f["type"]) for f in old["fields"]]
    assert check_backward_compatible(old, new) == []
    unaliased = {k: v for k, v in new.items() if k != "aliases"}
    assert check_backward_compatible(old, unaliased) == [
        "ChunkEmbedded: record renamed from io.docstream.v1.ChunkEmbedded to io.docstream.v1.ChunkResult without an "
        "alias naming the old name"]
    data = _write(old, sample_records(old)[0])
    with pytest.raises(SchemaResolutionError):
        _read(data, old, unaliased)


def test_a_consumer_holding_the_last_chunk_embedded_needs_the_new_name_to_read_chunk_results() -> None:
    """Aliases work for readers only: a consumer of its own that reads chunks.results with the ChunkEmbedded schema
    as its reader schema gets a resolution error until it takes ChunkResult's schema (or adds the new name as an
    alias of its own), as docs/messaging.md "Renamed: ChunkEmbedded → ChunkResult" says."""
    new = json.loads((_SCHEMAS / "ChunkResult.avsc").read_text(encoding="utf-8"))
    old = json.loads((_SCHEMAS / "history" / "ChunkEmbedded.v5.avsc").read_text(encoding="utf-8"))
    sample = sample_records(new)[0]
    with pytest.raises(SchemaResolutionError):
        _read(_write(new, sample), new, old)
    assert _read(_write(new, sample), new, {**old, "aliases": ["io.docstream.v1.ChunkResult"]}) == _read(
        _write(new, sample), new, new)


_BASE: dict[str, Any] = {
    "type": "record",
    "name": "Thing",
    "namespace": "io.docstream.test",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "count", "type": "int"},
        {"name": "status", "type": {"type": "enum", "name": "State", "symbols": ["a", "b"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def _changed(change: Any) -> dict[str, Any]:
    schema = copy.deepcopy(_BASE)
    change(schema)
    return schema


def test_checker_catches_a_new_field_without_default_and_so_does_fastavro() -> None:
    new = _changed(lambda s: s["fields"].append({"name": "extra", "type": "int"}))
    assert check_backward_compatible(_BASE, new) == ["Thing.extra: new field has no default"]
    data = _write(_BASE, sample_records(_BASE)[0])
    with pytest.raises(SchemaResolutionError):
        _read(data, _BASE, new)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda s: s["fields"].pop(1), "Thing.count: field removed or renamed"),
        (lambda s: s["fields"][1].update(name="total"), "Thing.total: new field has no default"),
        (lambda s: s["fields"][0].update(type="int"), "Thing.id: type changed from string to int (not a promotion)"),
        (lambda s: s["fields"][2]["type"].update(symbols=["a"]), "Thing.status: enum symbols removed: ['b']"),
        (
            lambda s: s["fields"][3].update(type="string", default="x"),
            "Thing.note<branch 0>: type changed from null to string",
        ),
        (lambda s: s["fields"][4]["type"].update(logicalType="timestamp-micros"), "Thing.at: logical type changed"),
        (lambda s: s.update(name="Other"), "Thing: record renamed from io.docstream.test.Thing"),
        (lambda s: s.update(name="Other", aliases=["io.other.Thing"]), "Thing: record renamed from io.docstream"),
        (lambda s: s.update(name="Other", aliases=["Thin"]), "Thing: record renamed from io.docstream.test.Thing"),
        (lambda s: s["fields"][2]["type"].update(name="Phase"), "Thing.status: enum renamed from io.docstream"),
        (
            lambda s: s["fields"].append({"name": "n", "type": "int", "default": "x"}),
            "new schema is invalid: Default value <x>",
        ),
    ],
)
def test_checker_catches_incompatible_changes(change: Any, problem: str) -> None:
    problems = check_backward_compatible(_BASE, _changed(change))
    assert any(p.startswith(problem) for p in problems), problems


def test_compatible_evolution_passes_and_reads_old_data() -> None:
    def evolve(s: dict[str, Any]) -> None:
        s["fields"][1]["type"] = "long"  # int → long promotion
        s["fields"][2]["type"]["symbols"] = ["a", "b", "c"]
        s["fields"][3]["type"] = ["null", "string", "int"]
        s["fields"].append({"name": "extra", "type": ["null", "string"], "default": None})
        s["fields"].append({"name": "tags", "type": {"type": "array", "items": "string"}, "default": []})

    new = _changed(evolve)
    assert check_backward_compatible(_BASE, new) == []
    assert _assert_old_data_reads_with_new_schema(_BASE, new) >= 2


@pytest.mark.parametrize("aliases", [["io.docstream.test.Thing"], ["Thing"], ["io.other.Old", "Thing"]])
def test_a_rename_whose_alias_names_the_old_name_passes_and_reads_old_data(aliases: list[str]) -> None:
    """Avro's alias rule: a full alias, or one without a dot read in the new name's namespace."""
    new = _changed(lambda s: s.update(name="Renamed", aliases=aliases))
    assert check_backward_compatible(_BASE, new) == []
    assert _assert_old_data_reads_with_new_schema(_BASE, new) >= 2


def test_sample_records_cover_every_field_branch_and_symbol() -> None:
    samples = sample_records(_BASE)
    assert {s["status"] for s in samples} == {"a", "b"}
    assert {s["note"] is None for s in samples} == {True, False}
    assert all(set(s) == {f["name"] for f in _BASE["fields"]} for s in samples)


def test_previous_version_comes_from_git_history(tmp_path: Path) -> None:
    def commit(message: str) -> None:
        _git(tmp_path, "add", "-A")
        result = _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", message)
        assert result.returncode == 0, result.stderr

    assert _git(tmp_path, "init", "-q").returncode == 0
    schema = tmp_path / "schemas" / "Thing.avsc"
    schema.parent.mkdir()
    (tmp_path / "other.txt").write_text("x")
    commit("unrelated first commit")
    v1 = _BASE
    v2 = _changed(lambda s: s["fields"].append({"name": "extra", "type": ["null", "string"], "default": None}))
    schema.write_text(json.dumps(v1))
    commit("v1")
    assert _previous_version(schema, tmp_path)[0] is None  # first version: nothing before it
    schema.write_text(json.dumps(v2))
    assert _previous_version(schema, tmp_path) == (v1, "HEAD")  # working copy differs from HEAD
    commit("v2")
    (tmp_path / "other.txt").write_text("y")
    commit("unrelated later commit")
    previous, origin = _previous_version(schema, tmp_path)
    assert previous == v1 and origin.endswith("^")  # before the latest commit that touched the schema


def _newest_history(name: str) -> tuple[dict[str, Any], str] | None:
    versions = sorted((_SCHEMAS / "history").glob(f"{name}.v*.avsc"), key=lambda p: int(p.stem.rsplit(".v", 1)[1]))
    if not versions:
        return None
    return json.loads(versions[-1].read_text(encoding="utf-8")), versions[-1].name


@pytest.mark.parametrize("path", sorted(p for p in _SCHEMAS.glob("*.avsc") if _newest_history(p.stem)),
                         ids=lambda p: p.stem)
def test_a_consumer_holding_the_previous_schema_decodes_new_records(path: Path) -> None:
    """Forward compatibility: records written with today's schema read with the newest schemas/history version
    (a downstream consumer not upgraded yet) give that version's fields, with the values written (schemas with an
    older version only)."""
    new = json.loads(path.read_text(encoding="utf-8"))
    found = _newest_history(path.stem)
    assert found is not None
    old, origin = found
    old_fields = {f["name"] for f in old["fields"]}
    for sample in sample_records(new):
        as_old = _read(_write(new, sample), new, old)
        assert set(as_old) == old_fields, origin
        written = _read(_write(new, sample), new, new)
        for name in old_fields:
            assert as_old[name] == _projected(written[name], as_old[name]), f"{origin}: field {name}"


def test_a_plain_fastavro_reader_with_the_previous_document_completed_decodes_a_record_with_entities() -> None:
    """DocumentCompleted v6 (tasks: mentions, entities, label scores) in an Avro container file, read by plain
    fastavro with v5 as its reader schema: the v5 fields come back, the new ones are left out."""
    new = json.loads((_SCHEMAS / "DocumentCompleted.avsc").read_text(encoding="utf-8"))
    old = json.loads((_SCHEMAS / "history" / "DocumentCompleted.v5.avsc").read_text(encoding="utf-8"))
    record = DocumentCompleted(
        job_id="j", doc_id="d", status="completed", completed_at=datetime(2026, 12, 1, tzinfo=UTC), model_id="ner/1",
        chunk_count=2, token_count=40, task="entities", tasks=["embed", "entities"],
        mentions=[{"text": "Ada Lovelace", "label": "PERSON", "start": 3, "end": 15, "page": 1, "score": 1.0}],
        entities=[{"label": "PERSON", "text": "ada lovelace", "count": 1, "pages": [1]}],
        pages_by_verdict={"ok": 1},
    ).to_record()
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(copy.deepcopy(new), named_schemas={}), [record])
    out.seek(0)
    (decoded,) = list(fastavro.reader(out, reader_schema=fastavro.parse_schema(copy.deepcopy(old), named_schemas={})))
    assert set(decoded) == {f["name"] for f in old["fields"]}
    assert (decoded["doc_id"], decoded["model_id"], decoded["chunk_count"], decoded["pages_by_verdict"]) == (
        "d", "ner/1", 2, {"ok": 1})
    assert "mentions" not in decoded and "task" not in decoded
