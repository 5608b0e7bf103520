"""Render a collected ``Report`` into one self-contained HTML page (Jinja2 + Pygments).

Everything the page needs (style, the few lines of script that expand a row, the SVG charts, the
highlighted diffs) is inlined: the page opens from the file system, can be attached to a PR, and
makes no request. Templates are package data (``materialize/site/templates``) loaded through
Jinja2's ``PackageLoader``, so an installed wheel renders the same page as a checkout. Imported
only by ``materialize report``: neither Jinja2 nor Pygments load at ``materialize --help``.
"""

from __future__ import annotations

import os
from pathlib import Path

import jinja2
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from materialize.site.collect import Report, anchor

INDEX = "index.html"
_FORMATTER = HtmlFormatter(cssclass="hl", nowrap=False)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("materialize.site", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"], default_for_string=True, default=True),
        undefined=jinja2.StrictUndefined,  # a typo in the template is an error, not an empty cell
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["anchor"] = anchor
    env.filters["diff_html"] = lambda text: Markup(highlight(text, DiffLexer(), _FORMATTER))
    return env


def render(report: Report) -> str:
    """The page as text; the same report gives the same text."""
    template = environment().get_template("report.html.j2")
    return template.render(r=report, pygments_css=_FORMATTER.get_style_defs(".hl"))


def write(report: Report, out_dir: Path) -> Path:
    """Write ``out_dir/index.html`` atomically (a reader never sees half a page)."""
    from materialize.atomic import atomic_write

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / INDEX
    atomic_write(path, render(report).encode())
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o666 & ~umask)  # a page for any static host: readable like any file the user writes
    return path
