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


class _HoldsLazy(Exception):
    """Raised inside ``json.dumps`` on meeting a ``Lazy``: that value is written in pieces."""


def _key(key: Any) -> str:
    """A dict key as ``json.dumps`` writes it (it turns non-string keys into strings)."""
    if isinstance(key, str):
        return key
    if key is True or key is False or key is None or isinstance(key, int | float):
        return json.dumps(key)
    return str(key)


def iter_json(
    value: Any,
    *,
    indent: int | None = None,
    ensure_ascii: bool = True,
    default: Callable[[Any], Any] | None = None,
    chunk_chars: int = 65536,
) -> Iterator[str]:
    """``json.dumps(value, indent=…, ensure_ascii=…, default=…)`` in chunks of about
    ``chunk_chars`` characters; ``Lazy`` values are written as arrays.

    A container is written by ``json.dumps`` in one go when it can be (no ``Lazy`` inside,
    not too deep); otherwise it is opened here and its items written one by one, with an
    explicit stack instead of recursion.
    """
    item_separator = "," if indent is not None else ", "

    def no_lazy(obj: Any) -> Any:
        if isinstance(obj, Lazy):
            raise _HoldsLazy
        if default is None:
            raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")
        return default(obj)

    whole = json.JSONEncoder(indent=indent, ensure_ascii=ensure_ascii, default=no_lazy)

    def newline(level: int) -> str:
        return "" if indent is None else "\n" + " " * (indent * level)

    # One frame per open container: [its items, whether they are (key, value) pairs, its
    # level, its brackets, whether nothing is written in it yet, whether it is too deep
    # for json.dumps (its descendants then skip the attempt)].
    stack: list[list[Any]] = []

    def begin(item: Any, level: int) -> str:
        """The text of a scalar or a whole container, or "" after opening a container."""
        too_deep = bool(stack) and stack[-1][6]
        if isinstance(item, dict | list | tuple) and not too_deep:
            try:
                text = whole.encode(item)
            except _HoldsLazy:
                pass
            except RecursionError:
                too_deep = True
            else:
                return text.replace("\n", newline(level)) if indent is not None and level else text
        if isinstance(item, dict):
            stack.append([iter(item.items()), True, level, "{", "}", True, too_deep])
        elif isinstance(item, list | tuple):
            stack.append([iter(item), False, level, "[", "]", True, too_deep])
        elif isinstance(item, Lazy):
            stack.append([item.items, False, level, "[", "]", True, too_deep])
        else:
            return json.dumps(item, ensure_ascii=ensure_ascii, default=default)
        return ""

    buffer: list[str] = []
    size = 0
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
        items, keyed, level, opener, closer, empty, _ = frame
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
