"""The token ids a chunk carries and the model inputs built from them: pure functions, and the bundled tokenizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from docstream.models.files import resolve_model_path
from docstream.models.tokenization import (
    SpecialTokens,
    load_token_counter,
    model_inputs,
    pack_token_ids,
    tokenizer_fingerprint,
    unpack_token_ids,
    valid_token_ids,
)

BERT = SpecialTokens(prefix=(101,), suffix=(102,), prefix_types=(0,), suffix_types=(0,), text_type=0, pad_id=0)


def test_token_ids_pack_as_little_endian_uint32_and_back() -> None:
    packed = pack_token_ids([1, 2, 70_000])
    assert packed == b"\x01\x00\x00\x00\x02\x00\x00\x00\x70\x11\x01\x00"
    assert unpack_token_ids(packed).tolist() == [1, 2, 70_000]
    with pytest.raises(ValueError, match="uint32"):
        unpack_token_ids(b"\x01\x00\x00")


def test_model_inputs_put_the_special_tokens_around_each_text_cut_it_and_pad_on_the_right() -> None:
    rows = [pack_token_ids([5, 6, 7, 8, 9]), pack_token_ids([5]), b""]
    inputs = model_inputs(rows, BERT, max_length=5)  # room for 3 text tokens
    assert inputs.input_ids.tolist() == [[101, 5, 6, 7, 102], [101, 5, 102, 0, 0], [101, 102, 0, 0, 0]]
    assert inputs.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]]
    assert inputs.token_type_ids.tolist() == [[0] * 5] * 3
    assert inputs.input_ids.dtype == np.int64
    with pytest.raises(ValueError, match="no room"):
        model_inputs(rows, BERT, max_length=2)


def test_the_bundled_tokenizer_reads_its_special_tokens_and_ids_the_stripped_text() -> None:
    counter = load_token_counter(None, "all-MiniLM-L6-v2")
    assert counter.special_tokens_around(0) == BERT
    assert counter.token_ids(["  Hello world  "]) == counter.token_ids(["Hello world"])
    assert len(unpack_token_ids(counter.token_ids(["Hello world"])[0])) == counter.count(["Hello world"])[0]
    assert counter.fingerprint == tokenizer_fingerprint(resolve_model_path(None))


def test_the_fingerprint_follows_the_tokenizer_and_its_case_rule(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    first = tokenizer_fingerprint(tmp_path)
    (tmp_path / "sentence_bert_config.json").write_text('{"do_lower_case": true}')
    lowered = tokenizer_fingerprint(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"x": 1}')
    assert len({first, lowered, tokenizer_fingerprint(tmp_path)}) == 3


def test_valid_token_ids_are_whole_uint32s_below_the_vocabulary() -> None:
    assert valid_token_ids(pack_token_ids([0, 9]), 10) and valid_token_ids(b"", 10)
    assert not valid_token_ids(pack_token_ids([10]), 10)
    assert not valid_token_ids(b"\x01\x00", 10)
