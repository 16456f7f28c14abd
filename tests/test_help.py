"""The reference pages inside the dashboard: /help/ (the README) and /help/<page>/,
rendered by the app's bounded, sanitised Markdown pipeline, with an anchor on every
heading, a table of contents, links rewritten to the dashboard; no login needed, and
nothing served but the Markdown files directly in history_app/docs/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from history_app.reading import help

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent
HREF = re.compile(r'href="([^"]*)"')
ID = re.compile(r'\sid="([^"]*)"')


def test_the_index_is_the_readme_with_the_table_of_contents(client):
    answer = client.get("/help/")
    assert answer.status_code == 200
    page = answer.content.decode()
    assert "<title>Help · Agent history</title>" in page
    assert '<h2 id="the-two-commands">The two commands' in page
    for name, title in help.contents():
        assert f'href="/help/{name}/"' in page and title in page
    # The README's links to the pages lead to the dashboard's pages.
    assert 'href="/help/ingestion/"' in page and "history_app/docs/" not in page


@pytest.mark.parametrize("name", help.page_names())
def test_every_page_is_served_without_login_with_its_anchors(client, name):
    answer = client.get(f"/help/{name}/")
    assert answer.status_code == 200
    page = answer.content.decode()
    markdown = (help.DOCS_DIR / f"{name}.md").read_text(encoding="utf-8")
    ids = set(ID.findall(page))
    expected = help.headings(markdown)
    assert expected and {h.slug for h in expected} <= ids
    # The page's own table of contents links each of its sections.
    for heading in expected:
        if heading.level in (2, 3):
            assert f'href="#{heading.slug}"' in page
    # Every link to a page or the README became a dashboard address; no .md link is left.
    assert not [href for href in HREF.findall(page) if ".md" in href.split("#")[0]]
    assert "markdown-fallback" not in page  # rendered, not escaped


def test_links_between_pages_and_to_readme_anchors_are_rewritten(client):
    page = client.get("/help/ingestion/").content.decode()
    assert 'href="/help/#the-two-commands"' in page  # ../../README.md#the-two-commands
    assert 'href="/help/otlp/"' in page  # otlp.md
    assert 'href="/help/pages/#session-timeline"' in page  # pages.md#session-timeline
    assert 'href="#limits"' in page  # its own section


def test_links_to_repository_files_become_their_text(client):
    # The README links tests and screenshots of the repository; the dashboard serves no
    # repository file, so such a link is its text, never a 404.
    page = client.get("/help/").content.decode()
    links = [href.split("#")[0] for href in HREF.findall(page)]
    assert not [href for href in links if href.startswith(("tests/", ".docs/", "history_app/"))]
    assert "tests/test_agno_exact.py" in page  # the text stays
    rewritten = help.rewrite_links(
        "[the test](tests/test_x.py) · ![shot](.docs/a.png) · [x](https://e.org/y.py) · [o](otlp.md)",
        in_readme=False,
    )
    assert rewritten == "the test · ![shot](.docs/a.png) · [x](https://e.org/y.py) · [o](/help/otlp/)"


def test_every_page_of_the_dashboard_has_the_help_link_in_its_header(client, alice_client):
    link = '<a href="/help/">Help</a>'
    assert link in client.get("/accounts/login/").content.decode()
    assert link in client.get("/help/security/").content.decode()
    assert link in alice_client.get("/p/default/").content.decode()
    assert link in alice_client.get("/p/default/stats/").content.decode()
    assert link in alice_client.get("/p/default/runs/no-such-run/").content.decode()  # the 404 page


@pytest.mark.parametrize(
    "path",
    [
        "/help/nope/",
        "/help/pending/",
        "/help/README/",
        "/help/..%2F..%2Fsettings/",
        "/help/%2e%2e/",
        "/help/../../settings.py",
        "/help/ingestion.md/",
        "/help/INGESTION/",
        "/help/ingestion/extra/",
    ],
)
def test_nothing_but_the_pages_is_served(client, path):
    answer = client.get(path)
    assert answer.status_code == 404
    assert "Ingestion and reading" not in answer.content.decode()


def test_files_beside_or_below_the_folder_are_not_pages(client, tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    (docs / "pending").mkdir(parents=True)
    (docs / "shown.md").write_text("# Shown\n\nA page.\n")
    (docs / "pending" / "draft.md").write_text("# Draft\n\nNot yet.\n")
    (docs / "notes.txt").write_text("not Markdown")
    (tmp_path / "outside.md").write_text("# Outside\n")
    monkeypatch.setattr(help, "DOCS_DIR", docs)
    assert help.page_names() == ["shown"]
    assert client.get("/help/shown/").status_code == 200
    for name in ("draft", "pending", "notes", "outside"):
        assert client.get(f"/help/{name}/").status_code == 404
    assert "Draft" not in client.get("/help/").content.decode()


def test_the_index_links_the_pages_there_are_now(client, tmp_path, monkeypatch):
    """A render kept from when other pages were there is not served again: the README's
    links follow the pages present now, whatever was asked for before."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "shown.md").write_text("# Shown\n\nA page.\n")
    with monkeypatch.context() as patched:
        patched.setattr(help, "DOCS_DIR", docs)
        assert 'href="history_app/docs/ingestion.md"' in client.get("/help/").content.decode()
    page = client.get("/help/").content.decode()
    assert 'href="/help/ingestion/"' in page and "history_app/docs/" not in page


def test_a_page_goes_through_the_sanitising_pipeline(client, tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "hostile.md").write_text(
        "# Hostile <script>alert(1)</script>\n\n"
        '[click](javascript:alert(2)) <img src="x" onerror="alert(3)"> <b onclick="alert(4)">b</b>\n\n'
        '<iframe src="https://example.com"></iframe>\n\n## Plain `code` part\n'
    )
    (docs / "deep.md").write_text("# Deep\n\n" + "".join("    " * i + "- x\n" for i in range(60)))
    monkeypatch.setattr(help, "DOCS_DIR", docs)
    page = client.get("/help/hostile/").content.decode()
    article = page[page.index("<article") :]
    assert "<script" not in article and "javascript:" not in article
    assert "onerror" not in article and "onclick" not in article and "<iframe" not in article
    assert '<h2 id="plain-code-part">Plain <code>code</code> part' in article
    deep = client.get("/help/deep/").content.decode()
    assert "markdown-fallback" in deep  # nested past the pipeline's bound: shown escaped


def test_the_index_comes_from_the_installed_distribution_without_a_checkout(client, tmp_path, settings):
    """Installed, there is no README.md beside the code: the distribution's description is it."""
    settings.BASE_DIR = tmp_path
    page = client.get("/help/").content.decode()
    assert client.get("/help/").status_code == 200
    assert '<h1 id="agent-history">Agent history' in page
    assert 'href="/help/ingestion/"' in page


def test_pending_drafts_are_not_shipped_with_the_package():
    """The docs ship as package data (an installed app finds them); drafts do not."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "docs/*.md" in data["history_app"]
    assert not [pattern for pattern in data["history_app"] if "pending" in pattern or "**" in pattern]
