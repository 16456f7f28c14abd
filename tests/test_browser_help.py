"""The help in a real browser: not logged in, open /help/, follow its table of contents
by clicking, then every link of every help page: each page it leads to loads, and each
#anchor is an element of that page. No console error, no request to another host."""

from __future__ import annotations

from urllib.parse import urldefrag, urlparse

import pytest

from history_app.reading import help

from .test_browser import open_page, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

IDS = "() => [...document.querySelectorAll('[id]')].map(e => e.id)"
LINKS = "() => [...document.querySelectorAll('a[href]')].map(a => a.href)"


def test_the_help_table_of_contents_and_every_link_work(chromium, live_server):
    page = open_page(chromium, live_server)
    origin = urlparse(live_server.url).netloc

    # The table of contents, clicked as a reader would.
    page.goto(f"{live_server.url}/help/")
    page.wait_for_selector("h1#agent-history")
    shot(page, "help-index")
    entries = page.locator(".help-toc .help-pages > li > a")
    contents = help.contents()
    assert entries.count() == len(contents) == len(help.page_names())
    for number, (name, title) in enumerate(contents):
        entries.nth(number).click()
        page.wait_for_url(f"{live_server.url}/help/{name}/")
        assert page.locator("article h1").inner_text().startswith(title)
        # The page's own contents: each section link jumps to its heading.
        sections = page.eval_on_selector_all(".help-toc .help-headings a", "as => as.map(a => a.hash)")
        assert sections, page.url
        ids = set(page.evaluate(IDS))
        assert {s[1:] for s in sections} <= ids, page.url
    page.click(".help-toc .help-headings a >> nth=1")
    assert urlparse(page.url).fragment

    # Every link of every help page.
    pages = [f"{live_server.url}/help/"] + [f"{live_server.url}/help/{n}/" for n in help.page_names()]
    anchors: dict[str, set[str]] = {}
    wanted: list[tuple[str, str]] = []
    for url in pages:
        assert page.goto(url).status == 200
        anchors[url] = set(page.evaluate(IDS))
        wanted += [(url, link) for link in page.evaluate(LINKS)]
    broken = []
    for source, link in wanted:
        parsed = urlparse(link)
        if parsed.scheme not in ("http", "https") or parsed.netloc != origin:
            continue  # another site (GitHub, the quickstart address), mailto:
        target, fragment = urldefrag(link)
        if target not in anchors:
            response = page.goto(target)
            if response is None or response.status != 200:
                broken.append(f"{source} -> {link}: {response and response.status}")
                continue
            anchors[target] = set(page.evaluate(IDS))
        if fragment and fragment not in anchors[target]:
            broken.append(f"{source} -> {link}: no #{fragment} there")
    assert broken == []
    assert len(wanted) > 200
    assert page.problems == []
    page.context.close()


def test_every_help_page_fits_a_phone_in_dark_mode(chromium, live_server):
    """At 390 px the contents go above the text, and nothing (a wide table, a long code
    line) makes the page wider than the screen: tables and code scroll in their box."""
    page = open_page(chromium, live_server, viewport={"width": 390, "height": 844}, color_scheme="dark")
    too_wide = []
    for name in ["", *help.page_names()]:
        page.goto(f"{live_server.url}/help/{name + '/' if name else ''}")
        width = page.evaluate("() => document.documentElement.scrollWidth")
        if width > 390:
            too_wide.append(f"{name or 'index'}: {width} px")
    shot(page, "help-phone-dark")
    assert too_wide == []
    assert page.problems == []
    page.context.close()
