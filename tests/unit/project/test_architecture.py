"""Mechanical checks of the architecture: the import contracts hold, records match their schemas."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from docstream.records import RECORD_TYPES

ROOT = Path(__file__).resolve().parents[3]
LIB = ROOT / "libs" / "common" / "docstream"

_LINTER = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
_CONTRACTS = {contract["id"]: contract for contract in _LINTER["contracts"]}
_PURE = _CONTRACTS["pure"]["source_modules"]
_SERVICES = ["docstream_ingest", "docstream_chunker", "docstream_inference", "docstream_reducer", "docstream_sink"]


def _module_path(name: str) -> Path:
    package, *rest = name.split(".")
    base = LIB if package == "docstream" else next((ROOT / "services").glob(f"*/{package}"))
    return base.joinpath(*rest).with_suffix(".py")


def test_the_import_contracts_hold() -> None:
    """The layering and the pure modules, as `make lint` checks them (import-linter, pyproject.toml)."""
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in done.stdout


def test_the_layers_contract_puts_the_composition_root_over_every_service_over_the_library() -> None:
    layers = _CONTRACTS["layers"]["layers"]
    assert layers[0] == "docstream_cli" and layers[-1] == "docstream"
    assert sorted(name.strip() for name in layers[1].split("|")) == sorted(_SERVICES), "siblings: independent"


_LOADED_BY_NAME = {"docstream.tasks": {"docstream_inference", "docstream_reducer"}}
"""Library modules that services load by name: tasks (``docstream.tasks.registry``): inference runs them, the
reducer folds their results."""
_LIBRARY_API = {"docstream.client": "the producer for systems outside docstream (docs/intake.md)"}
"""Library modules for users, not for the services."""
def _service_users(graph: object, module: str) -> set[str]:
    """The services that import ``module`` directly or through other library modules; the CLI does not count.

    The CLI imports every service, so a path through it (or through another service) proves nothing about sharing.
    """
    lib_side, frontier = {module}, [module]
    while frontier:
        for importer in graph.find_modules_that_directly_import(frontier.pop()):  # type: ignore[attr-defined]
            if importer.startswith("docstream.") and importer not in lib_side:
                lib_side.add(importer)
                frontier.append(importer)
    users = {
        importer.split(".")[0]
        for imported in lib_side
        for importer in graph.find_modules_that_directly_import(imported)  # type: ignore[attr-defined]
    }
    for prefix, loaders in _LOADED_BY_NAME.items():
        if any(name.startswith(prefix) for name in lib_side):
            users |= loaders
    return users & set(_SERVICES)


def test_the_library_holds_only_what_two_or_more_services_share() -> None:
    """libs/common is what services share: a module that one service uses (the CLI aside) lives in that service."""
    import grimp

    graph = grimp.build_graph("docstream", *_SERVICES, "docstream_cli", cache_dir=None)
    lone = {}
    for module in sorted(m for m in graph.modules if m.startswith("docstream.")):
        if _module_path(module).with_suffix("").joinpath("__init__.py").is_file() or module in _LIBRARY_API:
            continue  # a package's __init__ re-exports its modules, which are checked one by one
        users = _service_users(graph, module)
        if len(users) < 2:
            lone[module] = sorted(users)
    assert lone == {}


def test_the_sharing_check_does_not_count_the_cli() -> None:
    """A library module that the CLI and one service import is lone; one that two services reach through the
    library is shared."""
    import grimp

    graph = grimp.ImportGraph()
    for importer, imported in [
        ("docstream_cli.app", "docstream.lone"),
        ("docstream_cli.app", "docstream_ingest.app"),
        ("docstream_ingest.app", "docstream.lone"),
        ("docstream_ingest.app", "docstream.facade"),
        ("docstream_chunker.app", "docstream.facade"),
        ("docstream.facade", "docstream.inner"),
    ]:
        graph.add_import(importer=importer, imported=imported)
    assert _service_users(graph, "docstream.lone") == {"docstream_ingest"}
    assert _service_users(graph, "docstream.inner") == {"docstream_ingest", "docstream_chunker"}


@pytest.mark.parametrize("module", _PURE)
def test_every_module_of_the_pure_contract_exists(module: str) -> None:
    path = _module_path(module)
    assert path.is_file() or path.with_suffix("").joinpath("__init__.py").is_file(), (
        f"pure module {module} is listed in pyproject.toml but missing")


def test_the_pure_contract_forbids_the_io_libraries() -> None:
    assert {"confluent_kafka", "cassandra", "torch", "os", "time", "fitz", "faust", "sqlite3", "socket",
            "subprocess", "httpx"} <= set(_CONTRACTS["pure"]["forbidden_modules"])


def test_no_utils_or_helpers_modules() -> None:
    names = {p.stem for p in ROOT.glob("libs/**/*.py")} | {p.stem for p in ROOT.glob("services/**/*.py")}
    assert not names & {"utils", "helpers", "misc"}


def test_no_print_in_services_and_libs() -> None:
    offenders = []
    for path in [*LIB.rglob("*.py"), *(ROOT / "services").rglob("*.py")]:
        if path.parent.name == "docstream_cli" or "commands" in path.stem:
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


def test_no_import_cycles() -> None:
    """No module, and no sibling module or subpackage of one package, imports itself back (tools/import_graph.py)."""
    import grimp

    from tools.import_graph import PACKAGES, module_cycles, package_cycles

    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    assert module_cycles(graph) == []
    assert package_cycles(graph) == []


def test_the_library_stays_a_small_core() -> None:
    """At most 22 top-level entries in libs/common/docstream: a module or package more is a reason to look again."""
    from tools.import_graph import top_level_entries

    assert len(top_level_entries()) <= 22, top_level_entries()


_MOVING_TO_CLI: frozenset[str] = frozenset()
"""Modules on their way into docstream_cli that may still take the whole ``Settings`` until they arrive: none."""


def _takes_the_whole_settings(path: Path) -> bool:
    """Whether the module at ``path`` (relative to the repository) may import or annotate ``Settings``: a service's
    ``main.py``, the CLI, the settings module itself, and ``_MOVING_TO_CLI``."""
    return (path.match("services/*/docstream_*/main.py") or path.parts[:3] == ("services", "cli", "docstream_cli")
            or path.as_posix() in {"libs/common/docstream/settings.py", *_MOVING_TO_CLI})


def _names_settings(annotation: ast.expr | None) -> bool:
    """Whether an annotation names ``Settings`` (``Settings``, ``x.Settings``, ``"Settings | None"``,
    ``Callable[[Settings], T]``); ``KafkaSettings`` and the other sections do not."""
    for node in ast.walk(annotation) if annotation is not None else ():
        if (isinstance(node, ast.Name) and node.id == "Settings") or \
                (isinstance(node, ast.Attribute) and node.attr == "Settings"):
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                if _names_settings(ast.parse(node.value, mode="eval").body):
                    return True
            except SyntaxError:
                continue  # a Literal's string, not a forward reference
    return False


def _whole_settings_lines(source: str) -> list[int]:
    """The lines of ``source`` that import ``docstream.settings.Settings`` or name it in an annotation."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "docstream.settings" and \
                any(alias.name == "Settings" for alias in node.names):
            found.add(node.lineno)
        annotation = node.annotation if isinstance(node, ast.arg | ast.AnnAssign) else \
            node.returns if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None
        if annotation is not None and _names_settings(annotation):
            found.add(annotation.lineno)
    return sorted(found)


def test_only_the_mains_and_the_cli_take_the_whole_settings() -> None:
    """``Settings`` appears only in the services' ``main.py`` and the CLI (and in ``_MOVING_TO_CLI``): every other
    module takes the sections it reads (``kafka: KafkaSettings``) or a context of them (``ServiceContext``,
    ``TaskContext``, ``IntakeContext``...)."""
    services = (path for package in ROOT.glob("services/*/docstream_*") for path in package.rglob("*.py"))
    modules = [*LIB.rglob("*.py"), *services]
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted(modules) if not _takes_the_whole_settings(path.relative_to(ROOT))
        for line in _whole_settings_lines(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_the_whole_settings_check_finds_what_it_looks_for() -> None:
    """The check above can fail: an import, a parameter, a return, a field, a string annotation and an attribute
    are found; the sections and a local of that name are not."""
    found = "\n".join([
        "from docstream.settings import KafkaSettings, Settings",  # 1
        "def a(settings: Settings) -> None: ...",  # 2
        "def b(kafka: KafkaSettings) -> 'Settings | None': ...",  # 3
        "class C:",  # 4
        "    settings: Settings",  # 5
        "def d(opener: Callable[['Settings'], int]) -> None: ...",  # 6
        "async def e(*, settings: docstream.settings.Settings) -> None: ...",  # 7
    ])
    assert _whole_settings_lines(found) == [1, 2, 3, 5, 6, 7]
    fine = "\n".join([
        "from docstream.settings import InferenceSettings, KafkaSettings, TasksSettings",
        "def f(kafka: KafkaSettings, inference: InferenceSettings) -> TasksSettings: ...",
        "settings = 'Settings'",
        "def g(label: Literal['not a (type']) -> None: ...",
    ])
    assert _whole_settings_lines(fine) == []
    assert _takes_the_whole_settings(Path("services/chunker/docstream_chunker/main.py"))
    assert _takes_the_whole_settings(Path("services/cli/docstream_cli/ops/submit.py"))
    assert not _takes_the_whole_settings(Path("services/chunker/docstream_chunker/worker.py"))
    assert not _takes_the_whole_settings(Path("services/chunker/docstream_chunker/sub/main.py"))
    assert not _takes_the_whole_settings(Path("libs/common/docstream/service.py"))


_TEST_FOLDERS = {"lib", "chunker", "inference", "reducer", "ingest", "sink", "cli", "project"}
"""tests/unit's folders: ``lib`` for libs/common/docstream (with a folder per subpackage), one per service
(services/<name>), and ``project`` for checks of the repository as a whole."""


def test_the_unit_tests_mirror_the_packages() -> None:
    """tests/unit/<package>/test_<module>[_<aspect>].py: no test at the top, a folder per package under test, a
    library subfolder only for a subpackage that exists, and every folder a package (its own ``__init__.py``)."""
    unit = ROOT / "tests" / "unit"
    assert sorted(p.name for p in unit.glob("test_*.py")) == []
    folders = {p.name for p in unit.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == _TEST_FOLDERS
    for sub in (p for p in (unit / "lib").iterdir() if p.is_dir() and p.name != "__pycache__"):
        assert (LIB / sub.name / "__init__.py").is_file(), f"tests/unit/lib/{sub.name}: no docstream.{sub.name}"
    for folder in (p for p in unit.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        assert (folder / "__init__.py").is_file(), folder
        assert all(f.name.startswith("test_") or f.name == "__init__.py" for f in folder.glob("*.py")), folder
