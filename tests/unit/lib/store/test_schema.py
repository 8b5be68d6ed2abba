"""Migration files: parsing, ordering, templating."""

from __future__ import annotations

import pytest

from docstream.store.schema import (
    Migration,
    bootstrap_table_id,
    load_migrations,
    schema_not_visible,
    split_statements,
)


def test_split_statements_drops_comments_and_blank_statements() -> None:
    text = "-- header; with a semicolon\nCREATE TABLE a (x int);\n\n  -- note\nCREATE INDEX b ON a (x);\n;\n"
    assert split_statements(text) == ["CREATE TABLE a (x int)", "CREATE INDEX b ON a (x)"]


def test_sql_migrations_in_version_order() -> None:
    migrations = load_migrations("sql")
    assert [m.version for m in migrations] == sorted(m.version for m in migrations)
    assert migrations[0].version == "001_init"
    assert not any(m.per_dimension for m in migrations)
    created = " ".join(migrations[0].statements)
    for table in ("jobs", "job_documents", "documents", "document_results", "chunks"):
        assert f"CREATE TABLE IF NOT EXISTS {table} " in created


def test_cql_migrations_use_if_not_exists_only() -> None:
    migrations = load_migrations("cql")
    assert [m.version for m in migrations][:2] == ["001_init", "002_chunk_vectors"]
    for migration in migrations:
        for statement in migration.statements:
            assert "IF NOT EXISTS" in statement, statement
            assert "counter" not in statement.lower()


def test_per_dimension_migration_renders_dimension_and_keyspace() -> None:
    vectors = next(m for m in load_migrations("cql") if m.per_dimension)
    rendered = vectors.render(keyspace="ks1", dimension=768)
    assert "CREATE TABLE IF NOT EXISTS ks1.chunk_vectors_d768" in rendered[0]
    assert "vector<float, 768>" in rendered[0]
    assert any("'similarity_function': 'COSINE'" in s for s in rendered)
    assert not any("{dimension}" in s or "{keyspace}" in s for s in rendered)
    assert vectors.applied_version(768) == "002_chunk_vectors@768"


def test_dimension_required_exactly_where_templated() -> None:
    plain = Migration(version="001_x", statements=("CREATE TABLE t (a int)",), per_dimension=False)
    templated = Migration(version="002_y", statements=("CREATE TABLE t{dimension} (a int)",), per_dimension=True)
    assert plain.applied_version() == "001_x"
    with pytest.raises(ValueError, match="unused"):
        plain.render(dimension=3)
    with pytest.raises(ValueError, match="required"):
        templated.render()
    with pytest.raises(ValueError, match="positive"):
        templated.render(dimension=0)
    assert templated.render(dimension=3) == ["CREATE TABLE t3 (a int)"]


def test_bootstrap_table_ids_are_fixed_per_keyspace_and_table() -> None:
    # two processes creating schema_lock at once must write the same schema (docs/storage.md "Migrations")
    first = bootstrap_table_id("ks1", "schema_lock")
    assert first == bootstrap_table_id("ks1", "schema_lock")
    others = {bootstrap_table_id("ks2", "schema_lock"), bootstrap_table_id("ks1", "schema_migrations"), first}
    assert len(others) == 3
    assert first.version == 5


@pytest.mark.parametrize(("message", "not_visible"), [
    ("Error from server: code=2200 [Invalid query] message=\"table schema_migrations does not exist\"", True),
    ("Error from server: code=2200 [Invalid query] message=\"Keyspace 'race_1' doesn't exist\"", True),
    ("unconfigured table schema_lock", True),
    ("Error from server: code=2200 [Invalid query] message=\"Undefined column name owner\"", False),
    ("line 1:7 no viable alternative at input 'SELEC'", False),
])
def test_schema_not_visible_tells_a_lagging_coordinator_from_a_bad_statement(message: str, not_visible: bool) -> None:
    assert schema_not_visible(message) is not_visible
