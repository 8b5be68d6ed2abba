"""The plain single-process pipeline: PyMuPDF → docstream's chunker → SentenceTransformer.encode, nothing else.

What a script without Kafka, a store or services does with the same documents and the same
chunker: every PDF in FOLDER is read, extracted and chunked (``docstream_chunker.extraction.chunk_bytes``
with the model tokenizer, 256 tokens, overlap 32), then all chunk texts go through
``SentenceTransformer(<bundled model>).encode(texts, batch_size=16)`` in fp32 (or under
``torch.autocast("cpu", bfloat16)`` with ``--bf16``). It prints one JSON line:
``{"chunks": N, "seconds": S, "extract_s": E, "embed_s": M, "precision": ...}``.

    .venv/bin/python benchmarks/plain_pipeline.py /tmp/pdfs [--bf16] [--batch-size 16]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from docstream.models.embedding import cpu_supports_bf16, read_cpu_flags
from docstream.models.files import resolve_model_path
from docstream.models.tokenization import load_token_counter
from docstream_chunker.chunking import ChunkingConfig
from docstream_chunker.extraction import chunk_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--bf16", action="store_true", help="run encode under torch.autocast('cpu', bfloat16)")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    started = time.perf_counter()
    counter = load_token_counter(None, "all-MiniLM-L6-v2")
    config = ChunkingConfig(256, 32)
    texts: list[str] = []
    for path in sorted(args.folder.glob("*.pdf")):
        doc = chunk_bytes(path.read_bytes(), config=config, counter=counter, max_pages=5000, max_bytes=1 << 30,
                          filename=path.name)
        texts.extend(chunk.text for chunk in doc.chunks)
    extracted = time.perf_counter()
    torch.set_num_threads(torch.get_num_threads())
    model = SentenceTransformer(str(resolve_model_path(None)), device="cpu", local_files_only=True)
    with torch.inference_mode():
        if args.bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                vectors = model.encode(texts, batch_size=args.batch_size, show_progress_bar=False)
        else:
            vectors = model.encode(texts, batch_size=args.batch_size, show_progress_bar=False)
    done = time.perf_counter()
    assert np.asarray(vectors).shape[0] == len(texts)
    print(json.dumps({
        "chunks": len(texts), "seconds": round(done - started, 3), "extract_s": round(extracted - started, 3),
        "embed_s": round(done - extracted, 3),
        "precision": "bf16" if args.bf16 else "fp32",
        "native_bf16": cpu_supports_bf16(read_cpu_flags()),
    }))


if __name__ == "__main__":
    main()
