"""The model's tokenizer as a ``TokenCounter``: the ``tokenizers`` library, no torch.

``load_token_counter(model_path, model_id)`` reads ``tokenizer.json`` (and the model's
``max_seq_length``) from the sentence-transformers folder that ``docstream.models.files`` resolves:
the bundled all-MiniLM-L6-v2 unless a path is given. Truncation and padding stored in the
file are switched off: counts are of the whole text.

Counting is the chunker's hot path, so single words are cached (bounded) and misses are
encoded in one ``encode_batch_fast`` call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from docstream.errors import ConfigError
from docstream.models.files import resolve_model_path
from docstream.models.token_counter import TokenCounter

__all__ = ["ModelTokenCounter", "TokenCounter", "load_token_counter"]

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
    ) -> None:
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
    )
