"""mkdocs hooks (mkdocs.yml ``hooks:``) for ``make docs``: what the site shows that the Markdown files do not hold.

- ``config-keys.md`` gets the config key reference generated from the schema (``scripts/config_reference.py``'s
  ``reference()``) where its marker stands, when the site is built: the site's reference is always the code's.
- Docstrings written with Sphinx roles (``:func:`pack_lengths```, ``:class:`~datatools.x.Y```) reach the HTML as
  the role's name beside a code span; each becomes that code span, linked to the object's heading when the page
  documents it (mkdocstrings gives every object an anchor named by its full path). A role left over after that
  fails the build (``mkdocs build --strict`` stops on it), so no page shows a raw role.
"""

from __future__ import annotations

import html
import importlib.util
import re
from pathlib import Path

CONFIG_KEYS_PAGE = "config-keys.md"
CONFIG_KEYS_MARKER = "<!-- config-keys: generated when the site is built (scripts/mkdocs_hooks.py) -->"
ROLES = ("func", "class", "meth", "mod", "attr", "data", "exc", "obj", "const")
# the HTML a role becomes: ":func:<code>~a.b.c</code>" (the Markdown code span the backticks made)
ROLE_HTML = re.compile(r":(?:py:)?(" + "|".join(ROLES) + r"):<code>(~?)([^<]+)</code>")
RAW_ROLE = re.compile(r":(?:py:)?(?:" + "|".join(ROLES) + r"):(?:<code>|`)")
ANCHOR = re.compile(r'\sid="([A-Za-z_][\w.]*)"')


def config_reference() -> str:
    """The generated key reference (Markdown tables), as ``scripts/config_reference.py`` writes it."""
    path = Path(__file__).with_name("config_reference.py")
    spec = importlib.util.spec_from_file_location("config_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference()


def on_page_markdown(markdown: str, page, **_) -> str:
    """Insert the key reference into the config keys page (its marker must be there: a moved marker fails)."""
    if page.file.src_path != CONFIG_KEYS_PAGE:
        return markdown
    if CONFIG_KEYS_MARKER not in markdown:
        raise ValueError(f"docs/{CONFIG_KEYS_PAGE}: the marker {CONFIG_KEYS_MARKER!r} is missing")
    return markdown.replace(CONFIG_KEYS_MARKER, config_reference())


def render_roles(text: str) -> str:
    """``text`` (a page's HTML) with every Sphinx role as a code span, linked where the page has its anchor.

    ``~a.b.c`` shows ``c`` (Sphinx's meaning of the tilde); a short name links when exactly one anchor on the
    page ends with it (``pack_lengths`` -> ``#datatools.kernels.packing.pack_lengths``).

    Raises:
      ValueError: a role is left that this did not render (a form it does not know), naming it.
    """
    anchors = set(ANCHOR.findall(text))

    def one(m: re.Match) -> str:
        tilde, target = m.group(2), html.unescape(m.group(3)).strip()
        shown = target.rsplit(".", 1)[-1] if tilde else target
        name = target.rstrip("()")
        found = [a for a in anchors if a == name or a.endswith("." + name)]
        code = f"<code>{html.escape(shown)}</code>"
        return f'<a href="#{found[0]}">{code}</a>' if len(found) == 1 else code

    text = ROLE_HTML.sub(one, text)
    left = RAW_ROLE.search(text)
    if left:
        raise ValueError(f"a raw role is left in the page: {text[left.start() : left.start() + 80]!r}")
    return text


def on_page_content(html_text: str, page, **_) -> str:
    """Render the roles of every page (the API reference holds most; any page may quote a docstring)."""
    try:
        return render_roles(html_text)
    except ValueError as exc:
        raise ValueError(f"docs/{page.file.src_path}: {exc}") from None
