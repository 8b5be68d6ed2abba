"""Print the shape of docstream's import graph: libs/common's modules and top-level entries, and every import cycle.

Run with the project's Python (``.venv/bin/python tools/import_graph.py``): it reads the packages through grimp,
the graph behind import-linter, so it sees what the import contracts see (imports under ``TYPE_CHECKING`` are left out).
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp
import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "libs" / "common" / "docstream"
PACKAGES = ["docstream", "docstream_cli", "docstream_ingest", "docstream_chunker", "docstream_inference",
            "docstream_reducer", "docstream_sink"]


def module_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Return each strongly connected set of modules (two or more modules that import each other), sorted."""
    edges = nx.DiGraph()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.split(".")[0] in PACKAGES:
                edges.add_edge(module, imported)
    return sorted(sorted(group) for group in nx.strongly_connected_components(edges) if len(group) > 1)


def package_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Return the cycles between sibling modules of one package, counting a subpackage as one node."""
    edges = nx.DiGraph()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            parts, other = module.split("."), imported.split(".")
            common = 0
            while common < min(len(parts), len(other)) - 1 and parts[common] == other[common]:
                common += 1
            if common and parts[:common] == other[:common] and parts[common] != other[common]:
                edges.add_edge(".".join(parts[: common + 1]), ".".join(other[: common + 1]))
    return sorted(sorted(group) for group in nx.strongly_connected_components(edges) if len(group) > 1)


def top_level_entries() -> list[str]:
    """Return the modules and packages directly under libs/common/docstream (its ``__init__`` aside)."""
    return sorted(p.name for p in LIB.iterdir() if p.name not in {"__init__.py", "__pycache__"}
                  and (p.suffix == ".py" or (p / "__init__.py").is_file()))


def main() -> int:
    sys.path[:0] = [str(ROOT / "libs" / "common"), *map(str, sorted((ROOT / "services").glob("*")))]
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    lib_modules = sorted(p for p in LIB.rglob("*.py"))
    entries = top_level_entries()
    print(f"libs/common/docstream: {len(lib_modules)} modules, {len(entries)} top-level entries")
    print("  " + " ".join(entries))
    cycles = module_cycles(graph)
    print(f"module cycles: {len(cycles)}")
    for group in cycles:
        print("  " + " <-> ".join(group))
    packages = package_cycles(graph)
    print(f"package-level cycles: {len(packages)}")
    for group in packages:
        print("  " + " <-> ".join(group))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
