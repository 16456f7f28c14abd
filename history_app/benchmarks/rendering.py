"""Rendering benchmark: the worst time per KB of Markdown rendering on an adversarial
corpus, at 1, 4, 16, 64 and 256 KB.

    python -m history_app.benchmarks.rendering [--sizes 1,4,16,64,256] [--timeout 20]

Each text is rendered a few times and the best time kept. Prints a table of
milliseconds per KB (text × size), then per size the worst figure and the texts that fell
back to escaped plain text, and the ratio of the worst at 256 KB to the worst at 16 KB.
The budget is the configured one (``HISTORY_MARKDOWN_BUDGET_MS``); set it in the
environment to see how long the texts would take without it. ``--timeout`` stops a single rendering that runs
longer (by an alarm signal, so that the old quadratic renderer can be measured at all);
such a text counts as taking the timeout.
Target (issue #10): the worst ms per KB at 256 KB at most twice that at 16 KB.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Callable


def _repeat(unit: str) -> Callable[[int], str]:
    return lambda size: unit * (size // len(unit))


def _lines(line: Callable[[int], str]) -> Callable[[int], str]:
    """Lines ``line(0)``, ``line(1)``, … until ``size`` characters: deeper and deeper nesting."""

    def build(size: int) -> str:
        parts, total, depth = [], 0, 0
        while total < size:
            parts.append(line(depth) + "\n")
            total += len(parts[-1])
            depth += 1
        return "".join(parts)[:size]

    return build


def _nested(line: Callable[[int], str], depth: int) -> Callable[[int], str]:
    """``depth`` nesting levels, then the text repeated until ``size`` characters."""

    def build(size: int) -> str:
        block = "".join(line(level) + "\n" for level in range(depth)) + "\n"
        return (block * (size // len(block) + 1))[:size]

    return build


CORPUS: dict[str, Callable[[int], str]] = {
    "[ run": _repeat("["),
    "[a]( run": _repeat("[a]("),
    "![ run": _repeat("!["),
    "[[[…]]] nested": lambda size: "[" * (size // 2) + "]" * (size // 2),
    "[a]( then ) run": lambda size: "[a](" * (size // 8) + ")" * (size // 2),
    "[a][ run": _repeat("[a]["),
    "( after a link": lambda size: "[a](" + "(" * (size - 4),
    "* run": _repeat("*"),
    "*a run": _repeat("*a "),
    "**a_ run": _repeat("**a_"),
    "_ run": _repeat("_ "),
    "` run": _repeat("`"),
    "`a`` run": _repeat("`a``"),
    "< run": _repeat("<"),
    "<a> run": _repeat("<a>"),
    "<div> lines": _repeat("<div>\n"),
    "<a href=' run": _repeat("<a href='"),
    "<!-- run": _repeat("<!--"),
    "<http:// run": _repeat("<http://"),
    "&amp; run": _repeat("&amp;"),
    "&# run": _repeat("&#"),
    "\\[ run": _repeat("\\["),
    "| table": lambda size: "| a | b |\n|---|---|\n" + "| a " * (size // 4),
    "|` table row": lambda size: "|a|b|\n|-|-|\n" + "|`x" * (size // 3),
    "| table rows": lambda size: "|a|\n|-|\n" + "|b|\n" * (size // 4),
    "| tables": _repeat("|a|\n|-|\n|b|\n\n"),
    "``` lines": _repeat("```\n"),
    "list 2-space deep": _lines(lambda depth: "  " * depth + "- a"),
    "list 4-space deep": _lines(lambda depth: "    " * min(depth, 600) + "- a"),
    "list 600 deep": _nested(lambda depth: "    " * depth + "1. a", 600),
    "quote deep": _lines(lambda depth: ">" * (depth + 1) + " a"),
    "quote 600 deep": _nested(lambda depth: "> " * depth + "a", 600),
    "> run": _repeat(">"),
}

SIZES_KB = (1, 4, 16, 64, 256)


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout


def time_one(render, text: str, *, timeout: float, repeat: int) -> tuple[float, str]:
    """Best seconds of ``repeat`` renderings, and the rendered HTML (or "timeout")."""
    best, html = float("inf"), ""
    for _ in range(repeat):
        signal.setitimer(signal.ITIMER_REAL, timeout)
        start = time.perf_counter()
        try:
            html = render(text)
        except _Timeout:
            return timeout, "timeout"
        except RecursionError:
            return time.perf_counter() - start, "RecursionError"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        best = min(best, time.perf_counter() - start)
    return best, html


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default=",".join(map(str, SIZES_KB)), help="sizes in KB")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds before one rendering is stopped")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "history_app.settings")
    import django

    django.setup()
    from history_app.reading.rendering import FALLBACK_CLASS, render_markdown

    signal.signal(signal.SIGALRM, _alarm)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        "ms per KB (best of", args.repeat, "); F = fell back to escaped text, T = timeout, R = RecursionError"
    )
    print(f"{'text':<20}" + "".join(f"{kb:>9} KB" for kb in sizes), flush=True)
    worst = dict.fromkeys(sizes, (0.0, ""))
    fallbacks: dict[int, list[str]] = {kb: [] for kb in sizes}
    for name, build in CORPUS.items():
        cells = []
        for kb in sizes:
            seconds, html = time_one(
                render_markdown, build(kb * 1024), timeout=args.timeout, repeat=args.repeat
            )
            mark = {"timeout": "T", "RecursionError": "R"}.get(
                html, "F" if FALLBACK_CLASS in html[:200] else " "
            )
            if mark != " ":
                fallbacks[kb].append(f"{name} ({mark})")
            worst[kb] = max(worst[kb], (seconds * 1000 / kb, name))
            cells.append(f"{seconds * 1000 / kb:10.2f}{mark}")
        print(f"{name:<20}" + "".join(cells), flush=True)
    for kb in sizes:
        shown = ", ".join(fallbacks[kb]) or "none"
        print(f"{kb:>4} KB: worst {worst[kb][0]:.2f} ms/KB ({worst[kb][1]}); not rendered: {shown}")
    if 16 in worst and 256 in worst:
        if any(name.endswith("(T)") for name in fallbacks[16]):
            ratio = "unmeasurable, texts of 16 KB already hit the timeout"
        else:
            ratio = f"{worst[256][0] / worst[16][0]:.2f}"
        print(f"ratio of the worst ms/KB, 256 KB / 16 KB: {ratio} (target ≤ 2)")


if __name__ == "__main__":
    main()
