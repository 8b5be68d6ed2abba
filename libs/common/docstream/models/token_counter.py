"""The contract of a tokenizer as chunking uses it: count a text's tokens as the model will. Pure.

The chunker packs chunks with it (``docstream_chunker.chunking``); ``docstream.models.tokenization`` implements it
over a model's own tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["TokenCounter"]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens the way the model's tokenizer does, without special tokens."""

    @property
    def name(self) -> str:
        """Identity of the tokenizer (part of the chunker settings string)."""
        ...

    @property
    def additive(self) -> bool:
        """True when count(a + " " + b) == count(a) + count(b) for any whitespace-free a, b."""
        ...

    @property
    def max_text_tokens(self) -> int | None:
        """Most text tokens the model takes (its max sequence length less its special tokens)."""
        ...

    def count(self, texts: Sequence[str]) -> list[int]:
        """Token count of each text."""
        ...

    def cut_points(self, text: str, max_tokens: int) -> list[int]:
        """Offsets in ``text``, at token boundaries, that cut it into pieces of at most ``max_tokens``."""
        ...
