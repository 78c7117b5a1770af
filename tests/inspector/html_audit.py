"""Checks that a rendered page holds no executable or linkable stored text."""

from __future__ import annotations

from html.parser import HTMLParser

from tests.inspector.seed import XSS_PAYLOADS

ALLOWED_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "link",
    "script",
    "body",
    "header",
    "main",
    "footer",
    "a",
    "span",
    "div",
    "section",
    "nav",
    "h1",
    "h2",
    "h3",
    "p",
    "strong",
    "code",
    "pre",
    "details",
    "summary",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "dl",
    "dt",
    "dd",
    "ol",
    "li",
    "time",
    "form",
    "label",
    "input",
    "button",
}


STATIC_SCRIPTS = ("/static/local-time.js", "/static/on-demand.js", "/static/live-stream.js")
"""The only scripts a page loads: our static files, in this order."""


class TagAudit(HTMLParser):
    """Collects every tag and attribute the page really contains."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text = ""
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_text += data


def audit(html: str) -> TagAudit:
    parser = TagAudit()
    parser.feed(html)
    parser.close()
    return parser


def assert_inert(html: str) -> None:
    for payload in XSS_PAYLOADS:
        if "<" in payload or '"' in payload:
            assert payload not in html
    found = audit(html)
    assert {tag for tag, _ in found.tags} <= ALLOWED_TAGS
    scripts = [attrs for tag, attrs in found.tags if tag == "script"]
    assert [attrs.get("src") for attrs in scripts] == list(STATIC_SCRIPTS)
    assert found.script_text.strip() == ""
    for tag, attrs in found.tags:
        for name, value in attrs.items():
            assert not name.startswith("on") and name != "style", (tag, name)
            if name in ("href", "src", "action"):
                assert value is not None and value.startswith(("/", "#")), (tag, name, value)
                assert "javascript" not in value.lower()
