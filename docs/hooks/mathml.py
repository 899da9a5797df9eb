"""An mkdocs hook: the walkthrough's formulas become MathML when the site is built.

The notebook's markdown cells hold LaTeX between ``$...$`` and ``$$...$$``. Rendering them in the
browser needs MathJax or KaTeX, fetched from a CDN or shipped beside the site; instead this hook
converts each formula to MathML with ``latex2mathml`` (pure Python, installed by the ``docs``
extra) while the site is built, and every current browser draws MathML itself. The site then
shows its formulas offline, with no script at all; a formula the converter cannot read fails the
build, naming it (an unknown command too: the converter would draw ``\\fracc`` as text). Only
the text of markdown cells is touched: neither ``<code>`` nor ``<pre>`` nor a tag's attributes (a
``$`` in a link stays a dollar).
"""

from __future__ import annotations

import html
import re
from typing import Any
from xml.etree.ElementTree import Element, tostring

from latex2mathml.converter import convert_to_element

# A notebook cell starts with this div (nbconvert's lab template, as mkdocs-jupyter renders it).
_CELL = re.compile(r'(?=<div class="jp-Cell )')
_NOT_TEXT = re.compile(r"(<pre\b.*?</pre>|<code\b.*?</code>|<[^>]*>)", re.S)  # code, and every tag
_ENTITY = re.compile(r"&#x([0-9A-F]{5});")  # how latex2mathml writes a symbol into an element's text
_COMMAND = re.compile(r"\\[A-Za-z]+")  # a command the converter did not know, left as text
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
    if not source:
        raise ValueError(f"the formula ${latex}$ is empty")
    try:
        math = convert_to_element(source, display="block" if display else "inline")
    except Exception as error:  # the converter's errors are of several types
        raise ValueError(f"the formula ${source}$ cannot be converted to MathML: {error}") from error
    unknown = sorted({command for node in math.iter() for command in _COMMAND.findall(node.text or "")})
    if unknown:
        raise ValueError(
            f"the formula ${source}$ cannot be converted to MathML: unknown {', '.join(unknown)}"
        )
    return serialize(math)


def serialize(math: Element) -> str:
    """The MathML as text, its symbols as characters and everything else escaped: ``\\text{<b>}``
    draws ``<b>``, never makes it a tag (latex2mathml's own ``convert`` unescapes all)."""
    for node in math.iter():
        if node.text:
            node.text = _ENTITY.sub(lambda m: chr(int(m.group(1), 16)), node.text)
    return tostring(math, encoding="unicode")


def render_math(text: str) -> str:
    """Every ``$$...$$`` and ``$...$`` of an HTML fragment outside code, as MathML."""
    parts = _NOT_TEXT.split(text)
    for i in range(0, len(parts), 2):  # even parts are text: outside tags, <pre> and <code>
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
