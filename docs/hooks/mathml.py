"""An mkdocs hook: the walkthrough's formulas become MathML when the site is built.

The notebook's markdown cells hold LaTeX between ``$...$`` and ``$$...$$``. Rendering them in the
browser needs MathJax or KaTeX, fetched from a CDN or shipped beside the site; instead this hook
converts each formula to MathML with ``latex2mathml`` (pure Python, installed by the ``docs``
extra) while the site is built, and every current browser draws MathML itself. The site then
shows its formulas offline, with no script at all; a formula the converter cannot read fails the
build, naming it. Only markdown cells are touched, and inside them neither ``<code>`` nor
``<pre>``: a ``$`` in code stays a dollar.
"""

from __future__ import annotations

import html
import re
from typing import Any

from latex2mathml.converter import convert

# A notebook cell starts with this div (nbconvert's lab template, as mkdocs-jupyter renders it).
_CELL = re.compile(r'(?=<div class="jp-Cell )')
_CODE = re.compile(r"(<pre\b.*?</pre>|<code\b.*?</code>)", re.S)
_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
_INLINE = re.compile(r"(?<![\\$])\$(?!\$)(.+?)(?<![\\$])\$", re.S)
# The font stack MathML is drawn with: a system math font where there is one.
STYLE = (
    "<style>math{font-family:'STIX Two Math','Latin Modern Math','Cambria Math',"
    "'DejaVu Math TeX Gyre',math;font-size:1.05em}"
    # a display formula wider than the column scrolls sideways instead of being cut off
    ".math-display{display:block;overflow-x:auto;overflow-y:hidden;margin:.6em 0;padding:.2em 0}</style>"
)


def to_mathml(latex: str, display: bool) -> str:
    """One formula (its HTML-escaped LaTeX, as nbconvert leaves it) as a MathML element."""
    source = html.unescape(latex).strip()
    try:
        return convert(source, display="block" if display else "inline")
    except Exception as error:  # the converter's errors are of several types
        raise ValueError(f"the formula ${source}$ cannot be converted to MathML: {error}") from error


def render_math(text: str) -> str:
    """Every ``$$...$$`` and ``$...$`` of an HTML fragment outside code, as MathML."""
    parts = _CODE.split(text)
    for i in range(0, len(parts), 2):  # even parts are outside <pre> and <code>
        part = _DISPLAY.sub(
            lambda m: f'<span class="math-display">{to_mathml(m.group(1), True)}</span>', parts[i]
        )
        parts[i] = _INLINE.sub(lambda m: to_mathml(m.group(1), False), part)
    return "".join(parts)


def render_notebook(output: str) -> str:
    """A page's HTML with the formulas of its notebook's markdown cells rendered."""
    cells = _CELL.split(output)
    for i, cell in enumerate(cells):
        if cell.startswith('<div class="jp-Cell jp-MarkdownCell'):
            cells[i] = render_math(cell)
    return "".join(cells)


def on_post_page(output: str, page: Any, config: Any, **kwargs: Any) -> str:
    if 'class="jp-Cell ' not in output:
        return output
    output = render_notebook(output)
    return output.replace("</head>", STYLE + "</head>", 1)
