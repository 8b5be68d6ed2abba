"""Keyset paging and the limits every store checks, written once for every backend. Pure.

Pages are read by key (``WHERE key > ? ... LIMIT ?``), never by offset: a page costs the
same however deep it is, and rows written meanwhile neither repeat nor shift a page. The
``after`` a caller passes is the last key of the page it has.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

__all__ = ["at_least_one", "keyset_pages", "keyset_rows"]

K = TypeVar("K")
T = TypeVar("T")


def at_least_one(name: str, value: int) -> None:
    """Refuse a count (a limit, a page size) below 1.

    Raises:
        ValueError: ``value`` < 1, as ``"<name> must be at least 1"``.
    """
    if value < 1:
        raise ValueError(f"{name} must be at least 1")


def keyset_pages(
    fetch: Callable[[K, int], Sequence[T]], *, start: K, key: Callable[[T], K], page_size: int
) -> Iterator[Sequence[T]]:
    """The pages ``fetch(after, page_size)`` returns, each after the last key of the page before.

    The first page is fetched after ``start``; paging stops at the first page shorter than
    ``page_size``. Nothing is fetched until the iterator is read.

    Raises:
        ValueError: page_size < 1 (raised by this call, not when the pages are read).
    """
    at_least_one("page_size", page_size)
    return _pages(fetch, start, key, page_size)


def keyset_rows(
    fetch: Callable[[K, int], Sequence[T]], *, start: K, key: Callable[[T], K], page_size: int
) -> Iterator[T]:
    """The rows of :func:`keyset_pages`, one after another.

    Raises:
        ValueError: page_size < 1 (raised by this call, not when the rows are read).
    """
    return itertools.chain.from_iterable(keyset_pages(fetch, start=start, key=key, page_size=page_size))


def _pages(fetch: Callable[[K, int], Sequence[T]], after: K, key: Callable[[T], K], page_size: int) -> Iterator[
    Sequence[T]
]:
    while True:
        page = fetch(after, page_size)
        yield page
        if len(page) < page_size:
            return
        after = key(page[-1])
