"""Token-bounded chunks of a document's extracted text. Pure: no I/O, no clock.

The document's extracted text is its pages' texts joined by ``PAGE_SEPARATOR`` (a blank
line); chunk char spans are offsets into that string, so ``text[char_start:char_end]`` is the
chunk's text. Inside a page, paragraphs are separated by blank lines.

Packing (docs/chunking.md has the full rule): the text is split into paragraphs, sentences
and words (runs of non-space characters, never cut). Chunks are packed greedily up to the
token budget; a chunk ends at the latest paragraph end that keeps it at least half full,
else at the latest sentence end that does, else after the last word that fits. The next
chunk starts ``overlap_tokens`` back: on whole trailing sentences when they give at least
half the overlap, else on trailing words. A single word longer than the budget (a long URL,
a run of CJK text without spaces) is the one case cut inside a word, at token boundaries.

Tables (``PageText.tables``, found by extraction) are chunks of their own, ``kind`` ``table``:
each is split by ``docstream.tables.split_table`` into Markdown parts of whole rows, the header
row repeated, and the parts stand in the document's text where the table sits (each a paragraph
of its own), so ``text[char_start:char_end]`` holds for them too. Text chunks never take a
table's text, and no overlap crosses a table: the text before it and the text after it are
packed apart. A document without tables is chunked as it always was.

Tokens are counted once per word and summed. That is exact for tokenizers whose
pre-tokenizer splits on whitespace (BERT WordPiece, the default model): ``TokenCounter.additive``.
For other tokenizers every chunk is counted again and the packing repeats with a smaller
budget until every chunk fits.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate, pairwise

from docstream.errors import InputError
from docstream.models.token_counter import TokenCounter
from docstream.records import ChunkKind
from docstream.tables import HEADERS_VERSION, TABLES_VERSION, PageTable, TablePart, split_table

__all__ = [
    "CHUNKER_VERSION",
    "FURNITURE_VERSION",
    "PAGE_SEPARATOR",
    "Chunk",
    "ChunkKind",
    "ChunkingConfig",
    "Edge",
    "Heading",
    "PageText",
    "TokenCounter",
    "chunk_document",
    "chunker_settings",
    "effective_budget",
]

CHUNKER_VERSION = "1"
FURNITURE_VERSION = "1"
"""The rule of ``docstream_chunker.furniture``: changes whenever what it takes out changes."""
PAGE_SEPARATOR = "\n\n"

# Characters Python's str.split() treats as whitespace but BERT's normalizer does not; they
# become spaces (same length, so offsets hold) and per-word counts stay additive.
_ODD_SPACES = str.maketrans({c: " " for c in "\x0b\x0c\x1c\x1d\x1e\x1f\x85\u2028\u2029"})
# a paragraph: lines with text, up to a blank line; it starts and ends on a non-space
_PARAGRAPH = re.compile(r"\S(?:[^\n]*\S)?(?:[^\S\n]*\n[^\S\n]*\S(?:[^\n]*\S)?)*")
_SENTENCE_END = re.compile("[.!?\u2026\u3002\uff01\uff1f]+[\"')\\]\u00bb\u201d\u2019]*(?=\\s)")
_ODD_SPACE = re.compile("[\x0b\x0c\x1c-\x1f\x85\u2028\u2029]")
_NON_SPACE = re.compile(r"\S")
_WORD = re.compile(r"\S+")
_MAX_REPACKS = 8


@dataclass(frozen=True, slots=True)
class Heading:
    """A section heading found on a page.

    Attributes:
        offset: where the heading starts in the page's text (0 when it is not in the text).
        title: the heading text.
    """

    offset: int
    title: str


@dataclass(frozen=True, slots=True)
class Edge:
    """A short paragraph in a page's top or bottom band: a running head, a page number or a footer, where it repeats
    (``docstream_chunker.furniture``).

    Attributes:
        text: the paragraph as it stands in the page's text.
        top: in the top band (else the bottom one).
        y: its top, in points from the top of the page.
    """

    text: str
    top: bool
    y: float


@dataclass(frozen=True, slots=True)
class PageText:
    """One page's extracted text, paragraphs separated by blank lines.

    Attributes:
        number: 1-based page number.
        text: the page's text (its tables' text left out).
        headings: headings that start on this page, by offset.
        tables: the page's tables, each placed by its ``offset`` into ``text``.
        edges: the text layer's short paragraphs in the page's top and bottom bands, which may be page furniture.
        furniture: the paragraphs taken out of ``text`` as page furniture (``docstream_chunker.furniture``).
    """

    number: int
    text: str
    headings: tuple[Heading, ...] = ()
    tables: tuple[PageTable, ...] = ()
    edges: tuple[Edge, ...] = ()
    furniture: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Chunk:
    """One token-bounded chunk.

    Attributes:
        index: 0-based position in the document.
        text: ``document_text[char_start:char_end]``.
        page_start: 1-based page of the first character.
        page_end: 1-based page of the last character.
        char_start: offset of the first character in the document's extracted text.
        char_end: offset one past the last character.
        token_count: tokens by the model tokenizer, without special tokens.
        heading: the section heading in force at ``char_start``, if any.
        page_breaks: offsets in the document's extracted text where the chunk's pages after
            ``page_start`` begin (one per page, ``page_start + 1`` to ``page_end``; a page number
            missing from the pages begins where the next one does); empty for a one-page chunk. The
            page of an offset ``o`` in the chunk is ``page_start + bisect_right(page_breaks, o)``.
        kind: ``text``, or ``table``: the chunk is one part of a table, its text the part's Markdown.
        table: the table part (``kind`` ``table``), else None.
        token_ids: the text's token ids (``ModelTokenCounter.token_ids``), when carried; else empty.
    """

    index: int
    text: str
    page_start: int
    page_end: int
    char_start: int
    char_end: int
    token_count: int
    heading: str | None = None
    page_breaks: tuple[int, ...] = ()
    kind: ChunkKind = "text"
    table: TablePart | None = None
    token_ids: bytes = b""


@dataclass(frozen=True, slots=True)
class ChunkingConfig:
    """How big chunks are.

    Attributes:
        max_tokens: most text tokens in a chunk (capped further by the model, see ``effective_budget``).
        overlap_tokens: tokens a chunk repeats from the end of the previous one (about; whole words).

    Raises:
        InputError: ``invalid_options`` when max_tokens < 1 or overlap is not in [0, max_tokens).
    """

    max_tokens: int = 256
    overlap_tokens: int = 32

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise InputError(f"chunk max_tokens must be at least 1, got {self.max_tokens}", code="invalid_options")
        if not 0 <= self.overlap_tokens < self.max_tokens:
            raise InputError(
                f"chunk overlap_tokens must be in [0, {self.max_tokens}), got {self.overlap_tokens}",
                code="invalid_options",
            )


def effective_budget(config: ChunkingConfig, counter: TokenCounter) -> int:
    """Most text tokens per chunk: ``max_tokens``, capped so the model never truncates a chunk.

    With all-MiniLM-L6-v2 (max_seq_length 256, [CLS] and [SEP]) the cap is 254.
    """
    cap = counter.max_text_tokens
    return config.max_tokens if cap is None else max(1, min(config.max_tokens, cap))


def chunker_settings(
    config: ChunkingConfig, counter: TokenCounter, *, tables: bool = False, furniture: bool = False,
    continued: bool = False, headers: bool = False,
) -> str:
    """The canonical settings string that goes into every chunk_id.

    Args:
        config: chunk size and overlap.
        counter: the model tokenizer's counter.
        tables: the document has table chunks: ``;tables=v<TABLES_VERSION>`` is added, so its chunk
            ids differ from those its text alone had (documents without tables keep theirs).
        furniture: page furniture left the document's text: ``;furniture=v<FURNITURE_VERSION>`` is
            added, for the same reason (documents without furniture keep their ids).
        continued: a table continued on the next page was joined into one (``continuation``):
            ``;continued=v1`` is added, for the same reason.
        headers: a table has a header of more than one row (``docstream.tables.header_rows``):
            ``;headers=v<HEADERS_VERSION>`` is added, for the same reason.
    """
    marker = f";tables=v{TABLES_VERSION}" if tables else ""
    if continued:
        marker += ";continued=v1"
    if headers:
        marker += f";headers=v{HEADERS_VERSION}"
    if furniture:
        marker += f";furniture=v{FURNITURE_VERSION}"
    return (
        f"chunker=v{CHUNKER_VERSION};max_tokens={config.max_tokens};overlap={config.overlap_tokens};"
        f"budget={effective_budget(config, counter)};tokenizer={counter.name}{marker}"
    )


@dataclass(frozen=True, slots=True)
class _TableSpan:
    """One table part in the document's text: its span, tokens, record, and the text words before it."""

    start: int
    end: int
    tokens: int
    part: TablePart
    word: int
    pages: tuple[int, int] | None = None
    """The first and last page of the part's rows, for a table continued across pages (None: the table's page)."""


_Segment = tuple[int, int, str] | _TableSpan
"""A page's text piece (its offset in the page's text, in the document's text, the piece) or a table part."""


@dataclass
class _Index:
    """Paragraphs and words of the whole document as flat arrays; sentences and word offsets on demand.

    Per page only paragraphs are found and words counted: the packer asks for sentence
    starts and word offsets of the few paragraphs where chunks begin or end.
    """

    parts: list[str] = field(default_factory=list)
    length: int = 0
    text: str = ""
    page_offsets: list[int] = field(default_factory=list)
    page_numbers: list[int] = field(default_factory=list)
    cum: array[int] = field(default_factory=lambda: array("q", [0]))
    para_word: array[int] = field(default_factory=lambda: array("q"))
    para_start: array[int] = field(default_factory=lambda: array("q"))
    para_end: array[int] = field(default_factory=lambda: array("q"))
    heading_offsets: list[int] = field(default_factory=list)
    heading_titles: list[str] = field(default_factory=list)
    tables: list[_TableSpan] = field(default_factory=list)
    _details: dict[int, tuple[list[int], list[int], list[int]]] = field(default_factory=dict)

    @property
    def words(self) -> int:
        return len(self.cum) - 1

    def add_page(self, page: PageText, counter: TokenCounter, budget: int) -> None:
        if self.page_offsets:
            self.parts.append(PAGE_SEPARATOR)
            self.length += len(PAGE_SEPARATOR)
        base = self.length
        text = page.text
        if _ODD_SPACE.search(text):
            text = text.translate(_ODD_SPACES)
        self.page_offsets.append(base)
        self.page_numbers.append(page.number)
        segments: list[_Segment]
        if page.tables:
            segments = self._place_tables(text, page.tables, counter, budget, base)
        else:
            self.parts.append(text)
            self.length += len(text)
            segments = [(0, base, text)]
        for heading in sorted(page.headings, key=lambda h: h.offset):
            self.heading_offsets.append(_moved(segments, min(max(heading.offset, 0), len(text)), base))
            self.heading_titles.append(heading.title)
        words: list[str] = []
        first_word = self.words
        for segment in segments:
            if isinstance(segment, _TableSpan):
                self.tables.append(replace(segment, word=first_word + len(words)))
                continue
            dst, piece = segment[1], segment[2]
            for match in _PARAGRAPH.finditer(piece):
                self.para_word.append(first_word + len(words))
                self.para_start.append(dst + match.start())
                self.para_end.append(dst + match.end())
                words.extend(match.group().split())
        if words:
            running = accumulate(counter.count(words), initial=self.cum[-1])
            next(running)
            self.cum.extend(running)

    def _place_tables(
        self, text: str, tables: Sequence[PageTable], counter: TokenCounter, budget: int, base: int
    ) -> list[_Segment]:
        """Append the page's text with its tables' parts where they sit; the segments, in order."""
        segments: list[_Segment] = []
        pos = 0
        for table in sorted(tables, key=lambda t: t.offset):
            cut = min(max(table.offset, pos), len(text))
            self._append_text(segments, text, pos, cut, base)
            for markdown, tokens, part in split_table(table, budget, counter.count):
                start = self._append(markdown, base)
                rows = table.row_pages[part.row_start : part.row_end]
                pages = (min(rows), max(rows)) if rows else None
                segments.append(_TableSpan(start, self.length, tokens, part, 0, pages))
            pos = cut
        self._append_text(segments, text, pos, len(text), base)
        return segments

    def _append_text(self, segments: list[_Segment], text: str, start: int, end: int, base: int) -> None:
        piece = text[start:end]
        if piece.strip():
            segments.append((start, self._append(piece, base), piece))

    def _append(self, piece: str, base: int) -> int:
        """Append a piece of the page starting at ``base``, after a blank line unless the page so far ends in one."""
        if self.length > base and not self.parts[-1].endswith("\n\n"):
            self.parts.append("\n\n")
            self.length += 2
        start = self.length
        self.parts.append(piece)
        self.length += len(piece)
        return start

    def finish(self) -> None:
        self.text = "".join(self.parts)
        self.parts = []

    def paragraph_of(self, word: int) -> int:
        return bisect_right(self.para_word, word) - 1

    def paragraph_end_word(self, paragraph: int) -> int:
        return self.para_word[paragraph + 1] if paragraph + 1 < len(self.para_word) else self.words

    def detail(self, paragraph: int) -> tuple[list[int], list[int], list[int]]:
        """First word index, start and end offsets of each sentence of a paragraph (cached, forward only)."""
        found = self._details.get(paragraph)
        if found is None:
            for old in [p for p in self._details if p < paragraph - 2]:
                del self._details[old]
            text, end = self.text, self.para_end[paragraph]
            pos, word = self.para_start[paragraph], self.para_word[paragraph]
            words, starts, ends = [], [], []
            for match in _SENTENCE_END.finditer(text, pos, end):
                words.append(word)
                starts.append(pos)
                ends.append(match.end())
                word += len(text[pos : match.end()].split())
                following = _NON_SPACE.search(text, match.end(), end)
                pos = following.start() if following is not None else end
            words.append(word)
            starts.append(pos)
            ends.append(end)
            found = self._details[paragraph] = (words, starts, ends)
        return found

    def word_start(self, word: int) -> int:
        p = self.paragraph_of(word)
        if self.para_word[p] == word:
            return self.para_start[p]
        words, starts, ends = self.detail(p)
        k = bisect_right(words, word) - 1
        if words[k] == word:
            return starts[k]
        return _nth_word(self.text, starts[k], ends[k], word - words[k]).start()

    def word_end(self, word: int) -> int:
        p = self.paragraph_of(word)
        following = self.paragraph_end_word(p)
        if following == word + 1:
            return self.para_end[p]
        words, starts, ends = self.detail(p)
        k = bisect_right(words, word) - 1
        if (words[k + 1] if k + 1 < len(words) else following) == word + 1:
            return ends[k]
        return _nth_word(self.text, starts[k], ends[k], word - words[k]).end()

    def sentence_starts(self, word: int) -> list[int]:
        """Sentence-start word indices of the paragraph holding ``word``."""
        return self.detail(self.paragraph_of(word))[0]


def _moved(segments: Sequence[_Segment], offset: int, base: int) -> int:
    """Where ``offset`` of the page's text lies in the document's text (the page starts at ``base``)."""
    moved = base
    for segment in segments:
        if isinstance(segment, _TableSpan):
            continue
        if segment[0] > offset:
            break
        moved = segment[1] + min(offset - segment[0], len(segment[2]))
    return moved


def _nth_word(text: str, start: int, end: int, n: int) -> re.Match[str]:
    for i, match in enumerate(_WORD.finditer(text, start, end)):
        if i == n:
            return match
    raise AssertionError("word index outside its sentence")  # pragma: no cover - index invariant


def chunk_document(pages: Iterable[PageText], config: ChunkingConfig, counter: TokenCounter) -> list[Chunk]:
    """Split a document's pages into token-bounded chunks.

    Args:
        pages: the pages in order (consumed once; may be a generator).
        config: chunk size and overlap.
        counter: the model tokenizer's counter.

    Returns:
        The chunks in order; empty when the pages hold no words.

    Raises:
        InputError: ``invalid_options`` when the overlap is not below the model-capped budget.
    """
    budget = effective_budget(config, counter)
    if config.overlap_tokens >= budget:
        raise InputError(
            f"chunk overlap_tokens {config.overlap_tokens} must be below the model's budget {budget}",
            code="invalid_options",
        )
    index = _Index()
    for page in pages:
        index.add_page(page, counter, budget)
    if index.words == 0 and not index.tables:
        return []
    index.finish()
    limit = budget
    for _ in range(_MAX_REPACKS):
        spans = _pack_runs(index, limit, config.overlap_tokens, counter)
        if counter.additive:
            return _chunks(index, spans)
        exact = counter.count([index.text[a:b] for a, b, _ in spans]) if spans else []
        over = max((n - budget for n in exact), default=0)
        if over <= 0:
            return _chunks(index, [(a, b, n) for (a, b, _), n in zip(spans, exact, strict=True)])
        limit = max(1, limit - over)
    raise InputError(f"tokenizer {counter.name} gives no packing within {budget} tokens", code="invalid_options")


def _pack_runs(index: _Index, budget: int, overlap: int, counter: TokenCounter) -> list[tuple[int, int, int]]:
    """The text chunks' spans: the words between two tables are packed on their own (no overlap crosses a table)."""
    if not index.tables:
        return _pack(index, budget, overlap, counter)
    spans: list[tuple[int, int, int]] = []
    lo = 0
    for table in index.tables:
        if table.word > lo:
            spans.extend(_pack(index, budget, overlap, counter, lo, table.word))
            lo = table.word
    spans.extend(_pack(index, budget, overlap, counter, lo, index.words))
    return spans


def _pack(
    index: _Index, budget: int, overlap: int, counter: TokenCounter, lo: int = 0, hi: int | None = None
) -> list[tuple[int, int, int]]:
    """Char spans and token counts of the chunks of words ``lo`` to ``hi`` (None: all), in order."""
    cum = index.cum
    words = index.words if hi is None else hi
    spans: list[tuple[int, int, int]] = []
    start = fresh = lo
    while fresh < words:
        end_max = bisect_right(cum, cum[start] + budget, lo=start) - 1
        if end_max <= fresh:
            if start < fresh:  # the overlap leaves no room for the next word: drop the overlap
                start = fresh
                continue
            spans.extend(_split_word(index.word_start(fresh), index.word_end(fresh), index.text, budget, counter))
            start = fresh = fresh + 1
            continue
        end = words if end_max >= words else _cut(index, start, fresh, end_max, budget)
        spans.append((index.word_start(start), index.word_end(end - 1), cum[end] - cum[start]))
        fresh = end
        start = _overlap_start(index, start, end, overlap)
    return spans


def _cut(index: _Index, start: int, fresh: int, end_max: int, budget: int) -> int:
    """The latest paragraph start, else sentence start, in (fresh, end_max] that keeps the chunk half full."""
    floor = max(index.cum[start] + budget // 2, index.cum[fresh] + 1)
    i = bisect_right(index.para_word, end_max) - 1
    if i >= 0 and index.para_word[i] > fresh and index.cum[index.para_word[i]] >= floor:
        return index.para_word[i]
    # paragraph starts are sentence starts too, and come before the sentences of the paragraph
    # holding end_max: only that paragraph's sentences can pass where its start did not
    sentences = index.sentence_starts(end_max)
    i = bisect_right(sentences, end_max) - 1
    if i >= 0 and sentences[i] > fresh and index.cum[sentences[i]] >= floor:
        return sentences[i]
    return end_max


def _overlap_start(index: _Index, start: int, end: int, overlap: int) -> int:
    if overlap <= 0:
        return end
    cum = index.cum
    lo = bisect_left(cum, cum[end] - overlap, lo=start + 1, hi=end)
    if lo >= end:
        return end
    sentences = index.sentence_starts(lo)
    i = bisect_left(sentences, lo)
    p = index.paragraph_of(lo)
    sentence = sentences[i] if i < len(sentences) else index.paragraph_end_word(p)
    if sentence < end and 2 * (cum[end] - cum[sentence]) >= overlap:
        return sentence
    return lo


def _split_word(start: int, end: int, text: str, budget: int, counter: TokenCounter) -> list[tuple[int, int, int]]:
    """Pieces of one over-long word, cut at token boundaries, each counted exactly."""
    limit = budget
    for _ in range(_MAX_REPACKS):
        cuts = [start + c for c in counter.cut_points(text[start:end], limit) if 0 < c < end - start]
        bounds = [start, *sorted(set(cuts)), end]
        pieces = list(pairwise(bounds))
        counts = counter.count([text[a:b] for a, b in pieces])
        over = max(counts) - budget
        if over <= 0:
            return [(a, b, n) for (a, b), n in zip(pieces, counts, strict=True)]
        limit = max(1, limit - over)
    raise InputError(f"tokenizer {counter.name} cannot cut a word within {budget} tokens", code="invalid_options")


def _page_breaks(index: _Index, first: int, last: int) -> tuple[int, ...]:
    """Where pages ``page_start + 1``..``page_end`` of a chunk spanning index pages ``first``..``last`` begin.

    A page number missing between two pages begins (empty) where the next page does, so there is one
    offset per page number.
    """
    numbers, offsets = index.page_numbers, index.page_offsets
    return tuple(offsets[j] for j in range(first + 1, last + 1) for _ in range(max(numbers[j] - numbers[j - 1], 0)))


def _chunks(index: _Index, spans: list[tuple[int, int, int]]) -> list[Chunk]:
    """The chunks of the text spans and the table parts, in document order."""
    placed: list[tuple[int, int, int, TablePart | None, tuple[int, int] | None]] = [
        (a, b, n, None, None) for a, b, n in spans]
    if index.tables:
        placed.extend((t.start, t.end, t.tokens, t.part, t.pages) for t in index.tables)
        placed.sort(key=lambda span: span[0])
    chunks = []
    offsets = index.page_offsets
    for i, (start, end, tokens, part, pages) in enumerate(placed):
        h = bisect_right(index.heading_offsets, start) - 1
        first, last = bisect_right(offsets, start) - 1, bisect_right(offsets, end - 1) - 1
        page_start, page_end = index.page_numbers[first], index.page_numbers[last]
        if pages is not None:  # a continued table's part: the pages its rows are on
            page_start, page_end = pages
        chunks.append(
            Chunk(
                index=i,
                text=index.text[start:end],
                page_start=page_start,
                page_end=page_end,
                char_start=start,
                char_end=end,
                token_count=tokens,
                heading=index.heading_titles[h] if h >= 0 else None,
                page_breaks=_page_breaks(index, first, last) if pages is None else (),
                kind="text" if part is None else "table",
                table=part,
            )
        )
    return chunks
