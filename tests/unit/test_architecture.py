"""Mechanical checks of the architecture: pure modules stay pure, records match schemas."""

from __future__ import annotations

import ast
import json
from dataclasses import fields
from pathlib import Path

import pytest

from docstream.records import RECORD_TYPES

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "libs" / "common" / "docstream"

PURE_MODULES = [
    "chunking.py",
    "batching.py",
    "aggregation.py",
    "kafka/offsets.py",
    "retry.py",
    "ids.py",
    "records.py",
    "topics.py",
    "errors.py",
    "avro/segments.py",
    "runtime.py",
]
FORBIDDEN = {"confluent_kafka", "cassandra", "torch", "os", "time", "fitz", "pymupdf", "faust", "sqlite3", "socket",
             "subprocess", "requests", "httpx", "fsspec"}


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_module_imports_no_io(module: str) -> None:
    path = LIB / module
    if not path.exists():
        pytest.fail(f"pure module {module} is listed but missing")
    assert _imported_roots(path) & FORBIDDEN == set()


def test_no_utils_or_helpers_modules() -> None:
    names = {p.stem for p in ROOT.glob("libs/**/*.py")} | {p.stem for p in ROOT.glob("services/**/*.py")}
    assert not names & {"utils", "helpers", "misc"}


def test_no_print_in_services_and_libs() -> None:
    offenders = []
    for path in [*LIB.rglob("*.py"), *(ROOT / "services").rglob("*.py")]:
        if path.name == "cli.py" or "commands" in path.stem:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


@pytest.mark.parametrize("name", sorted(RECORD_TYPES))
def test_record_dataclass_matches_schema(name: str) -> None:
    schema = json.loads((ROOT / "schemas" / f"{name}.avsc").read_text())
    assert schema["namespace"] == "io.docstream.v1"
    schema_fields = {f["name"] for f in schema["fields"]}
    assert all(f.get("doc") for f in schema["fields"]), "every field documented"
    assert {f.name for f in fields(RECORD_TYPES[name])} == schema_fields  # type: ignore[arg-type]
