"""Pure modules (offset tracking, retry policy, wire framing, fingerprints, compatibility) import no I/O."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

_PURE = [
    "docstream.kafka.offsets",
    "docstream.kafka.attempts",
    "docstream.kafka.membership",
    "docstream.avro.wire",
    "docstream.avro.fingerprint",
    "docstream.avro.compat",
]
_FORBIDDEN = {"confluent_kafka", "cassandra", "torch", "os", "time", "socket", "subprocess", "httpx"}


@pytest.mark.parametrize("name", _PURE)
def test_pure_module_imports_no_io(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert imported, "parsed the module"
    assert not imported & _FORBIDDEN
