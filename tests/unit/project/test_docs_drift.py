"""Names the reference docs share with the code: consumer groups, modules, paths, and no work-log references.

The reference pages are docs/*.md and README.md; docs/log/ is the dated log and keeps its history. Each test
reads the names out of the Markdown and compares them with what the code defines, so a module moved or a group
renamed without its page fails here instead of misleading a reader.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from pydantic import BaseModel

import docstream.settings
from docstream.topics import Topics, dlq_topic

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
LIB = ROOT / "libs" / "common" / "docstream"
SERVICES = ROOT / "services"

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_WILD = "*"


def _reference_pages() -> list[Path]:
    """Return docs/*.md and README.md: the pages that describe what the system is now."""
    return [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]


def _prose(page: Path) -> str:
    """Return ``page`` without its fenced code blocks (commands and logs, not names the page claims)."""
    return _FENCE.sub("", page.read_text(encoding="utf-8"))


def _code_spans(text: str) -> Iterator[str]:
    """Yield the inline code spans of ``text``."""
    for match in _CODE_SPAN.finditer(text):
        yield match.group(1)


# ---------------------------------------------------------------- (a) consumer groups


def _module_string_constants(trees: list[ast.Module]) -> dict[str, set[str]]:
    """Return every module-level ``NAME = "text"`` of ``trees``, by name (a name may have several values)."""
    constants: dict[str, set[str]] = {}
    for tree in trees:
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        constants.setdefault(target.id, set()).add(node.value.value)
    return constants


def _templates(node: ast.expr, constants: dict[str, set[str]]) -> set[str]:
    """Return the strings ``node`` can be, with ``*`` for each part only known at run time."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.JoinedStr):
        return {"".join(str(part.value) if isinstance(part, ast.Constant) else _WILD for part in node.values)}
    if isinstance(node, ast.IfExp):
        return _templates(node.body, constants) | _templates(node.orelse, constants)
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return set(constants.get(name, ())) if name and name.isupper() else set()


@cache
def _code_groups() -> tuple[re.Pattern[str], ...]:
    """Return a pattern for each consumer group the code can join, under the default topic prefix.

    The groups are ``Topics.group(service)`` for every service name passed to it (found in the source, so a
    service that names its group differently is seen), and the settings' ``group_id`` and ``app_id`` defaults.
    """
    sources = [*LIB.rglob("*.py"), *SERVICES.glob("*/docstream_*/**/*.py")]
    trees = [ast.parse(path.read_text(encoding="utf-8")) for path in sources]
    constants = _module_string_constants(trees)
    services: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "group"
                    and len(node.args) == 1 and not node.keywords):
                services |= _templates(node.args[0], constants)
    groups = {Topics().group(service) for service in services}
    for _, model in inspect.getmembers(docstream.settings, inspect.isclass):
        if issubclass(model, BaseModel) and model.__module__ == docstream.settings.__name__:
            for name, field in model.model_fields.items():
                if name in {"group_id", "app_id"} and isinstance(field.default, str):
                    groups.add(field.default)
    assert len(groups) >= 4, groups
    return tuple(re.compile(".+".join(map(re.escape, group.split(_WILD)))) for group in sorted(groups))


_PLACEHOLDER = re.compile(r"<[a-z_]+>|\bNAME\b")
_GROUP_SHAPE = re.compile(r"(?:<topic_prefix>|<prefix>|docstream)[-.][A-Za-z0-9<>_.-]+")
_AFTER_GROUP = re.compile(r"\bconsumer group \(?`([^`\n]+)`")
_PARAGRAPH = re.compile(r"\n\s*\n")


def _table_group_cells(text: str) -> Iterator[str]:
    """Yield the code spans of every table column whose header names a group."""
    columns: list[int] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            columns = []
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not columns and not set(line) <= set("|-: "):
            columns = [i for i, cell in enumerate(cells) if "group" in cell.lower()] or [-1]
            continue
        for i in columns:
            if 0 <= i < len(cells):
                yield from _code_spans(cells[i])


def _doc_groups(page: Path) -> set[str]:
    """Return the consumer group ids ``page`` names, the prefix placeholders read as the default prefix.

    A group id is a code span in a table column headed "group" or "consumer group", a span right after the
    words "consumer group", or a span that starts with ``<prefix>-`` or ``<topic_prefix>-`` in a paragraph
    about groups. The bare rule ``<prefix>-<service>`` is a pattern, not a group, and is left out.
    """
    text = _prose(page)
    spans = [*_table_group_cells(text), *_AFTER_GROUP.findall(text)]
    for paragraph in _PARAGRAPH.split(text):
        if "group" in paragraph:
            spans += [span for span in _code_spans(paragraph) if re.match(r"<(?:topic_)?prefix>-", span)]
    prefix = Topics().prefix
    found = set()
    for span in spans:
        if _GROUP_SHAPE.fullmatch(span) and not re.fullmatch(r"<(?:topic_)?prefix>-<\w+>", span):
            name = span.replace("<topic_prefix>", prefix).replace("<prefix>", prefix)
            found.add(_PLACEHOLDER.sub("x", name))
    return found


def test_operations_names_consumer_groups() -> None:
    """The process table of docs/operations.md names a group for each long-running service."""
    groups = _doc_groups(DOCS / "operations.md")
    assert {"docstream-chunker", "docstream-inference"} <= groups, groups


def test_every_consumer_group_a_page_names_is_one_the_code_joins() -> None:
    """A group named on a page is a group the code forms (a renamed group leaves operators watching nothing)."""
    wrong = {
        f"{page.relative_to(ROOT)}: {group}"
        for page in _reference_pages() for group in _doc_groups(page)
        if not any(pattern.fullmatch(group) for pattern in _code_groups())
    }
    assert not wrong, sorted(wrong)


# ---------------------------------------------------------------- (b) module names

_MODULE_NAME = re.compile(r"(?<![\w./-])(docstream(?:_[a-z]+)?(?:\.[A-Za-z_]\w*)+)(?![\w./-])")
_FILE_SUFFIXES = {"db", "json", "jsonl", "toml", "log", "parquet", "yaml", "yml", "avsc", "md", "py", "jsa"}
_NOT_MODULES = {
    "docstream.librdkafka": "the stdlib logger that librdkafka's own log lines go to",
}


@cache
def _topic_names() -> frozenset[str]:
    """Return every topic name under the default prefix, dead-letter twins included."""
    topics = Topics().all()
    return frozenset({*topics, *(dlq_topic(topic) for topic in topics)})


def _package_root(package: str) -> Path | None:
    """Return the folder of ``package``: libs/common/docstream or services/<name>/docstream_<name>."""
    if package == "docstream":
        return LIB
    folder = SERVICES / package.removeprefix("docstream_") / package
    return folder if folder.is_dir() else None


def _module_file(root: Path, parts: list[str]) -> Path | None:
    """Return the source file of the module ``parts`` under ``root`` (a package's ``__init__.py``), if any."""
    path = root.joinpath(*parts)
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


@cache
def _names_defined(source: Path) -> dict[str, set[str]]:
    """Return the top-level names ``source`` defines or imports, each with the names its class body defines."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    names: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    members |= {target.id for target in item.targets if isinstance(target, ast.Name)}
            names[node.name] = members
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names[node.name] = set()
        elif isinstance(node, ast.Assign):
            names |= {target.id: set() for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = set()
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(alias.asname or alias.name).split(".")[0]: set() for alias in node.names}
    return names


def _unresolved(name: str) -> str | None:
    """Return why the dotted ``name`` is not a module, a module's attribute or a class's member; None if it is."""
    package, *parts = name.split(".")
    root = _package_root(package)
    if root is None:
        return "no such package"
    depth = 0
    while depth < len(parts) and _module_file(root, parts[: depth + 1]) is not None:
        depth += 1
    rest = parts[depth:]
    if not rest:
        return None
    source = _module_file(root, parts[:depth])
    assert source is not None
    defined = _names_defined(source)
    if rest[0] not in defined:
        return f"{'.'.join([package, *parts[:depth]])} has no module or attribute {rest[0]}"
    if len(rest) == 2 and defined[rest[0]] and rest[1] not in defined[rest[0]]:
        return f"{rest[0]} has no member {rest[1]}"
    return "more than module.attribute.member" if len(rest) > 2 else None


def _module_names(page: Path) -> set[str]:
    """Return the dotted ``docstream...`` and ``docstream_<service>...`` names in the code spans of ``page``."""
    names = set()
    for span in _code_spans(_prose(page)):
        for name in _MODULE_NAME.findall(span):
            if name in _topic_names() or name in _NOT_MODULES or name.rsplit(".", 1)[-1] in _FILE_SUFFIXES:
                continue
            names.add(name)
    return names


def test_the_pages_name_modules() -> None:
    """The scan sees the module names the pages use (an empty scan would pass anything)."""
    names = set().union(*(_module_names(page) for page in _reference_pages()))
    assert len(names) > 50, sorted(names)
    assert any(name.startswith("docstream_inference.") for name in names)


def test_every_module_a_page_names_exists() -> None:
    """Each ``docstream.x.y`` or ``docstream_<service>.x`` in a page's code spans is a module of the tree.

    The longest leading part that is a module must exist; what follows may be one attribute of it, and one
    member of that attribute when it is a class.
    """
    wrong = {
        f"{page.relative_to(ROOT)}: {name} ({why})"
        for page in _reference_pages() for name in _module_names(page)
        if (why := _unresolved(name)) is not None
    }
    assert not wrong, "\n".join(sorted(wrong))


_REPO_PATH = re.compile(r"((?:libs|services|tests|benchmarks|deploy|schemas|examples|tools)/[\w./-]+?)/?(?:::\w+)?")


def _path_exists(path: str) -> bool:
    """Return whether ``path`` is a file or folder of the tree, or ``module.attribute`` of a Python file in it."""
    if (ROOT / path).exists():
        return True
    module, _, attribute = path.rpartition(".")
    return bool(module) and attribute.isidentifier() and (ROOT / f"{module}.py").is_file()


def test_every_repository_path_a_page_names_exists() -> None:
    """A path like ``services/chunker/docstream_chunker/chunking.py`` in a code span is a file or folder of the tree.

    Patterns (``*``, ``<name>``, ``{a,b}``) are not paths and are left alone.
    """
    named, wrong = 0, []
    for page in _reference_pages():
        for span in _code_spans(_prose(page)):
            if (match := _REPO_PATH.fullmatch(span)) is not None:
                named += 1
                if not _path_exists(match.group(1)):
                    wrong.append(f"{page.relative_to(ROOT)}: {span}")
    assert named > 100
    assert not wrong, "\n".join(wrong)

# ---------------------------------------------------------------- (c) no work log in the reference

_ISSUE = re.compile(r"\b[Ii]ssues? #?\d+")
_COMMIT = re.compile(r"(?<![\w-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
_COMMIT_NAMED = re.compile(r"\b(?:commit|main at|run at|clone of)\s+[0-9a-f]{7,40}\b")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield the numbered lines of ``path``."""
    yield from enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)


def test_the_reference_names_no_issue_and_no_commit() -> None:
    """Pages say what the system is; which issue or commit changed it belongs to the log and the history.

    A commit hash is a run of 7 to 40 hex digits with a digit and a letter, not part of a UUID or a word, or
    any such run (digits alone included) right after "commit", "main at", "run at" or "clone of".
    """
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}"
        for path in [*_reference_pages(), ROOT / "tests" / "run.sh"]
        for number, line in _lines(path)
        if _ISSUE.search(line) or _COMMIT.search(line) or _COMMIT_NAMED.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_log_names_no_issue() -> None:
    """The dated log keeps dates and commits, but says what changed rather than which issue asked for it."""
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}"
        for path in sorted((DOCS / "log").glob("*.md")) for number, line in _lines(path) if _ISSUE.search(line)
    ]
    assert not found, "\n".join(found)
    assert list((DOCS / "log").glob("*.md")), "docs/log/ holds the dated measurements"


def test_the_checks_catch_what_they_are_for() -> None:
    """The patterns above flag the drift they exist for and leave its look-alikes alone."""
    assert _ISSUE.search("the targets of issue 15") and _ISSUE.search("see issue #44")
    assert _COMMIT.search("main at 252e53b with") and not _COMMIT.search("seed 20241130, job 2b91135c-b5b7")
    assert _COMMIT_NAMED.search("the clean-clone run at 0054152 took") and not _COMMIT_NAMED.search("seed 20241130")
    assert _unresolved("docstream.no_such_module") and _unresolved("docstream.topics.no_such_name")
    assert _unresolved("docstream.topics.Topics") is None and _unresolved("docstream.topics.Topics.group") is None
    assert _unresolved("docstream.topics.Topics.no_such_member")
    prefix = Topics().prefix
    assert not any(pattern.fullmatch(f"{prefix}.chunker") for pattern in _code_groups())
    assert any(pattern.fullmatch(f"{prefix}-inference-x") for pattern in _code_groups())
