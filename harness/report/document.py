"""One document model for every report, rendered to Markdown or to a single-file HTML page.

A report is built once as a :class:`Document` of :class:`Section` s holding blocks
(:class:`Paragraph`, :class:`Table`, :class:`Figure`, :class:`Code`, :class:`Bullets`); the two
renderers only lay the same blocks out, so the Markdown and HTML versions cannot drift.

Inline markup in paragraph and bullet text is the small Markdown subset the reports use:
```code``` spans and ``**bold**``. Table cells, captions and code blocks are plain text
(escaped for HTML; a ``|`` in a Markdown cell is escaped so it cannot split the row).

The HTML page is self-contained: inline CSS, figures embedded as base64 PNG, only in-page
``#anchor`` links (a table of contents of the sections), no scripts.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field

# --------------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class Paragraph:
    """Running text; a ``\\n`` inside stays a line break in Markdown (same paragraph)."""

    text: str


@dataclass(frozen=True)
class Table:
    """A table of plain-text cells; numeric columns are right-aligned in HTML."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "header", tuple(self.header))
        object.__setattr__(self, "rows", tuple(tuple(r) for r in self.rows))
        for r in self.rows:
            if len(r) != len(self.header):
                raise ValueError(f"table row has {len(r)} cells, header {len(self.header)}: {r!r}")


@dataclass(frozen=True)
class Figure:
    """A PNG image with a caption; ``name`` is its file stem when written next to Markdown."""

    png: bytes
    caption: str
    name: str = "figure"


@dataclass(frozen=True)
class Code:
    """A preformatted block (e.g. JSON)."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """An unordered list; items use the paragraph inline markup."""

    items: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))


Block = Paragraph | Table | Figure | Code | Bullets


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Document:
    """``title`` (the H1), ``intro`` blocks before the first section, then ``sections`` (H2)."""

    title: str
    intro: list[Block] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)


# --------------------------------------------------------------------------- Markdown


def _md_cell(text: str) -> str:
    return str(text).replace("\n", " ").replace("|", "\\|")


def _md_block(block: Block, figure_prefix: str | None) -> list[str]:
    if isinstance(block, Paragraph):
        return [block.text]
    if isinstance(block, Table):
        out = ["| " + " | ".join(_md_cell(h) for h in block.header) + " |",
               "|" + "---|" * len(block.header)]
        out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in block.rows]
        if block.caption:
            out += ["", block.caption]
        return out
    if isinstance(block, Code):
        return ["```", block.text, "```"]
    if isinstance(block, Bullets):
        return [f"* {item}" for item in block.items]
    if isinstance(block, Figure):
        if figure_prefix is None:
            return []
        return [f"![{block.caption}]({figure_prefix}{block.name}.png)"]
    raise TypeError(f"unknown block {type(block).__name__}")


def to_markdown(doc: Document, figure_prefix: str | None = None) -> str:
    """Markdown text of ``doc``; every block is followed by one blank line.

    Figures are left out unless ``figure_prefix`` is given; then each becomes an image link
    ``{figure_prefix}{name}.png`` (the caller writes the PNG files there).
    """
    out = [f"# {doc.title}", ""]
    for block in doc.intro:
        lines = _md_block(block, figure_prefix)
        if lines:
            out += [*lines, ""]
    for sec in doc.sections:
        out += [f"## {sec.title}", ""]
        for block in sec.blocks:
            lines = _md_block(block, figure_prefix)
            if lines:
                out += [*lines, ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- HTML

_NUMERIC = re.compile(r"^(?:[-+−]?\d|\[[-+−]?\d|n/a\b|—$)")

CSS = """
:root { --fg: #1a202c; --muted: #4a5568; --line: #e2e8f0; --head: #f7fafc; --accent: #2b6cb0; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff;
  font: 16px/1.55 -apple-system, BlinkMacSystemFont, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1200px; margin: 0 auto; padding: 2rem 1.5rem 4rem; }
h1 { font-size: 1.9rem; margin: 0 0 1rem; line-height: 1.2; }
h2 { font-size: 1.35rem; margin: 2.4rem 0 0.8rem; padding-bottom: 0.25rem; border-bottom: 2px solid var(--line); }
p { margin: 0.6rem 0; max-width: 62rem; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
  font-size: 0.88em; }
code { background: #edf2f7; padding: 0.05em 0.3em; border-radius: 3px; }
pre { background: #f7fafc; border: 1px solid var(--line); padding: 0.8rem 1rem; overflow-x: auto;
  max-height: 28rem; border-radius: 4px; }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
nav.toc { background: #f7fafc; border: 1px solid var(--line); border-radius: 6px; padding: 0.6rem 1.2rem;
  margin: 1.2rem 0; }
nav.toc h2 { font-size: 1rem; margin: 0.3rem 0; border: 0; padding: 0; }
nav.toc ol { margin: 0.2rem 0 0.4rem; padding-left: 1.4rem; columns: 2; column-gap: 2.5rem; }
nav.toc li { margin: 0.1rem 0; }
.table-wrap { overflow-x: auto; margin: 0.8rem 0 1rem; }
table { border-collapse: collapse; font-size: 0.9rem; }
caption { caption-side: bottom; text-align: left; color: var(--muted); font-size: 0.85rem; padding-top: 0.4rem; }
th, td { border: 1px solid var(--line); padding: 0.3rem 0.6rem; vertical-align: top; text-align: left; }
thead th { background: var(--head); font-weight: 600; position: sticky; top: 0; }
tbody tr:nth-child(even) { background: #fbfcfd; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num { white-space: nowrap; }
th { overflow-wrap: break-word; hyphens: auto; }
figure { margin: 1rem 0 1.4rem; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 4px; }
figcaption { color: var(--muted); font-size: 0.88rem; margin-top: 0.35rem; max-width: 62rem; }
ul { margin: 0.5rem 0; padding-left: 1.4rem; }
""".strip()


def slug(text: str) -> str:
    """An HTML id for a heading: lower-case ASCII words joined by ``-``."""
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s or "section"


_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s:]+)\)")  # relative links only: no scheme, no javascript:


def inline_html(text: str) -> str:
    """Escape ``text`` and turn ```code```, ``**bold**`` and ``[text](relative/link.html)`` into
    HTML; newlines become spaces."""
    out = []
    for i, part in enumerate(re.split(r"`([^`]*)`", text)):
        if i % 2:
            out.append(f"<code>{html.escape(part)}</code>")
        else:
            esc = html.escape(part.replace("\n", " "))
            esc = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", esc)
            out.append(_LINK.sub(r'<a href="\2">\1</a>', esc))
    return "".join(out)


def _cell_html(cell: str) -> str:
    """A table cell: escaped text, with relative ``[text](link.html)`` links made into anchors."""
    parts = _LINK.split(cell)  # text, (link text, href, text)*
    out = [html.escape(parts[0])]
    for i in range(1, len(parts), 3):
        out.append(f'<a href="{html.escape(parts[i + 1])}">{html.escape(parts[i])}</a>{html.escape(parts[i + 2])}')
    return "".join(out)


def is_numeric(cell: str) -> bool:
    """Cells that read as numbers (``0.9500 (n=32)``, ``n/a (n=3)``, ``+1.20``, ``[-1, 1]``, ``4/28``,
    ``2.8e-09 (m=6) *``); ``0 (N2, C)`` or ``p00003`` are not."""
    c = str(cell).strip()
    if not _NUMERIC.match(c):
        return False
    rest = re.sub(r"\d[eE][-+]?\d|n/a|occupied|\b[nm]=", "", c)
    return not re.search(r"[A-Za-z]", rest)


def numeric_columns(table: Table) -> list[bool]:
    """Per column: every non-empty cell is numeric (and there is at least one)."""
    cols = []
    for j in range(len(table.header)):
        cells = [str(r[j]).strip() for r in table.rows if str(r[j]).strip()]
        cols.append(bool(cells) and all(is_numeric(c) for c in cells))
    return cols


def _html_table(t: Table) -> str:
    num = numeric_columns(t)

    def cls(j: int) -> str:
        return ' class="num"' if num[j] else ""

    head = "".join(f"<th{cls(j)}>{html.escape(str(h))}</th>" for j, h in enumerate(t.header))
    body = "".join("<tr>" + "".join(f"<td{cls(j)}>{_cell_html(str(c))}</td>" for j, c in enumerate(r)) + "</tr>"
                   for r in t.rows)
    cap = f"<caption>{html.escape(t.caption)}</caption>" if t.caption else ""
    return f'<div class="table-wrap"><table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _html_block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return f"<p>{inline_html(block.text)}</p>"
    if isinstance(block, Table):
        return _html_table(block)
    if isinstance(block, Code):
        return f"<pre>{html.escape(block.text)}</pre>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{inline_html(i)}</li>" for i in block.items) + "</ul>"
    if isinstance(block, Figure):
        cap = html.escape(block.caption)
        return (f'<figure id="fig-{slug(block.name)}"><img alt="{cap}" src="{png_data_uri(block.png)}">'
                f"<figcaption>{inline_html(block.caption)}</figcaption></figure>")
    raise TypeError(f"unknown block {type(block).__name__}")


def to_html(doc: Document, toc: bool = True) -> str:
    """A single self-contained HTML page of ``doc`` (inline CSS, embedded figures, in-page links only)."""
    ids: dict[str, int] = {}
    anchors = []
    for sec in doc.sections:
        base = slug(sec.title)
        ids[base] = ids.get(base, 0) + 1
        anchors.append(base if ids[base] == 1 else f"{base}-{ids[base]}")
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{html.escape(doc.title)}</title>", f"<style>\n{CSS}\n</style>", "</head>", "<body>", "<main>",
             f"<h1>{inline_html(doc.title)}</h1>"]
    parts += [_html_block(b) for b in doc.intro]
    if toc and len(doc.sections) > 1:
        items = "".join(f'<li><a href="#{a}">{inline_html(s.title)}</a></li>'
                        for a, s in zip(anchors, doc.sections, strict=True))
        parts.append(f'<nav class="toc"><h2>Contents</h2><ol>{items}</ol></nav>')
    for a, sec in zip(anchors, doc.sections, strict=True):
        parts.append(f'<section><h2 id="{a}">{inline_html(sec.title)}</h2>')
        parts += [_html_block(b) for b in sec.blocks]
        parts.append("</section>")
    parts += ["</main>", "</body>", "</html>", ""]
    return "\n".join(parts)


def num(x: float | None, spec: str = ".4f") -> str:
    """``format(x, spec)``, or ``n/a`` for None."""
    return "n/a" if x is None else format(x, spec)


def p_value(p: float, significant: bool = False) -> str:
    """A p-value for a table: 4 significant digits, ``< 1e-300`` where it underflowed to 0.0,
    `` *`` when significant."""
    return ("< 1e-300" if p == 0 else f"{p:.4g}") + (" *" if significant else "")
