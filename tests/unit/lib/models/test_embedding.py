"""The embedder: runtime choice (pure) and the real bundled model (no mocks of the model)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from docstream.errors import ConfigError
from docstream.models import embedding
from docstream.models.embedding import (
    Embedder,
    Runtime,
    SentenceTransformerEmbedder,
    cpu_supports_bf16,
    load_embedder,
    measure_runtimes,
    model_fingerprint,
    read_cpu_flags,
    read_cpu_model,
)
from docstream.models.files import resolve_model_path
from docstream.models.runtime import BF16_CPU_FLAGS
from docstream.settings import InferenceSettings

REAL_TEXT = [
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.",
    "Call me Ishmael. Some years ago - never mind how long precisely - having little or no money in my purse, "
    "and nothing particular to interest me on shore, I thought I would sail about a little.",
    "A consumer commits an offset only after every effect of that record is done.",
    "Cassandra 5 vector type and an SAI index on chunk embeddings give similarity search.",
    "The quick brown fox jumps over the lazy dog.",
    "In the beginning God created the heaven and the earth. And the earth was without form, and void.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "Kafka",
]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))


# --- the edge of the runtime choice (the pure part: tests/unit/lib/models/test_runtime.py) ---------------


def test_bf16_flags_are_recognised() -> None:
    assert cpu_supports_bf16({"avx2", "avx512_bf16"})
    assert cpu_supports_bf16({"amx_bf16", "amx_tile"})
    assert not cpu_supports_bf16({"avx2", "avx512f", "fma"})


def test_cpu_flags_and_model_are_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse avx512_bf16 avx2\n\n"
                       "processor\t: 1\nflags\t: fpu\n")
    assert read_cpu_flags(cpuinfo) == frozenset({"fpu", "sse", "avx512_bf16", "avx2"})
    assert read_cpu_model(cpuinfo) == "AMD EPYC"
    assert read_cpu_flags(tmp_path / "absent") == frozenset()
    assert read_cpu_model(tmp_path / "absent") == ""


def test_cuda_asked_but_absent_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        load_embedder(InferenceSettings(device="cuda", warmup=False))
    assert info.value.code == "cuda_unavailable"


def test_model_fingerprint_follows_the_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"a": 1}')
    first = model_fingerprint(tmp_path)
    assert model_fingerprint(tmp_path) == first
    (tmp_path / "config.json").write_text('{"a": 2}')
    assert model_fingerprint(tmp_path) != first


def test_a_folder_without_a_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="never downloaded"):
        load_embedder(InferenceSettings(model_path=str(tmp_path), warmup=False))


# --- the real model -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def default_embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    return load_embedder(InferenceSettings(device="cpu"), cache_dir=tmp_path_factory.mktemp("runtime-cache"))


@pytest.fixture(scope="module")
def fp32_embedder() -> SentenceTransformerEmbedder:
    runtime = Runtime(device="cpu", precision="fp32", threads=2)
    return SentenceTransformerEmbedder(resolve_model_path(None), model_id="all-MiniLM-L6-v2", runtime=runtime)


def test_inference_threads_set_torch_intra_op_threads(tmp_path: Path) -> None:
    """``inference.threads`` is torch's thread count on the CPU; 0 (the default) leaves every usable core."""
    import torch

    before = torch.get_num_threads()
    try:
        settings = InferenceSettings(device="cpu", runtime="fp32", threads=1, warmup=False)
        one = load_embedder(settings, cache_dir=tmp_path)
        assert one.runtime.threads == 1
        assert one.runtime.label == "torch/cpu/fp32/1t"
        assert torch.get_num_threads() == 1
        every = load_embedder(InferenceSettings(device="cpu", runtime="fp32", warmup=False), cache_dir=tmp_path)
        assert every.runtime.threads == len(os.sched_getaffinity(0)) == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_inference_threads_must_not_be_negative() -> None:
    with pytest.raises(ValidationError):
        InferenceSettings(threads=-1)


def test_bundled_model_gives_normalized_384_dim_vectors(default_embedder: Embedder) -> None:
    vectors = default_embedder.embed(default_embedder.prepare(REAL_TEXT))
    assert default_embedder.model_id == "all-MiniLM-L6-v2"
    assert default_embedder.dimension == 384
    assert vectors.shape == (len(REAL_TEXT), 384)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)


def test_prepare_and_embed_match_model_encode(fp32_embedder: SentenceTransformerEmbedder) -> None:
    piecewise = fp32_embedder.embed(fp32_embedder.prepare(REAL_TEXT))
    reference = np.asarray(fp32_embedder.model.encode(REAL_TEXT, batch_size=3, normalize_embeddings=True))
    assert np.abs(piecewise - reference).max() < 1e-4


def test_the_embed_task_gives_each_vector_with_the_float32_bytes_it_is_written_as(
    fp32_embedder: SentenceTransformerEmbedder,
) -> None:
    """The row and the record are written from the bytes the model gave (``Float32Vector``), never packed again."""
    from docstream.avro.segments import Float32Vector, float32_bytes
    from docstream.tasks.base import TaskRequest
    from docstream.tasks.embed import EmbedTask

    task = EmbedTask(fp32_embedder)
    outputs = task.run(task.prepare(REAL_TEXT, [TaskRequest("embed")] * len(REAL_TEXT)))
    vectors = fp32_embedder.embed(fp32_embedder.prepare(REAL_TEXT))
    for output, vector in zip(outputs, vectors, strict=True):
        assert type(output.embedding) is Float32Vector and output.embedding == vector.tolist()
        assert float32_bytes(output.embedding) == vector.astype("<f4").tobytes()


def test_the_fp16_runtime_of_a_gpu_runs_its_code_path_here_on_the_cpu(
    fp32_embedder: SentenceTransformerEmbedder,
) -> None:
    """What benchmarks/gpu.sh runs on CUDA (weights in half precision, vectors back as float32), on this CPU."""
    fp16 = SentenceTransformerEmbedder(resolve_model_path(None), model_id="all-MiniLM-L6-v2",
                                       runtime=Runtime(device="cpu", precision="fp16", threads=2))
    assert str(next(fp16.model.parameters()).dtype) == "torch.float16"
    half = fp16.embed(fp16.prepare(REAL_TEXT))
    full = fp32_embedder.embed(fp32_embedder.prepare(REAL_TEXT))
    assert half.dtype == np.float32 and half.shape == full.shape
    cosines = (half * full).sum(axis=1) / np.linalg.norm(half, axis=1) / np.linalg.norm(full, axis=1)
    assert cosines.min() > 0.999, cosines


def test_batch_order_and_padding_do_not_change_a_vector(fp32_embedder: SentenceTransformerEmbedder) -> None:
    together = fp32_embedder.embed(fp32_embedder.prepare(REAL_TEXT))
    alone = np.vstack([fp32_embedder.embed(fp32_embedder.prepare([t])) for t in reversed(REAL_TEXT)])[::-1]
    assert np.abs(together - alone).max() < 1e-4


def test_texts_longer_than_the_model_are_truncated(fp32_embedder: SentenceTransformerEmbedder) -> None:
    long_text = " ".join(REAL_TEXT * 20)
    prepared = fp32_embedder.prepare([long_text])
    assert prepared.features["input_ids"].shape[1] == fp32_embedder.max_tokens
    assert fp32_embedder.embed(prepared).shape == (1, 384)


def _cpu_flags(monkeypatch: pytest.MonkeyPatch, *, bf16: bool) -> None:
    """This machine's flags with the bf16 ones added or taken away: the candidate list, not the arithmetic."""
    flags = read_cpu_flags() - BF16_CPU_FLAGS
    chosen = flags | {"avx512_bf16"} if bf16 else flags
    monkeypatch.setattr(embedding, "read_cpu_flags", lambda: chosen)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Embedder]:
    """A first load with two candidates (bf16 flags; emulated where the CPU lacks them), measured once for the
    tests below (a measurement is seconds of CPU): its cache folder and what it chose."""
    folder = tmp_path_factory.mktemp("measured")
    with pytest.MonkeyPatch.context() as monkeypatch:
        _cpu_flags(monkeypatch, bf16=True)
        return folder, load_embedder(InferenceSettings(device="cpu", warmup=False), cache_dir=folder)


def test_auto_measures_once_then_reads_the_cache(
    measured: tuple[Path, Embedder], fp32_embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first load timed fp32 and bf16 and cached the pick, the second reads it; the pick agrees with fp32."""
    folder, first = measured
    _cpu_flags(monkeypatch, bf16=True)
    (cached,) = folder.glob("*.json")
    assert json.loads(cached.read_text())["runtime"] == first.runtime.label
    stamp = cached.stat().st_mtime_ns
    assert load_embedder(InferenceSettings(device="cpu", warmup=False), cache_dir=folder).runtime == first.runtime
    assert cached.stat().st_mtime_ns == stamp  # read, not re-measured
    fp32 = fp32_embedder.embed(fp32_embedder.prepare(REAL_TEXT))
    assert _cosines(first.embed(first.prepare(REAL_TEXT)), fp32).min() >= 0.999


def test_one_candidate_is_neither_measured_nor_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _cpu_flags(monkeypatch, bf16=False)
    embedder = load_embedder(InferenceSettings(device="cpu", warmup=False), cache_dir=tmp_path)
    assert embedder.runtime.precision == "fp32"
    assert list(tmp_path.iterdir()) == []


def test_a_corrupt_cache_file_is_measured_again(
    measured: tuple[Path, Embedder], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cpu_flags(monkeypatch, bf16=True)
    settings = InferenceSettings(device="cpu", warmup=False, runtime_cache_dir=tmp_path)  # the setting, this time
    (first,) = measured[0].glob("*.json")
    cached = tmp_path / first.name  # the measured choice's file, under the key this load looks for
    cached.write_text('{"version": 1, "runtime": "torch/cpu/')
    embedder = load_embedder(settings)
    assert json.loads(cached.read_text())["runtime"] == embedder.runtime.label


def test_a_forced_runtime_is_used_without_measuring(tmp_path: Path) -> None:
    embedder = load_embedder(InferenceSettings(device="cpu", runtime="fp32", warmup=False), cache_dir=tmp_path)
    assert embedder.runtime == Runtime(device="cpu", precision="fp32", threads=len(os.sched_getaffinity(0)))
    assert embedder.runtime.label.startswith("torch/cpu/fp32/")
    assert list(tmp_path.iterdir()) == []


def test_measurement_times_every_candidate_on_real_length_texts(fp32_embedder: SentenceTransformerEmbedder) -> None:
    bf16 = SentenceTransformerEmbedder(resolve_model_path(None), model_id="all-MiniLM-L6-v2",
                                       runtime=Runtime("cpu", "bf16", 2), shared=fp32_embedder.model)
    assert bf16.model is fp32_embedder.model
    fp32_result, bf16_result = measure_runtimes([fp32_embedder, bf16], batch_size=4)
    assert (fp32_result.runtime, bf16_result.runtime) == (fp32_embedder.runtime, bf16.runtime)
    assert fp32_result.chunks == bf16_result.chunks == 8
    assert fp32_result.worst_cosine == 1.0
    assert 0.999 <= bf16_result.worst_cosine <= 1.0
    assert fp32_result.seconds > 0 and bf16_result.seconds > 0


def test_bf16_autocast_stays_within_cosine_of_fp32(fp32_embedder: SentenceTransformerEmbedder) -> None:
    # bf16 agrees with fp32 to a cosine of 0.9999 on these texts, checked on every CPU (emulated, slower,
    # where bf16 is not native).
    bf16 = SentenceTransformerEmbedder(
        resolve_model_path(None), model_id="all-MiniLM-L6-v2", runtime=Runtime("cpu", "bf16", 2)
    )
    texts = REAL_TEXT[:3]
    assert _cosines(bf16.embed(bf16.prepare(texts)), fp32_embedder.embed(fp32_embedder.prepare(texts))).min() >= 0.9999


SCRIPT_TEXTS = [
    "  Leading and trailing spaces, UPPER case and digits 123  ",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "مرحبا بالعالم، هذه جملة عربية. שלום עולם. नमस्ते दुनिया।",
    " ".join(REAL_TEXT * 20),  # longer than the model: cut
    "",
]


def test_inputs_built_from_the_chunkers_token_ids_are_the_tokenizers_and_give_the_same_vectors(
    fp32_embedder: SentenceTransformerEmbedder,
) -> None:
    """What inference builds from ``ChunkCreated.token_ids`` (made by the chunker's tokenizer) is what the model's own
    tokenizer makes of the texts, in any script, cut where it cuts: the same vectors, bit for bit."""
    import torch

    from docstream.models.tokenization import load_token_counter

    counter = load_token_counter(None, "all-MiniLM-L6-v2")
    assert fp32_embedder.token_ids_of == counter.fingerprint is not None
    ids = counter.token_ids(SCRIPT_TEXTS)
    own = fp32_embedder.prepare(SCRIPT_TEXTS).features
    built = fp32_embedder.prepare_token_ids(SCRIPT_TEXTS, ids).features
    assert set(built) == set(own)
    for name, value in own.items():
        assert torch.equal(built[name], value) if isinstance(value, torch.Tensor) else built[name] == value, name
    assert own["input_ids"].shape[1] == fp32_embedder.max_tokens
    assert np.array_equal(fp32_embedder.embed(fp32_embedder.prepare_token_ids(SCRIPT_TEXTS, ids)),
                          fp32_embedder.embed(fp32_embedder.prepare(SCRIPT_TEXTS)))


def test_the_embed_task_prepares_from_the_token_ids_of_its_own_tokenizer_and_tokenizes_the_rest(
    fp32_embedder: SentenceTransformerEmbedder,
) -> None:
    from docstream.models.tokenization import load_token_counter
    from docstream.tasks.base import TaskRequest, token_ids_accepted, usable_token_ids
    from docstream.tasks.embed import EmbedTask

    task = EmbedTask(fp32_embedder)
    counter = load_token_counter(None, "all-MiniLM-L6-v2")
    accepted = token_ids_accepted(task)
    assert accepted == counter.fingerprint is not None
    assert token_ids_accepted(object()) is None
    texts, requests = REAL_TEXT, [TaskRequest("embed")] * len(REAL_TEXT)
    carried = counter.token_ids(texts)
    # another tokenizer's ids and a chunk without ids are tokenized here; the others built from their ids
    ids = usable_token_ids([carried[0], b"", *carried[2:]], ["another", accepted, *[accepted] * (len(texts) - 2)],
                           accepted)
    assert ids == [None, None, *carried[2:]]
    mixed = task.run(task.prepare_token_ids(texts, requests, ids))
    tokenized = task.run(task.prepare(texts, requests))
    assert np.array_equal(np.vstack([o.embedding for o in mixed]), np.vstack([o.embedding for o in tokenized]))


def test_ids_no_model_of_this_tokenizer_takes_are_never_used_the_text_is_tokenized(
    fp32_embedder: SentenceTransformerEmbedder,
) -> None:
    """A corrupt or foreign record's ids (past the vocabulary: on a GPU, an index error that ends the process's use of
    the device; not whole uint32s) are not built into inputs: its text is tokenized."""
    import torch

    from docstream.models.tokenization import load_token_counter, pack_token_ids

    counter = load_token_counter(None, "all-MiniLM-L6-v2")
    texts = REAL_TEXT[:3]
    hostile = [pack_token_ids([counter.vocabulary_size + 5, 7]), b"\x01\x00\x00", *counter.token_ids(texts[2:])]
    built = fp32_embedder.prepare_token_ids(texts, hostile).features
    own = fp32_embedder.prepare(texts).features
    assert all(torch.equal(built[name], own[name]) for name in ("input_ids", "attention_mask", "token_type_ids"))
