"""JSON that a tenant sends, decoded within bounds. Pure.

Every JSON text that comes from outside (a form field, a ``--schema`` file, a record's JSON Schema) is decoded
here: its size and its nesting depth are checked before ``json.loads`` runs, so a deeply nested value is a clear
``InputError`` and never a ``RecursionError`` (which is no ``ValueError``, and escaped the handlers as a 500).
The depth is counted by one pass over the text, without recursion.
"""

from __future__ import annotations

import json
from typing import Any

from docstream.errors import InputError

__all__ = ["MAX_JSON_BYTES", "MAX_JSON_DEPTH", "json_depth", "loads_bounded"]

MAX_JSON_BYTES = 256 * 1024
"""The most UTF-8 bytes of one JSON text a tenant sends, by default."""
MAX_JSON_DEPTH = 32
"""The deepest nesting of objects and arrays in one JSON text a tenant sends, by default."""

_OPEN = frozenset("[{")
_CLOSE = frozenset("]}")


def json_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` in ``text`` outside its strings (0 for a scalar).

    A malformed text still gets a number (brackets are counted as they come); ``json.loads`` says what is wrong.
    """
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
    return deepest


def loads_bounded(text: str | bytes, *, what: str, code: str, max_bytes: int = MAX_JSON_BYTES,
                  max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``text`` decoded as JSON, refused past ``max_bytes`` or ``max_depth``.

    Args:
        text: the JSON text (bytes are read as UTF-8).
        what: what the text is, for the message (``"--schema"``, ``"source_keys"``).
        code: the ``InputError`` code of a refusal (``prompt_invalid``, ``invalid_request``).
        max_bytes: the most UTF-8 bytes.
        max_depth: the deepest nesting of objects and arrays.

    Raises:
        InputError: with ``code``: over a bound, not UTF-8, or not JSON.
    """
    if isinstance(text, bytes):
        if len(text) > max_bytes:
            raise InputError(f"{what} is longer than {max_bytes} bytes", code=code)
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{what} is not UTF-8: {exc.reason}", code=code) from None
    elif len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise InputError(f"{what} is longer than {max_bytes} bytes", code=code)
    depth = json_depth(text)
    if depth > max_depth:
        raise InputError(f"{what} nests {depth} levels deep, more than {max_depth}", code=code)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(f"{what} is not JSON: {exc}", code=code) from None
