"""CrewAI's own virtual environment for the tests (see tests/test_framework_crewai.py): made
once from the exact pins of ``crewai-requirements.txt`` beside this file, kept in
``$XDG_CACHE_HOME/agent-history/`` (else ``~/.cache/agent-history/``) under the hash of the
pins and the interpreter, reused after.

Standard library only, so that .ci/run can make it with the system's Python while it
installs the project (``python3 tests/frameworks/crewai_env.py``), in parallel, instead of
a test worker waiting minutes for pip in the middle of the suite. The tests wait on the
same lock file, so a test that comes first makes it, and one that comes while it is being
made waits for it."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parent / "crewai-requirements.txt"


class EnvironmentNotMade(Exception):
    """pip (or venv) failed: the message is the command and the end of its output."""


def environment_folder() -> Path:
    """Where CrewAI's environment is kept: named by the Python version and the hash of the
    pins and the interpreter, so that changing either makes a new one."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    digest = hashlib.sha256(REQUIREMENTS.read_bytes() + f"\0{version}\0{sys.base_prefix}".encode())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "agent-history" / f"crewai-py{version}-{digest.hexdigest()[:12]}"


def crewai_python() -> tuple[Path, bool]:
    """The Python of CrewAI's environment, made if it is not there yet, and whether it was
    made now. One process makes it at a time (a lock file beside it); a half-made one (no
    ``ready`` file) is made again."""
    folder = environment_folder()
    python, ready = folder / "bin" / "python", folder / "ready"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists() and python.exists():
            return python, False
        _remove(folder)
        commands = [
            [sys.executable, "-m", "venv", str(folder)],
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            + ["--retries", "1", "--timeout", "30", "-r", str(REQUIREMENTS)],
        ]
        for command in commands:
            done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
            if done.returncode:
                _remove(folder)
                errors = [
                    line for line in done.stderr.splitlines() if "is ignored: it is neither" not in line
                ]
                raise EnvironmentNotMade(f"{' '.join(command[:4])}… failed: " + "\n".join(errors[-8:]))
        ready.write_text(REQUIREMENTS.read_text())
    return python, True


def _remove(folder: Path) -> None:
    import shutil

    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(folder)


if __name__ == "__main__":
    import time

    started = time.monotonic()
    python, made = crewai_python()
    print(
        f"CrewAI's environment {'made' if made else 'reused'} in {time.monotonic() - started:.1f} s: {python}"
    )
