"""JSON text written piece by piece, without recursion, the same text as ``json.dumps``.

Two things ``json.dumps`` cannot do: write a value nested deeper than Python's recursion
limit allows (a tool's parameters stored before the ingest depth limit may be hundreds of
levels deep), and write an array whose items are still being read from a database
(``Lazy``), so an export of a run with 100,000 tool calls goes out as it is read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any


class Lazy:
    """A JSON array whose items come from an iterable, read once, while it is written."""

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = iter(items)


def _key(key: Any) -> str:
    """A dict key as ``json.dumps`` writes it (it turns non-string keys into strings)."""
    if isinstance(key, str):
        return key
    if key is True or key is False or key is None:
        return json.dumps(key)
    return json.dumps(key) if isinstance(key, int | float) else str(key)


def iter_json(
    value: Any,
    *,
    indent: int | None = None,
    ensure_ascii: bool = True,
    default: Callable[[Any], Any] | None = None,
    chunk_chars: int = 65536,
) -> Iterator[str]:
    """``json.dumps(value, indent=…, ensure_ascii=…, default=…)`` in chunks of about
    ``chunk_chars`` characters; ``Lazy`` values are written as arrays."""
    item_separator = "," if indent is not None else ", "
    buffer: list[str] = []
    size = 0
    # One frame per open container: its items, whether they are (key, value) pairs, its
    # nesting level, its brackets, and whether nothing has been written into it yet.
    stack: list[list[Any]] = []

    def newline(level: int) -> str:
        return "" if indent is None else "\n" + " " * (indent * level)

    def begin(item: Any, level: int) -> str:
        """Open a container (written once its first item is known) or write a scalar."""
        if isinstance(item, dict):
            stack.append([iter(item.items()), True, level, "{", "}", True])
        elif isinstance(item, list | tuple):
            stack.append([iter(item), False, level, "[", "]", True])
        elif isinstance(item, Lazy):
            stack.append([item.items, False, level, "[", "]", True])
        else:
            return json.dumps(item, ensure_ascii=ensure_ascii, default=default)
        return ""

    piece = begin(value, 0)
    while True:
        if piece:
            buffer.append(piece)
            size += len(piece)
            if size >= chunk_chars:
                yield "".join(buffer)
                buffer, size = [], 0
        if not stack:
            break
        frame = stack[-1]
        items, keyed, level, opener, closer, empty = frame
        item = next(items, _END)
        if item is _END:
            stack.pop()
            piece = opener + closer if empty else newline(level) + closer
            continue
        piece = (opener if empty else item_separator) + newline(level + 1)
        frame[5] = False
        if keyed:
            key, item = item
            piece += json.dumps(_key(key), ensure_ascii=ensure_ascii) + ": "
        piece += begin(item, level + 1)
    if buffer:
        yield "".join(buffer)


_END = object()


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps`` for values of any depth."""
    return "".join(iter_json(value, **options))
