"""The library is standard-library only: agent code imports it without Django, and it is
its own distribution (agent-history-lib), which the dashboard's distribution depends on
and never duplicates."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "history_app" / "agent_history"
LIBRARY_DIST = "agent-history-lib"
# What a build leaves in a source folder (pip builds in place): never part of the source.
BUILD_LEFTOVERS = shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info")


def library_sources() -> set[str]:
    """The library's .py files, as paths in a wheel (history_app/agent_history/...)."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in LIBRARY.rglob("*.py")
        if not any(part in ("build", "dist") or part.endswith(".egg-info") for part in path.parts)
    }


def pyproject(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())


def library_version() -> str:
    """``__version__`` of history_app/agent_history/__init__.py, read without importing it."""
    for node in ast.parse((LIBRARY / "__init__.py").read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__version__"]:
            return ast.literal_eval(node.value)
    raise AssertionError("history_app/agent_history/__init__.py sets no __version__")


def build_wheel(source: Path, tmp_path: Path) -> zipfile.ZipFile:
    """The wheel of the project in ``source``, built from a copy without isolation (offline)."""
    try:
        setuptools = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("setuptools is not installed here: a wheel cannot be built without build isolation")
    major_minor = tuple(int(part) for part in setuptools.split(".")[:2] if part.isdigit())
    if major_minor < (70, 1) and importlib.util.find_spec("wheel") is None:
        pytest.skip(
            f"setuptools {setuptools} builds wheels only with the wheel package, which is missing here "
            "(the test extras install setuptools>=70.1)"
        )
    copy = tmp_path / "source"
    shutil.copytree(source, copy, ignore=BUILD_LEFTOVERS)
    out = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps"]
        + ["--no-build-isolation", "--no-index", "--wheel-dir", str(out), str(copy)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


def metadata(wheel: zipfile.ZipFile) -> list[str]:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return wheel.read(name).decode().splitlines()


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
    for name in library_sources():
        path = ROOT / name
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"


def test_the_library_wheel_holds_the_library_and_nothing_else(tmp_path):
    wheel = build_wheel(LIBRARY, tmp_path)
    files = {n for n in wheel.namelist() if ".dist-info/" not in n}
    # Every .py file of the folder (a subpackage missing from its pyproject's `packages`
    # would be missing here), no history_app/__init__.py (installed alone, history_app is
    # a namespace package), no pyproject.toml, nothing of the dashboard.
    assert files == library_sources()
    lines = metadata(wheel)
    assert "Name: agent-history-lib" in lines
    assert f"Version: {library_version()}" in lines
    assert [line for line in lines if line.startswith("Requires-Dist")] == []


def test_the_dashboard_wheel_leaves_the_library_to_its_distribution(tmp_path):
    source = tmp_path / "dashboard"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copy(ROOT / "README.md", source)
    shutil.copytree(ROOT / "history_app", source / "history_app", ignore=BUILD_LEFTOVERS)
    wheel = build_wheel(source, tmp_path)
    files = set(wheel.namelist())
    assert "history_app/__init__.py" in files and "history_app/settings.py" in files
    assert not [n for n in files if n.startswith("history_app/agent_history")]
    requires = [line for line in metadata(wheel) if line.startswith(f"Requires-Dist: {LIBRARY_DIST}")]
    assert requires == [f"Requires-Dist: {LIBRARY_DIST}<0.2,>=0.1.0"]


def test_the_dashboard_wheel_ships_the_help_pages_but_not_the_drafts(tmp_path):
    """An installed dashboard serves /help/ from its package: the reference pages are in
    its wheel; a draft in docs/pending/ is not."""
    source = tmp_path / "dashboard"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copy(ROOT / "README.md", source)
    shutil.copytree(ROOT / "history_app", source / "history_app", ignore=BUILD_LEFTOVERS)
    (source / "history_app" / "docs" / "pending").mkdir(exist_ok=True)
    (source / "history_app" / "docs" / "pending" / "draft.md").write_text("# A draft\n")
    files = set(build_wheel(source, tmp_path).namelist())
    pages = {f"history_app/docs/{p.name}" for p in (ROOT / "history_app" / "docs").glob("*.md")}
    assert len(pages) >= 10 and pages <= files
    assert not [name for name in files if "/pending/" in name]


def test_the_version_is_kept_in_one_place_and_the_dashboard_accepts_it():
    from packaging.requirements import Requirement  # pytest's own dependency

    library = pyproject(LIBRARY)
    assert library["project"]["name"] == LIBRARY_DIST
    assert "version" not in library["project"] and library["project"]["dynamic"] == ["version"]
    assert library["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "history_app.agent_history.__version__"
    }
    assert library["project"]["dependencies"] == []
    import history_app.agent_history

    assert history_app.agent_history.__version__ == library_version()
    (requirement,) = [
        Requirement(r) for r in pyproject(ROOT)["project"]["dependencies"] if r.startswith(LIBRARY_DIST)
    ]
    assert requirement.name == LIBRARY_DIST and requirement.specifier.contains(library_version())
