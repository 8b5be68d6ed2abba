"""The model's tokenizer as a ``TokenCounter``: the ``tokenizers`` library, no torch.

``load_token_counter(model_path, model_id)`` reads ``tokenizer.json`` (and the model's
``max_seq_length``) from the sentence-transformers folder that ``docstream.models.files`` resolves:
the bundled all-MiniLM-L6-v2 unless a path is given. Truncation and padding stored in the
file are switched off: counts are of the whole text.

Counting is the chunker's hot path, so single words are cached (bounded) and misses are
encoded in one ``encode_batch_fast`` call.

Token ids carried on a chunk's record (``ModelTokenCounter.token_ids``, ``ChunkCreated.token_ids``) spare the
inference service its tokenizing: ``tokenizer_fingerprint`` names the tokenizer that made them, and
``model_inputs`` builds a model's input rows from them (its special tokens around each, padding, mask), the rows
its own tokenizer would give for the texts; the embedder checks that it does before it takes any
(docs/inference.md "Token ids from the chunker").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from docstream.errors import ConfigError
from docstream.models.files import resolve_model_path
from docstream.models.token_counter import TokenCounter

__all__ = [
    "ModelInputs",
    "ModelTokenCounter",
    "SpecialTokens",
    "TokenCounter",
    "load_token_counter",
    "model_inputs",
    "pack_token_ids",
    "special_tokens_of",
    "tokenizer_fingerprint",
    "unpack_token_ids",
    "valid_token_ids",
]

# Pre-tokenizers that split on whitespace first, and normalizers that act per character: with
# both, a text's count is the sum of its whitespace-separated words' counts.
_SPLITTING_PRE_TOKENIZERS = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit", "Punctuation", "Digits"})
_LOCAL_NORMALIZERS = frozenset({"BertNormalizer", "Lowercase", "StripAccents", "NFC", "NFD", "NFKC", "NFKD", "Strip"})
_CACHE_WORD_CHARS = 48


class ModelTokenCounter:
    """A ``TokenCounter`` over a ``tokenizers.Tokenizer``.

    Args:
        tokenizer: the tokenizer (truncation and padding are switched off on it).
        name: identity recorded in the chunker settings string (model id).
        max_sequence_length: the model's max_seq_length, or None when unknown.
        special_tokens: tokens the model adds around a text ([CLS] and [SEP]: 2).
        additive: whether per-word counts sum to the text's count.
        cache_size: most words kept in the count cache.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        name: str,
        max_sequence_length: int | None,
        special_tokens: int,
        additive: bool,
        cache_size: int = 200_000,
        fingerprint: str | None = None,
        lower_case: bool = False,
    ) -> None:
        self._fingerprint = fingerprint
        self._lower_case = lower_case
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self._name = name
        self._max_sequence_length = max_sequence_length
        self._special_tokens = special_tokens
        self._additive = additive
        self._cache: dict[str, int] = {}
        self._cache_size = cache_size

    @property
    def name(self) -> str:
        """The model id."""
        return self._name

    @property
    def additive(self) -> bool:
        """Whether per-word counts sum to a text's count."""
        return self._additive

    @property
    def special_tokens(self) -> int:
        """Tokens the model adds around every text."""
        return self._special_tokens

    @property
    def max_text_tokens(self) -> int | None:
        """The model's max sequence length less its special tokens."""
        if self._max_sequence_length is None:
            return None
        return self._max_sequence_length - self._special_tokens

    def count(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each text, without special tokens."""
        cache = self._cache
        counts = list(map(cache.get, texts))
        if None not in counts:
            return counts  # type: ignore[return-value]
        missing = list(dict.fromkeys(text for text, n in zip(texts, counts, strict=True) if n is None))
        encoded = self._tokenizer.encode_batch_fast(missing, add_special_tokens=False)
        fresh = {text: len(enc.ids) for text, enc in zip(missing, encoded, strict=True)}
        if len(cache) + len(fresh) > self._cache_size:
            cache.clear()
        cache.update((text, n) for text, n in fresh.items() if len(text) <= _CACHE_WORD_CHARS)
        return [fresh[text] if n is None else n for text, n in zip(texts, counts, strict=True)]

    def cut_points(self, text: str, max_tokens: int) -> list[int]:
        """Offsets in ``text`` that start every ``max_tokens``-th token."""
        offsets = self._tokenizer.encode(text, add_special_tokens=False).offsets
        cuts: list[int] = []
        for i in range(max(1, max_tokens), len(offsets), max(1, max_tokens)):
            start = offsets[i][0]
            if 0 < start < len(text) and (not cuts or start > cuts[-1]):
                cuts.append(start)
        return cuts

    @property
    def fingerprint(self) -> str | None:
        """``tokenizer_fingerprint`` of the model folder (None: not known, no ids are carried)."""
        return self._fingerprint

    @property
    def vocabulary_size(self) -> int:
        """Ids this tokenizer gives, its added tokens included: every id it makes is below it."""
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def special_tokens_around(self, pad_id: int) -> SpecialTokens | None:
        """``special_tokens_of`` this tokenizer."""
        return special_tokens_of(self._tokenizer, pad_id)

    def token_ids(self, texts: Sequence[str]) -> list[bytes]:
        """Each text's token ids without special tokens (``pack_token_ids``), of the text as a sentence-transformers
        model reads it: stripped, and lower-cased where its ``do_lower_case`` says so. Not truncated."""
        prepared = [text.strip().lower() if self._lower_case else text.strip() for text in texts]
        encoded = self._tokenizer.encode_batch_fast(prepared, add_special_tokens=False)
        return [pack_token_ids(enc.ids) for enc in encoded]

    def encode_count(self, text: str) -> int:
        """Tokens in ``text`` by a plain encode (no cache): what the model sees, less specials."""
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


def _component_types(node: dict[str, Any] | None) -> set[str]:
    if not node:
        return set()
    if node.get("type") == "Sequence":
        parts = node.get("normalizers") or node.get("pretokenizers") or []
        return set().union(*(_component_types(part) for part in parts)) if parts else {"Sequence"}
    return {str(node.get("type"))}


def _is_additive(config: dict[str, Any]) -> bool:
    pre = _component_types(config.get("pre_tokenizer"))
    norm = _component_types(config.get("normalizer"))
    return bool(pre) and pre <= _SPLITTING_PRE_TOKENIZERS and norm <= _LOCAL_NORMALIZERS


def _max_sequence_length(folder: Path) -> int | None:
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        path = folder / name
        if path.is_file():
            value = json.loads(path.read_text()).get(key)
            if isinstance(value, int) and 0 < value < 1_000_000:
                return value
    return None


def _lower_case(folder: Path) -> bool:
    path = folder / "sentence_bert_config.json"
    return path.is_file() and json.loads(path.read_text()).get("do_lower_case") is True


def tokenizer_fingerprint(folder: Path) -> str:
    """The identity of a sentence-transformers folder's tokenizing: ``tokenizer.json`` and its ``do_lower_case``, hashed
    (16 hex digits). Token ids made under one fingerprint are taken only by a model of the same.

    Raises:
        OSError: no readable ``tokenizer.json``.
    """
    digest = hashlib.sha256((folder / "tokenizer.json").read_bytes())
    digest.update(b"lower" if _lower_case(folder) else b"as-is")
    return digest.hexdigest()[:16]


def pack_token_ids(ids: Sequence[int]) -> bytes:
    """Token ids as a record carries them: little-endian uint32."""
    return np.asarray(ids, dtype="<u4").tobytes()


def unpack_token_ids(data: bytes) -> np.ndarray[Any, Any]:
    """The inverse of ``pack_token_ids``.

    Raises:
        ValueError: not a whole number of uint32 values.
    """
    if len(data) % 4:
        raise ValueError("token ids are not a whole number of uint32 values")
    return np.frombuffer(data, dtype="<u4")


def valid_token_ids(data: bytes, vocabulary_size: int) -> bool:
    """Whether ``data`` is packed token ids a model of ``vocabulary_size`` ids can take: an id past it would index
    outside its embedding table (on a GPU, an error that ends the process's use of the device)."""
    try:
        ids = unpack_token_ids(data)
    except ValueError:
        return False
    return not ids.size or int(ids.max()) < vocabulary_size


@dataclass(frozen=True, slots=True)
class SpecialTokens:
    """What a tokenizer puts around one text: ids (and their token type ids) before and after it, the type id of the
    text's own tokens, and the id that pads a row."""

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    prefix_types: tuple[int, ...]
    suffix_types: tuple[int, ...]
    text_type: int
    pad_id: int


def special_tokens_of(tokenizer: Tokenizer, pad_id: int) -> SpecialTokens | None:
    """The special tokens ``tokenizer`` puts around one text, read from its encoding of a one-token text with and
    without them; None when that encoding is not the text's tokens between a prefix and a suffix."""
    bare = tokenizer.encode("a", add_special_tokens=False)
    full = tokenizer.encode("a", add_special_tokens=True)
    ids, types, plain = list(full.ids), list(full.type_ids), list(bare.ids)
    for start in range(len(ids) - len(plain) + 1):
        if ids[start:start + len(plain)] == plain:
            end = start + len(plain)
            return SpecialTokens(tuple(ids[:start]), tuple(ids[end:]), tuple(types[:start]), tuple(types[end:]),
                                 types[start] if plain else 0, pad_id)
    return None


@dataclass(frozen=True, slots=True)
class ModelInputs:
    """Input rows of one forward pass, padded on the right to the longest: int64 arrays of shape (texts, length)."""

    input_ids: np.ndarray[Any, Any]
    attention_mask: np.ndarray[Any, Any]
    token_type_ids: np.ndarray[Any, Any]


def model_inputs(rows: Sequence[bytes], special: SpecialTokens, max_length: int) -> ModelInputs:
    """The model's input rows of texts given as packed token ids (``pack_token_ids``): each text's ids cut to what
    ``max_length`` leaves beside the special tokens, then the special tokens around them, then padding.

    Raises:
        ValueError: a row is not packed token ids, or ``max_length`` leaves no room for a token.
    """
    around = len(special.prefix) + len(special.suffix)
    room = max_length - around
    if room < 1:
        raise ValueError(f"max_length {max_length} leaves no room beside {around} special tokens")
    texts = [unpack_token_ids(row)[:room] for row in rows]
    width = max((len(ids) for ids in texts), default=0) + around
    input_ids = np.full((len(texts), width), special.pad_id, dtype=np.int64)
    mask = np.zeros((len(texts), width), dtype=np.int64)
    types = np.zeros((len(texts), width), dtype=np.int64)
    head, tail = len(special.prefix), len(special.suffix)
    for at, ids in enumerate(texts):
        end = head + len(ids)
        input_ids[at, :head] = special.prefix
        input_ids[at, head:end] = ids
        input_ids[at, end:end + tail] = special.suffix
        mask[at, :end + tail] = 1
        types[at, :head] = special.prefix_types
        types[at, head:end] = special.text_type
        types[at, end:end + tail] = special.suffix_types
    return ModelInputs(input_ids, mask, types)


def load_token_counter(model_path: str | None, model_id: str) -> ModelTokenCounter:
    """The tokenizer of a sentence-transformers model folder, as a ``TokenCounter``.

    Args:
        model_path: the model folder, or None for the bundled all-MiniLM-L6-v2.
        model_id: the model's id, recorded in the chunker settings string.

    Raises:
        ConfigError: no model folder, or no readable ``tokenizer.json`` in it.
    """
    folder = resolve_model_path(model_path)
    path = folder / "tokenizer.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the tokenizer {path}: {exc}") from exc
    tokenizer = Tokenizer.from_str(json.dumps(config))
    specials = tokenizer.post_processor.num_special_tokens_to_add(False) if tokenizer.post_processor else 0
    return ModelTokenCounter(
        tokenizer,
        name=model_id,
        max_sequence_length=_max_sequence_length(folder),
        special_tokens=specials,
        additive=_is_additive(config),
        fingerprint=tokenizer_fingerprint(folder),
        lower_case=_lower_case(folder),
    )
