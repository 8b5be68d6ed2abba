"""Benchmark: the entities task against spaCy's own ``nlp.pipe``, on the same chunk-like texts, in one run.

Three variants, timed in alternating rounds (the order rotates each round; the machine's load drifts):

* (a) spaCy: ``nlp.pipe(texts, batch_size=B)`` with the pipeline's default components (what a script
  calling spaCy directly gets; B defaults to the pipeline's own ``nlp.batch_size``);
* (b) the same with only the components ``ner`` needs (the task's pipeline: tok2vec, parser, ner);
* (c) the task: ``EntitiesTask.prepare`` + ``run`` over micro-batches of the inference service's
  default batch size (``inference.max_batch_size``) — ``run_micro_batches``, which the whole-service
  benchmark reuses.

It prints chunks/s of each (total texts over total time of its rounds), the process CPU ms per
chunk, the ratios c/a (target >= 0.85), b/a and c/b, and checks that the three found the same
entities.

    .venv/bin/python benchmarks/entities.py --chunks 256 --words 170 --rounds 3
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from machine import cpu_banner  # noqa: E402

from docstream.logging import configure_logging  # noqa: E402
from docstream.settings import InferenceSettings, Settings  # noqa: E402
from docstream.tasks.base import ChunkOutput, TaskContext, TaskRequest  # noqa: E402
from docstream.tasks.entities import EntitiesTask, SpacyRecognizer  # noqa: E402

_PEOPLE = ("Angela Merkel", "Barack Obama", "Tim Cook", "Marie Curie", "Elon Musk", "Ada Lovelace",
           "Satya Nadella", "Emmanuel Macron", "Jacinda Ardern", "Olaf Scholz")
_ORGS = ("Siemens", "Microsoft", "the European Central Bank", "Google", "Apple", "the United Nations",
         "Deutsche Bahn", "Toyota", "the World Health Organization", "Airbus")
_PLACES = ("Munich", "Paris", "London", "Berlin", "Tokyo", "New York", "Madrid", "Toronto", "Nairobi", "Sydney")
_WORDS = ("the of and to in is was for on that with as by at from are this be or an which it have not has were "
          "report market growth energy policy company project agreement meeting budget research network "
          "supply demand price contract team plan results quarter year board statement council trade").split()
_TEMPLATES = ("{p} of {o} met officials in {c} on Monday.", "In {c}, {o} announced a new plan led by {p}.",
              "{o} said {p} would travel to {c} next week.", "Talks between {p} and {o} continued in {c}.")


def chunk_texts(count: int, words: int, seed: int = 17) -> list[str]:
    """``count`` chunk-like texts of about ``words`` words: filler sentences with people, organisations, places."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        parts: list[str] = []
        while sum(len(p.split()) for p in parts) < words:
            if rng.random() < 0.4:
                parts.append(rng.choice(_TEMPLATES).format(p=rng.choice(_PEOPLE), o=rng.choice(_ORGS),
                                                           c=rng.choice(_PLACES)))
            else:
                parts.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 16))).capitalize() + ".")
        texts.append(" ".join(parts))
    return texts


def run_micro_batches(task: EntitiesTask, texts: Sequence[str], batch_size: int) -> list[ChunkOutput]:
    """What the inference service does with the model: ``prepare`` then ``run``, ``batch_size`` texts at a time."""
    request = TaskRequest(task.name)
    out: list[ChunkOutput] = []
    for i in range(0, len(texts), batch_size):
        batch = texts[i:i + batch_size]
        out.extend(task.run(task.prepare(batch, [request] * len(batch))))
    return out


_Found = list[list[tuple[int, int, str]]]  # per text: (start, end, label) of each entity


def _spacy_pipe(nlp: Any, texts: Sequence[str], batch_size: int) -> _Found:
    return [[(e.start_char, e.end_char, e.label_) for e in doc.ents]
            for doc in nlp.pipe(texts, batch_size=batch_size)]


def _timed(run: Callable[[], _Found]) -> tuple[float, float, _Found]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=256, help="texts per round")
    parser.add_argument("--words", type=int, default=170, help="words per text (a 256-token chunk is ~170-190)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each runs every variant once")
    parser.add_argument("--spacy-batch-size", type=int, default=0,
                        help="B of (a) and (b); 0: the pipeline's own nlp.batch_size")
    parser.add_argument("--service-batch-size", type=int, default=InferenceSettings().max_batch_size,
                        help="micro-batch of (c); default: inference.max_batch_size")
    args = parser.parse_args()
    configure_logging(level="WARNING", fmt="console")
    import spacy

    print(cpu_banner(), flush=True)
    settings = Settings()
    task = EntitiesTask.load(TaskContext(settings.inference, settings.tasks))
    recognizer = task.recognizer
    assert isinstance(recognizer, SpacyRecognizer)
    package = f"{recognizer.nlp.meta['lang']}_{recognizer.nlp.meta['name']}"
    full = spacy.load(package)
    batch = args.spacy_batch_size or full.batch_size
    texts = chunk_texts(args.chunks, args.words)
    print(f"spaCy {spacy.__version__}, {task.model_id}; {len(texts)} texts of ~{args.words} words "
          f"({sum(map(len, texts)) // len(texts)} chars), {args.rounds} rounds", flush=True)
    print(f"(a) nlp.pipe batch_size={batch}, components {full.pipe_names}", flush=True)
    print(f"(b) nlp.pipe batch_size={batch}, components {recognizer.nlp.pipe_names}", flush=True)
    print(f"(c) EntitiesTask.prepare+run, micro-batches of {args.service_batch_size}", flush=True)
    variants: dict[str, Callable[[], _Found]] = {
        "a": lambda: _spacy_pipe(full, texts, batch),
        "b": lambda: _spacy_pipe(recognizer.nlp, texts, batch),
        "c": lambda: [[(s.start, s.end, s.label) for s in out.spans]
                      for out in run_micro_batches(task, texts, args.service_batch_size)],
    }
    task.warm_up()
    _spacy_pipe(full, texts[:8], batch)  # warm (a) too
    wall = dict.fromkeys(variants, 0.0)
    cpu = dict.fromkeys(variants, 0.0)
    found: dict[str, _Found] = {}
    names = list(variants)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            seconds, cpu_seconds, found[name] = _timed(variants[name])
            wall[name] += seconds
            cpu[name] += cpu_seconds
            print(f"  round {r + 1} ({name}): {len(texts) / seconds:.1f} chunks/s", flush=True)
    total = len(texts) * args.rounds
    rate = {n: total / wall[n] for n in names}
    print(f"{'variant':>8} {'chunks/s':>9} {'CPU ms/chunk':>13}")
    for n in names:
        print(f"{n:>8} {rate[n]:>9.1f} {1000 * cpu[n] / total:>13.2f}")
    print(f"ratios: c/a {rate['c'] / rate['a']:.2f} (target >= 0.85), b/a {rate['b'] / rate['a']:.2f}, "
          f"c/b {rate['c'] / rate['b']:.2f}")
    same = found["a"] == found["b"] == found["c"]
    print(f"same entities in (a), (b), (c): {'yes' if same else 'NO'} ({sum(map(len, found['a']))} entities)")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
