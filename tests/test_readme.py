"""Every Python example of the library's page (history_app/docs/library.md) runs as
written; every file a curl example of the docs sends is in the repository."""

from __future__ import annotations

import re

import pytest

from .readme_examples import library_examples

EXAMPLES = library_examples()


def test_the_library_page_has_an_example_per_feature():
    assert len(EXAMPLES) >= 9


@pytest.mark.parametrize("code", EXAMPLES, ids=lambda c: c.splitlines()[0][:50])
def test_example_runs(code, tmp_path, monkeypatch):
    # The HttpSink example spools into the user's cache folder: keep it inside this test's.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("TOKEN", "aht_no-server-here")
    exec(compile(code, "library.md", "exec"), {"__name__": "readme_example"})


def test_every_file_a_curl_example_sends_is_in_the_repository():
    """The curl examples of the README and the reference pages send files a fresh clone has."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    pages = [root / "README.md", *sorted((root / "history_app" / "docs").glob("*.md"))]
    text = "\n".join(page.read_text() for page in pages)
    sent = re.findall(r'--data-binary @"?([^"\s]+)"?', text)
    assert len(sent) >= 3
    for path in sent:
        assert (root / path).is_file(), path
