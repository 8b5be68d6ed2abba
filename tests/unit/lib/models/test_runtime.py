"""The runtime choice (docstream.models.runtime): candidates from the machine, the pick from injected timings. Pure."""

from __future__ import annotations

import json

import pytest

from docstream.errors import ConfigError
from docstream.models.runtime import (
    Measurement,
    Runtime,
    cache_entry,
    cached_runtime,
    choose_runtime,
    cpu_supports_bf16,
    runtime_cache_key,
    runtime_candidates,
)

FP32 = Runtime(device="cpu", precision="fp32", threads=2)
BF16 = Runtime(device="cpu", precision="bf16", threads=2)
GPU32 = Runtime(device="cuda", precision="fp32", threads=0)
GPU16 = Runtime(device="cuda", precision="fp16", threads=0)


def _m(runtime: Runtime, chunks_per_s: float, worst_cosine: float = 1.0) -> Measurement:
    return Measurement(runtime=runtime, seconds=32 / chunks_per_s, chunks=32, worst_cosine=worst_cosine)


# --- the pick, from injected timings ------------------------------------------------------


def test_bf16_slower_than_fp32_keeps_fp32() -> None:
    # The 2-core Xeon of issue 15: avx512_bf16 present, bf16 autocast at 0.66x fp32.
    assert choose_runtime([_m(FP32, 35.6), _m(BF16, 23.4, 0.9996)]) == FP32


def test_bf16_faster_and_agreeing_is_chosen() -> None:
    assert choose_runtime([_m(FP32, 13.8), _m(BF16, 66.1, 0.99998)]) == BF16


def test_bf16_faster_but_not_agreeing_keeps_fp32() -> None:
    assert choose_runtime([_m(FP32, 20.0), _m(BF16, 60.0, 0.998)]) == FP32


def test_agreement_bar_is_inclusive_and_can_be_loosened() -> None:
    assert choose_runtime([_m(FP32, 20.0), _m(BF16, 60.0, 0.999)]) == BF16
    assert choose_runtime([_m(FP32, 20.0), _m(BF16, 60.0, 0.995)], min_cosine=0.99) == BF16


def test_ties_and_noise_keep_fp32() -> None:
    assert choose_runtime([_m(FP32, 30.0), _m(BF16, 30.0)]) == FP32
    assert choose_runtime([_m(FP32, 30.0), _m(BF16, 31.0)]) == FP32  # within TIE_MARGIN (5 %)
    assert choose_runtime([_m(FP32, 30.0), _m(BF16, 32.0)]) == BF16


def test_cuda_fp16_faster_is_chosen_and_slower_is_not() -> None:
    assert choose_runtime([_m(GPU32, 4000.0), _m(GPU16, 11000.0, 0.9999)]) == GPU16
    assert choose_runtime([_m(GPU32, 4000.0), _m(GPU16, 3000.0, 0.9999)]) == GPU32


def test_fastest_of_several_agreeing_candidates() -> None:
    other = Runtime(device="cpu", precision="bf16", threads=1)
    assert choose_runtime([_m(FP32, 10.0), _m(BF16, 20.0), _m(other, 25.0)]) == other
    assert choose_runtime([_m(FP32, 10.0), _m(other, 25.0), _m(BF16, 20.0)]) == other


def test_only_fp32_measured_is_fp32_and_nothing_is_an_error() -> None:
    assert choose_runtime([_m(FP32, 10.0)]) == FP32
    with pytest.raises(ValueError):
        choose_runtime([])


# --- the candidates, from what the machine allows ----------------------------------------


def test_avx2_only_cpu_has_one_candidate_so_nothing_is_timed() -> None:
    assert runtime_candidates("auto", device="auto", cuda_available=False, cpu_flags={"avx2", "fma"},
                              cpu_count=2) == (FP32,)


@pytest.mark.parametrize("flag", ["avx512_bf16", "amx_bf16"])
def test_bf16_flags_make_bf16_a_candidate_after_fp32(flag: str) -> None:
    assert cpu_supports_bf16({flag})
    assert runtime_candidates("auto", device="cpu", cuda_available=True, cpu_flags={flag, "avx2"},
                              cpu_count=2) == (FP32, BF16)


def test_cuda_candidates_are_fp32_then_fp16() -> None:
    assert runtime_candidates("auto", device="auto", cuda_available=True, cpu_flags=(), cpu_count=8) == (GPU32, GPU16)


def test_a_forced_mode_is_the_only_candidate() -> None:
    flags = {"avx512_bf16"}
    assert runtime_candidates("fp32", device="auto", cuda_available=False, cpu_flags=flags, cpu_count=2) == (FP32,)
    assert runtime_candidates("bf16", device="auto", cuda_available=False, cpu_flags=(), cpu_count=2) == (BF16,)
    assert runtime_candidates("bf16", device="auto", cuda_available=True, cpu_flags=(), cpu_count=2) == (BF16,)
    assert runtime_candidates("fp16", device="auto", cuda_available=True, cpu_flags=(), cpu_count=2) == (GPU16,)
    assert runtime_candidates("fp32", device="cuda", cuda_available=True, cpu_flags=(), cpu_count=2) == (GPU32,)


@pytest.mark.parametrize(("mode", "device", "cuda", "code"), [
    ("auto", "cuda", False, "cuda_unavailable"),
    ("fp16", "auto", False, "cuda_unavailable"),
    ("fp16", "cpu", True, "runtime_unavailable"),
    ("bf16", "cuda", True, "runtime_unavailable"),
])
def test_impossible_settings_are_config_errors(mode: str, device: str, cuda: bool, code: str) -> None:
    with pytest.raises(ConfigError) as info:
        runtime_candidates(mode, device=device, cuda_available=cuda, cpu_flags=(), cpu_count=2)  # type: ignore[arg-type]
    assert info.value.code == code


# --- labels and the cache record ------------------------------------------------------------


def test_labels_name_backend_device_precision_and_cpu_threads() -> None:
    assert FP32.label == "torch/cpu/fp32/2t"
    assert Runtime(device="cpu", precision="bf16", threads=16).label == "torch/cpu/bf16/16t"
    assert GPU16.label == "torch/cuda/fp16"
    for runtime in (FP32, BF16, GPU32, GPU16):
        assert Runtime.from_label(runtime.label) == runtime
    for bad in ("", "torch/cpu/fp32", "torch/cuda/fp16/2t", "tf/cpu/fp32/2t", "torch/cpu/int4/2t"):
        with pytest.raises(ValueError):
            Runtime.from_label(bad)


def test_cache_entry_round_trips_and_bad_entries_are_ignored() -> None:
    measurements = [_m(FP32, 13.8), _m(BF16, 66.1, 0.99998)]
    text = json.dumps(cache_entry(BF16, measurements))
    assert json.loads(text)["measurements"][1] == {"runtime": BF16.label, "chunks_per_s": 66.1,
                                                    "worst_cosine": 0.99998}
    assert cached_runtime(text, (FP32, BF16)) == BF16
    assert cached_runtime(text, (FP32,)) is None  # no longer a candidate here
    for corrupt in ("", "{", "[]", '{"version": 1}', '{"version": 1, "runtime": "x"}', '{"version": 9, "runtime": '
                    '"torch/cpu/fp32/2t"}', text[: len(text) // 2]):
        assert cached_runtime(corrupt, (FP32, BF16)) is None


def test_cache_key_changes_with_everything_the_choice_depends_on() -> None:
    base = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "avx512_bf16"], "torch_version": "2.13.0", "device": "cpu",
            "threads": 2, "model_hash": "abc", "candidates": (FP32, BF16)}
    key = runtime_cache_key(**base)  # type: ignore[arg-type]
    assert key == runtime_cache_key(**{**base, "cpu_flags": ["avx512_bf16", "avx2", "avx2"]})  # type: ignore[arg-type]
    assert key.isalnum()
    for name, other in [("cpu_model", "Intel Xeon"), ("cpu_flags", ["avx2"]), ("torch_version", "2.14.0"),
                        ("device", "cuda"), ("threads", 4), ("model_hash", "abd"), ("candidates", (FP32,))]:
        assert runtime_cache_key(**{**base, name: other}) != key  # type: ignore[arg-type]


def test_a_model_behind_an_endpoint_has_the_label_openai_remote_and_reads_back() -> None:
    runtime = Runtime(device="remote", precision="fp32", threads=0, backend="openai")
    assert runtime.label == "openai/remote"
    assert Runtime.from_label("openai/remote") == runtime
