"""Line diffs with a bound on their work.

difflib's matcher is quadratic or worse on texts whose lines repeat (lines drawn from a
hundred short values in different orders take seconds at 24 KB, growing cubically), and
every text diffed here is the sender's. So a diff is Myers' algorithm (the one git uses:
work proportional to the length times the number of lines that differ) on the lines
left once the common first and last lines are set aside, counted step by step, and
stopped when it has spent its share of the page's budget. A diff that cannot be had
within the bounds says so (``fallback``) and the page shows both sides instead.

The output is a unified diff with two lines of context, as ``difflib.unified_diff``
writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Above these, on either side, a text is not diffed line by line at all.
MAX_LINES = 10_000
MAX_CHARS = 300_000
# Steps (a diagonal followed one line, or one more edit tried) one diff may take, and a
# page's diffs together: about a second of Python at most.
DIFF_STEPS = 300_000
PAGE_STEPS = 1_000_000
CONTEXT = 2


@dataclass(frozen=True)
class DiffLine:
    css: str
    text: str


@dataclass
class Budget:
    """The steps the diffs of one page may still take."""

    steps: int = PAGE_STEPS
    spent: int = 0


@dataclass
class LineDiff:
    """A diff of two texts: its lines, or, when it could not be had within the bounds,
    none and ``fallback`` saying why (the page then shows both sides)."""

    before: str
    after: str
    before_name: str
    after_name: str
    lines: list[DiffLine] = field(default_factory=list)
    fallback: str = ""
    steps: int = 0

    def __bool__(self) -> bool:  # the texts differ
        return bool(self.lines or self.fallback)

    def __iter__(self):
        return iter(self.lines)

    def __len__(self) -> int:
        return len(self.lines)


def line_diff(
    before: str, after: str, before_name: str, after_name: str, budget: Budget | None = None
) -> LineDiff:
    """The unified diff of ``before`` and ``after``, within the bounds and ``budget``."""
    result = LineDiff(before, after, before_name, after_name)
    if before == after:
        return result
    a, b = before.splitlines(), after.splitlines()
    if max(len(a), len(b)) > MAX_LINES or max(len(before), len(after)) > MAX_CHARS:
        result.fallback = (
            f"Too large to diff line by line (more than {MAX_LINES:,} lines or {MAX_CHARS:,} "
            "characters on a side): showing both sides."
        )
        return result
    budget = budget if budget is not None else Budget()
    limit = min(DIFF_STEPS, budget.steps - budget.spent)
    opcodes, steps = _opcodes(a, b, limit) if limit > 0 else (None, 0)
    budget.spent += steps
    result.steps = steps
    if opcodes is None:
        result.fallback = (
            "Too different to diff line by line within this page's bounds "
            f"({DIFF_STEPS:,} steps a diff, {PAGE_STEPS:,} a page): showing both sides."
        )
        return result
    result.lines = list(_unified(a, b, opcodes, before_name, after_name))
    return result


def _opcodes(
    a: list[str], b: list[str], limit: int
) -> tuple[list[tuple[str, int, int, int, int]] | None, int]:
    """difflib-style opcodes turning ``a`` into ``b``, and the steps taken; None for the
    opcodes when more than ``limit`` steps would be needed (the steps taken then pass
    ``limit`` by at most the lines of the two texts: a diagonal is followed to its end)."""
    n, m = len(a), len(b)
    start = 0
    while start < n and start < m and a[start] == b[start]:
        start += 1
    end_a, end_b = n, m
    while end_a > start and end_b > start and a[end_a - 1] == b[end_b - 1]:
        end_a, end_b = end_a - 1, end_b - 1
    steps = start + (n - end_a)
    # Lines as small integers: the inner loop compares numbers, not strings.
    ids: dict[str, int] = {}
    x_lines = [ids.setdefault(line, len(ids)) for line in a[start:end_a]]
    y_lines = [ids.setdefault(line, len(ids)) for line in b[start:end_b]]
    edits, taken = _myers(x_lines, y_lines, limit - steps)
    steps += taken
    if edits is None:
        return None, steps
    codes: list[tuple[str, int, int, int, int]] = []
    if start:
        codes.append(("equal", 0, start, 0, start))
    for tag, i1, i2, j1, j2 in edits:
        codes.append((tag, i1 + start, i2 + start, j1 + start, j2 + start))
    if end_a < n:
        codes.append(("equal", end_a, n, end_b, m))
    return codes, steps


def _myers(x: list[int], y: list[int], limit: int) -> tuple[list[tuple[str, int, int, int, int]] | None, int]:
    """Myers' greedy shortest edit script, keeping each round's furthest points to walk
    back along; None when it would take more than ``limit`` steps."""
    n, m = len(x), len(y)
    if not n or not m:
        if not n and not m:
            return [], 0
        return [("replace" if n and m else "delete" if n else "insert", 0, n, 0, m)], 1
    steps = 0
    rounds: list[list[int]] = []
    previous: list[int] = []
    for d in range(n + m + 1):
        current = [0] * (d + 1)
        for i in range(d + 1):
            k = 2 * i - d
            if d == 0:
                px = 0
            elif i == 0 or (i < d and previous[i - 1] < previous[i]):
                px = previous[i]  # from diagonal k + 1: a line of y inserted
            else:
                px = previous[i - 1] + 1  # from diagonal k - 1: a line of x deleted
            py = px - k
            snake = px
            while px < n and py < m and x[px] == y[py]:
                px += 1
                py += 1
            steps += 1 + px - snake
            current[i] = px
            if steps > limit:
                return None, steps
            if px >= n and py >= m:
                rounds.append(current)
                return _walk_back(rounds, n, m), steps
        rounds.append(current)
        previous = current
    raise AssertionError("unreachable: an edit script always exists")


def _walk_back(rounds: list[list[int]], n: int, m: int) -> list[tuple[str, int, int, int, int]]:
    """The opcodes of the path Myers found, from its last point back to the start."""
    moves: list[tuple[str, int, int, int, int]] = []  # reversed
    x, y = n, m
    for d in range(len(rounds) - 1, 0, -1):
        k = x - y
        i = (k + d) // 2
        previous = rounds[d - 1]
        if i == 0 or (i < d and previous[i - 1] < previous[i]):
            prev_k = k + 1
            px = previous[i]
            mid_x, mid_y = px, px - prev_k + 1
        else:
            prev_k = k - 1
            px = previous[i - 1]
            mid_x, mid_y = px + 1, px - prev_k
        if x > mid_x:
            moves.append(("equal", mid_x, x, mid_y, y))
        if mid_x > px:
            moves.append(("delete", px, mid_x, mid_y, mid_y))
        else:
            moves.append(("insert", mid_x, mid_x, px - prev_k, mid_y))
        x, y = px, px - prev_k
    if x > 0:
        moves.append(("equal", 0, x, 0, y))
    return _merged(moves[::-1])


def _merged(moves: list[tuple[str, int, int, int, int]]) -> list[tuple[str, int, int, int, int]]:
    """Runs of deletions and insertions as one change each (``-`` lines, then ``+``)."""
    codes: list[tuple[str, int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in moves:
        if codes and (tag == "equal") == (codes[-1][0] == "equal"):
            last = codes[-1]
            codes[-1] = (last[0], last[1], i2, last[3], j2)
        else:
            codes.append((tag, i1, i2, j1, j2))
    out = []
    for tag, i1, i2, j1, j2 in codes:
        if tag != "equal":
            tag = "replace" if i2 > i1 and j2 > j1 else "delete" if i2 > i1 else "insert"
        out.append((tag, i1, i2, j1, j2))
    return out


def _grouped(codes: list[tuple[str, int, int, int, int]], n: int = CONTEXT):
    """The changes in hunks with ``n`` lines of context (as difflib groups them)."""
    codes = list(codes) or [("equal", 0, 1, 0, 1)]
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)
    group = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * n:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _range(start: int, stop: int) -> str:
    beginning, length = start + 1, stop - start
    if length == 1:
        return str(beginning)
    if not length:
        beginning -= 1
    return f"{beginning},{length}"


def _unified(a: list[str], b: list[str], codes, before_name: str, after_name: str):
    started = False
    for group in _grouped(codes):
        if not started:
            started = True
            yield DiffLine("hdr", f"--- {before_name}")
            yield DiffLine("hdr", f"+++ {after_name}")
        first, last = group[0], group[-1]
        yield DiffLine("hunk", f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (DiffLine("ctx", " " + line) for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from (DiffLine("del", "-" + line) for line in a[i1:i2])
            if tag in ("replace", "insert"):
                yield from (DiffLine("add", "+" + line) for line in b[j1:j2])
