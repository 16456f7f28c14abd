"""The Python examples of the library's reference page (history_app/docs/library.md).

tests/test_readme.py runs them under pytest. `.ci/run` also runs this file as a script
with the Python of a bare virtual environment that holds only the library distribution
(agent-history-lib): then it checks that the library comes from that environment, not
from this checkout, and that Django cannot be imported, and runs every example. Standard
library only, so that it runs there.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARY_PAGE = ROOT / "history_app" / "docs" / "library.md"


def library_examples(page: str | None = None) -> list[str]:
    """Every ```python block of the library's page."""
    text = LIBRARY_PAGE.read_text(encoding="utf-8") if page is None else page
    return re.findall(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)


def main() -> int:
    import history_app.agent_history as library

    location = Path(library.__file__).resolve()
    print(f"history_app.agent_history {library.__version__} from {location.parent}")
    if location.is_relative_to(ROOT):
        print(f"the library was imported from the checkout ({ROOT}), not installed", file=sys.stderr)
        return 1
    try:
        import django  # noqa: F401
    except ModuleNotFoundError:
        print("import django: ModuleNotFoundError, as it should")
    else:
        print("Django is importable next to the library alone", file=sys.stderr)
        return 1
    examples = library_examples()
    # The examples that send to the dashboard read their token from TOKEN; with no server
    # listening they keep the run in their spool, which is all they need here.
    os.environ.setdefault("TOKEN", "aht_no-server-here")
    for number, code in enumerate(examples, 1):
        # The HttpSink example spools into the user's cache folder: keep it in a temporary one.
        with tempfile.TemporaryDirectory() as cache, contextlib.redirect_stdout(io.StringIO()):
            os.environ["XDG_CACHE_HOME"] = cache
            exec(compile(code, f"library.md (example {number})", "exec"), {"__name__": "readme_example"})
        print(f"ok {number}: {code.splitlines()[0]}")
    print(f"{len(examples)} examples of the library's page ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
