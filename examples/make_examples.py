"""Make the example documents shipped in examples/ (run once; the PDFs are committed).

    .venv/bin/python examples/make_examples.py

Deterministic: the same script gives the same text. Uses only PyMuPDF's built-in fonts.
"""

from __future__ import annotations

import random
from pathlib import Path

import pymupdf

HERE = Path(__file__).resolve().parent

TOPICS = {
    "Streaming": [
        "A log-structured broker keeps every record in an append-only partition.",
        "Consumers track their position with offsets and commit them after the work is done.",
        "Keying records by document id keeps all records of one document in one partition, in order.",
        "A consumer group spreads partitions over its members and rebalances when one leaves.",
        "Backpressure pauses a partition when the downstream queue is full and resumes it when it drains.",
        "Replaying a topic from an earlier offset reprocesses history without touching the producers.",
    ],
    "Storage": [
        "A wide-column store partitions rows by their partition key across the ring.",
        "Upserts on a primary key make retries harmless: the same write twice leaves the same row.",
        "Lightweight transactions cost a consensus round and stay out of the hot path.",
        "A storage-attached index answers approximate nearest neighbour queries over vectors.",
        "Consistency levels trade latency for the number of replicas that must acknowledge a write.",
    ],
    "Embeddings": [
        "A sentence embedding maps a passage of text to a point in a vector space.",
        "Passages with similar meaning land close together under cosine similarity.",
        "Micro-batching groups short passages so the model runs on full tensors.",
        "Sorting a batch by length reduces the padding the model must compute.",
        "Mixed precision halves memory traffic and keeps the cosine to full precision above 0.9999.",
    ],
    "Documents": [
        "Text is extracted page by page in reading order, keeping the page numbers.",
        "Chunks are bounded by the tokenizer's count and prefer paragraph and sentence boundaries.",
        "Headings found in the outline or in larger fonts label the chunks below them.",
        "An encrypted or corrupt file fails with a machine-readable error code instead of a crash.",
        "Two-column layouts are read column by column when the extractor sorts its blocks.",
    ],
}


def _paragraph(rng: random.Random, topic: str, sentences: int = 4) -> str:
    pool = TOPICS[topic]
    return " ".join(rng.choice(pool) for _ in range(sentences))


def _write_report(path: Path, title: str, pages: int, seed: int) -> None:
    rng = random.Random(seed)
    doc = pymupdf.open()
    toc = []
    for number in range(1, pages + 1):
        page = doc.new_page()
        topic = rng.choice(sorted(TOPICS))
        heading = f"{number}. {topic}"
        toc.append([1, heading, number])
        page.insert_text((72, 72), title if number == 1 else heading, fontsize=18 if number == 1 else 15)
        body = "\n\n".join(_paragraph(rng, topic) for _ in range(5))
        page.insert_textbox(pymupdf.Rect(72, 100, 540, 770), body, fontsize=10.5)
    doc.set_toc(toc)
    doc.set_metadata({"title": title, "author": "docstream examples"})
    doc.save(path, garbage=4, deflate=True)


def _write_two_column(path: Path, seed: int) -> None:
    rng = random.Random(seed)
    doc = pymupdf.open()
    for number in range(1, 4):
        page = doc.new_page()
        page.insert_text((72, 60), f"Field notes, part {number}", fontsize=16)
        left = "\n\n".join(_paragraph(rng, "Streaming", 3) for _ in range(4))
        right = "\n\n".join(_paragraph(rng, "Storage", 3) for _ in range(4))
        page.insert_textbox(pymupdf.Rect(50, 90, 295, 780), left, fontsize=10)
        page.insert_textbox(pymupdf.Rect(315, 90, 560, 780), right, fontsize=10)
    doc.save(path, garbage=4, deflate=True)


def _write_multilingual(path: Path) -> None:
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 72), "Résumé multilingue", fontsize=16)
    text = (
        "Les documents sont découpés en passages bornés par le nombre de jetons. "
        "Jede Seite wird in Lesereihenfolge extrahiert; Überschriften bleiben erhalten. "
        "La búsqueda semántica devuelve los pasajes más próximos a la consulta. "
        "Ærlig talt: ørsmå forskelle i præcision ændrer næppe resultatet."
    )
    page.insert_textbox(pymupdf.Rect(72, 100, 540, 770), "\n\n".join([text] * 6), fontsize=11)
    doc.save(path, garbage=4, deflate=True)


def main() -> None:
    _write_report(HERE / "streaming-handbook.pdf", "A Streaming Handbook", pages=12, seed=1)
    _write_report(HERE / "storage-notes.pdf", "Notes on Storage", pages=6, seed=2)
    _write_report(HERE / "embedding-primer.pdf", "An Embedding Primer", pages=4, seed=3)
    _write_two_column(HERE / "field-notes-two-column.pdf", seed=4)
    _write_multilingual(HERE / "multilingual.pdf")


if __name__ == "__main__":
    main()
