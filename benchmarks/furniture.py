"""Page furniture on real manuals: how many chunks carry running heads and page numbers, with the rule and without.

    .venv/bin/python benchmarks/furniture.py [PDF ...] [--rounds 4]

Without arguments it reads the two manuals Debian installs with the project's build tools
(/usr/share/doc/libtasn1-doc/libtasn1.pdf, /usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf),
if present. Each PDF is chunked (``chunk_bytes``, 256-token chunks, all-MiniLM-L6-v2's tokenizer) with
``chunker.furniture`` auto and off. Printed per document:

* the paragraphs the rule took out, grouped by ``edge_key`` (to read and judge: every one should be a running
  head, a page number or a footer, and no body text);
* the share of chunks whose text holds any of them that has words (a bare page number is in any text), with
  furniture off (before) and auto (after);
* the characters taken out against the document's text;
* chunk_bytes pages/s with auto and off, in turns over ``--rounds`` (the rule's cost).

The CPU is printed first.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import cpu_banner  # noqa: E402

from docstream.models.tokenization import load_token_counter  # noqa: E402
from docstream_chunker.chunking import ChunkingConfig  # noqa: E402
from docstream_chunker.extraction import ChunkedDocument, chunk_bytes  # noqa: E402
from docstream_chunker.furniture import edge_key  # noqa: E402

MANUALS = (Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf"),
           Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pdfs", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    pdfs = args.pdfs or [p for p in MANUALS if p.is_file()]
    if not pdfs:
        raise SystemExit("no PDF given and no Debian manual installed (apt-get install libtasn1-doc shared-mime-info)")
    print(cpu_banner())
    counter = load_token_counter(None, "all-MiniLM-L6-v2")

    def run(data: bytes, mode: str) -> ChunkedDocument:
        return chunk_bytes(data, config=ChunkingConfig(), counter=counter, max_pages=5000, max_bytes=1 << 31,
                           furniture=mode)  # type: ignore[arg-type]

    for path in pdfs:
        data = path.read_bytes()
        auto, off = run(data, "auto"), run(data, "off")
        by_key: dict[str, set[str]] = {}
        for source in auto.chunk_sources:
            for text in source.page_furniture:
                by_key.setdefault(edge_key(text), set()).add(text)
        texts = {text for group in by_key.values() for text in group}
        heads = {text for text in texts if sum(c.isalpha() for c in text) >= 4}  # a bare page number is in any text
        before = sum(any(t in c.text for t in heads) for c in off.chunks)
        after = sum(any(t in c.text for t in heads) for c in auto.chunks)
        body = sum(len(c.text) for c in off.chunks)
        removed = sum(len(t) for t in texts)
        print(f"\n{path.name}: {auto.page_count} pages, {len(off.chunks)} chunks off, {len(auto.chunks)} auto")
        for key, group in sorted(by_key.items(), key=lambda kv: -len(kv[1])):
            sample = sorted(group)[:3]
            print(f"  taken: {key!r:60.60s} {len(group):3d} distinct texts, e.g. {sample}")
        print(f"  chunks holding a running head or footer with words: off {before}/{len(off.chunks)} "
              f"({before / len(off.chunks):.0%}), auto {after}/{len(auto.chunks)} "
              f"({after / max(len(auto.chunks), 1):.0%})")
        print(f"  characters taken: {removed} distinct of ~{body} in the chunks")
        wall = {"auto": 0.0, "off": 0.0}
        for round_number in range(args.rounds):
            for mode in ("auto", "off") if round_number % 2 == 0 else ("off", "auto"):
                started = time.perf_counter()
                run(data, mode)
                wall[mode] += time.perf_counter() - started
        pages_done = auto.page_count * args.rounds
        print(f"  pages/s: auto {pages_done / wall['auto']:.0f}, off {pages_done / wall['off']:.0f} "
              f"(auto/off time {wall['auto'] / wall['off']:.3f})")


if __name__ == "__main__":
    main()
