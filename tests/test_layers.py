"""The layers of the code, written down and held against every import (issue #35).

From the bottom: the library (``agent_history``, the standard library only), the models,
the store (what reads and writes share: rows <-> records, kept counts, search, provenance,
locks), the services (intake's writer, reading's selectors, upkeep, access), and the
edge: the HTTP views and endpoints, the admin, the management commands, the URL map and
the settings. A module may import its own layer or one below, never one above; the import
graph has no circle; and no module imports another module's private (underscore) name.

Every import counts, a function's deferred ``import`` too: deferring an import hides a
circle from Python, not from the design. The test reads the source with ``ast``; nothing
is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parent.parent / "history_app"

LIBRARY, MODELS, STORE, SERVICES, EDGE = range(5)
NAMES = {LIBRARY: "library", MODELS: "models", STORE: "store", SERVICES: "services", EDGE: "edge"}

# The edge: modules that speak HTTP, the command line or Django's configuration. Every
# other module of intake/, reading/, upkeep/ and access/ is a service.
EDGE_MODULES = {
    "history_app.urls",
    "history_app.admin",
    "history_app.settings",
    "history_app.wsgi",
    "history_app.asgi",
    "history_app.apps",
    "history_app.errors",
    "history_app.middleware",
    "history_app.reading.views",
    "history_app.reading.annotations_api",
    # The Jinja2 engine's environment, named by settings.TEMPLATES, shares the template
    # filters of templatetags/: configuration of the edge, like the templates themselves.
    "history_app.reading.jinja",
    "history_app.access.project_pages",
    "history_app.access.lockout",
    "history_app.intake.api",
    "history_app.intake.traces",
}
EDGE_PACKAGES = (
    "history_app.management",
    "history_app.templatetags",
    "history_app.demo",
    "history_app.formats",  # Django's FORMAT_MODULE_PATH
)
SERVICE_PACKAGES = ("history_app.intake", "history_app.reading", "history_app.upkeep", "history_app.access")
# Not part of the shipped app: the benchmarks drive it from outside, the migrations are
# frozen history.
SKIPPED = ("history_app.benchmarks", "history_app.migrations")


def layer_of(name: str) -> int:
    if name in ("history_app", "history_app.agent_history") or name.startswith("history_app.agent_history."):
        return LIBRARY
    if name == "history_app.models":
        return MODELS
    if name.startswith("history_app.store"):
        return STORE
    if name in EDGE_MODULES or name.startswith(EDGE_PACKAGES):
        return EDGE
    if name.startswith(SERVICE_PACKAGES):
        return SERVICES
    raise AssertionError(f"{name} has no layer: add it to tests/test_layers.py")


class Code:
    """The app's modules under ``root`` (the folder named history_app) and their imports."""

    def __init__(self, root: Path):
        self.modules: dict[str, Path] = {}
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            if not name.startswith(SKIPPED) and ".venv" not in path.parts:
                self.modules[name] = path
        self.trees = {
            name: ast.parse(path.read_text(), filename=str(path)) for name, path in self.modules.items()
        }

    def resolve(self, name: str) -> str | None:
        """The app module an imported name lives in, or None when it is outside the app."""
        while name and name not in self.modules:
            name = name.rpartition(".")[0]
        return name or None

    def imports(self, name: str) -> list[tuple[int, str, str | None]]:
        """(line, module imported, name taken from it or None) for each app import."""
        package = name if self.modules[name].name == "__init__.py" else name.rpartition(".")[0]
        found = []
        for node in ast.walk(self.trees[name]):
            if isinstance(node, ast.Import):
                found += [(node.lineno, alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    whole = f"{base}.{alias.name}"  # `from package import module`
                    found.append(
                        (node.lineno, whole, None)
                        if whole in self.modules
                        else (node.lineno, base, alias.name)
                    )
        return [item for item in found if self.resolve(item[1])]

    def private_uses(self, name: str) -> list[str]:
        """Another module's underscore names: imported, or read as ``module._name``."""
        uses, aliases = [], {}
        for line, target, taken in self.imports(name):
            if (
                taken
                and taken.startswith("_")
                and not taken.startswith("__")
                and self.resolve(target) != name
            ):
                uses.append(f"line {line}: {target}.{taken}")
        for node in ast.walk(self.trees[name]):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    whole = f"{node.module}.{alias.name}"
                    if whole in self.modules and whole != name:
                        aliases[alias.asname or alias.name] = whole
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in self.modules:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(self.trees[name]):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                uses.append(f"line {node.lineno}: {aliases[node.value.id]}.{node.attr}")
        return uses

    def climbing(self, name: str) -> list[str]:
        mine = layer_of(name)
        return [
            f"line {line}: {target} ({NAMES[layer_of(self.resolve(target))]})"
            for line, target, _ in self.imports(name)
            if layer_of(self.resolve(target)) > mine
        ]

    def circles(self) -> list[str]:
        graph = {
            name: sorted({self.resolve(t) for _, t, _ in self.imports(name)} - {name})
            for name in self.modules
        }
        circles, state = [], {}

        def visit(node, trail):
            state[node] = "open"
            for nxt in graph[node]:
                if state.get(nxt) == "open":
                    circles.append(" -> ".join([*trail[trail.index(nxt) :], nxt]))
                elif nxt not in state:
                    visit(nxt, [*trail, nxt])
            state[node] = "done"

        for node in graph:
            if node not in state:
                visit(node, [node])
        return circles


CODE = Code(APP)


@pytest.mark.parametrize("name", sorted(CODE.modules))
def test_no_import_climbs(name):
    climbing = CODE.climbing(name)
    assert not climbing, f"{name} ({NAMES[layer_of(name)]}) imports from a layer above it: {climbing}"


@pytest.mark.parametrize("name", sorted(CODE.modules))
def test_no_private_name_of_another_module(name):
    uses = CODE.private_uses(name)
    assert not uses, f"{name} uses another module's private names: {uses}"


def test_no_circle():
    circles = CODE.circles()
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_rules_catch_a_climb_a_private_name_and_a_circle(tmp_path):
    root = tmp_path / "history_app"
    for folder in ("store", "reading"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "store" / "kept.py").write_text("def later():\n    from history_app.reading import views\n")
    (root / "reading" / "views.py").write_text("from history_app.store import kept\n\nx = kept._hidden\n")
    code = Code(root)
    assert code.climbing("history_app.store.kept") == ["line 2: history_app.reading.views (edge)"]
    assert code.private_uses("history_app.reading.views") == ["line 3: history_app.store.kept._hidden"]
    assert code.circles() == [
        "history_app.reading.views -> history_app.store.kept -> history_app.reading.views"
    ]
