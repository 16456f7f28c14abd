"""The library is standard-library only: agent code imports it without Django."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_importing_the_library_loads_no_django_module():
    code = (
        "import sys, history_app.agent_history as lib\n"
        "lib.redact({'api_key': 'x'}); lib.parse({'iterations': [], 'final_response': 'ok'})\n"
        "loaded = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, env={"PATH": ""}
    )
    assert result.stdout.strip() == ""


def test_library_source_imports_nothing_outside_the_standard_library():
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    for path in (ROOT / "history_app" / "agent_history").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"
