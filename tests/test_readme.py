"""Every Python example in the README's library section runs as written."""

from __future__ import annotations

import re

import pytest

from .readme_examples import library_examples

EXAMPLES = library_examples()


def test_the_library_section_has_an_example_per_feature():
    assert len(EXAMPLES) >= 9


@pytest.mark.parametrize("code", EXAMPLES, ids=lambda c: c.splitlines()[0][:50])
def test_example_runs(code, tmp_path, monkeypatch):
    # The HttpSink example spools into the user's cache folder: keep it inside this test's.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})


def test_every_file_a_curl_example_sends_is_in_the_repository():
    """Issue #17: the README's curl examples send files a fresh clone has."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    text = (root / "README.md").read_text()
    sent = re.findall(r'--data-binary @"?([^"\s]+)"?', text)
    assert len(sent) >= 2
    for path in sent:
        assert (root / path).is_file(), path
