"""Print where a results file is and a short sample of it (used by `make run`).

    python -m docstream_cli.ops.results_preview .docstream/results.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

__all__ = ["preview"]


def preview(path: Path, *, rows: int = 5, console: Console | None = None) -> int:
    """Show ``rows`` documents of a JSON Lines results file (its chunk lines skipped); 1 when it is missing."""
    console = console or Console()
    if not path.is_file():
        console.print(f"no results at {path}")
        return 1
    table = Table(title=f"results: {path.resolve()} (first {rows})")
    for column in ("filename", "status", "pages", "chunks", "embedding"):
        table.add_column(column)
    total = 0
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            doc = json.loads(line)
            if doc.get("record", "document") != "document":
                continue
            total += 1
            if total > rows:
                continue
            vector = doc.get("embedding") or []
            head = ", ".join(f"{v:.3f}" for v in vector[:3])
            table.add_row(
                str(doc.get("filename")), str(doc.get("status")), str(doc.get("page_count")),
                str(doc.get("chunk_count")), f"[{head}, …] ({len(vector)} dims)" if vector else "-",
            )
    console.print(table)
    console.print(f"{total} documents in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(preview(Path(sys.argv[1] if len(sys.argv) > 1 else ".docstream/results.jsonl")))
