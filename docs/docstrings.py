"""A griffe extension for the API reference: the docstrings' plain text, read as Markdown means it.

The docstrings are written for ``help()`` and for reading in the source, with two habits that
Markdown would lose:

- Sphinx roles name other objects (:mod:`numpy_transformer.layers`, :class:`GradcheckError`,
  :func:`~numpy_transformer.gradient_checking.checker.gradcheck`). Each becomes an autorefs link,
  [`GradcheckError`][numpy_transformer.gradient_checking.report.GradcheckError], so a name that no page documents
  fails `mkdocs build --strict` instead of rendering as dead text.
- Formulas are laid out in aligned lines (``dx = dy W           (..., out) @ (out, in)``), which
  Markdown would join into one paragraph. Such a paragraph becomes a code block.
- Special tokens are written bare (<bos>, <pad>), which a browser would take for unknown HTML tags and
  hide. Outside code they are escaped.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc):`(~?)([\w.]+)`")
CODE_SPAN_OR_TAG = re.compile(r"(`+).+?\1|<(/?\w+)>", re.S)
ALIGNED = re.compile(r"\S {2,}\S")  # a run of spaces inside a line: columns laid out by hand
PARAGRAPHS = re.compile(r"(\n[ \t]*\n)")


class MarkdownDocstrings(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        # after the whole package is loaded, so a module's imports are known when its names are resolved
        rewrite(pkg)


def rewrite(obj: griffe.Object) -> None:
    """Rewrite the docstrings of ``obj`` and of everything defined in it."""
    if obj.docstring is not None:

        def link(match: re.Match) -> str:
            short, target = match.group(1), match.group(2)
            shown = target.rsplit(".", 1)[-1] if short else target
            return f"[`{shown}`][{resolve(obj.module, target)}]"

        def escape(match: re.Match) -> str:
            tag = match.group(2)
            return match.group(0) if tag is None else f"&lt;{tag}&gt;"

        text = preformat(ROLE.sub(link, obj.docstring.value))
        obj.docstring.value = CODE_SPAN_OR_TAG.sub(escape, text)
    for member in obj.members.values():
        if not isinstance(member, griffe.Alias):
            rewrite(member)


def preformat(text: str) -> str:
    """Fence every paragraph laid out by hand: one with aligned columns or an indented continuation line.
    Lists and indented code blocks are left as they are."""
    blocks = PARAGRAPHS.split(text)
    for i, block in enumerate(blocks):
        lines = block.split("\n")
        if block.startswith(("* ", "- ", "    ", "```")):
            continue
        if any(ALIGNED.search(line.strip()) for line in lines) or any(
            line[:1].isspace() for line in lines[1:]
        ):
            blocks[i] = f"```text\n{block}\n```"
    return "".join(blocks)


def resolve(module: griffe.Module, target: str) -> str:
    """The full path of ``target`` as the docstring's module sees it: a bare name is one of the module's
    own objects or one it imports; a dotted name starting with the package is already full."""
    if target.startswith("numpy_transformer"):
        return target
    head, _, rest = target.partition(".")
    member = module.members.get(head)
    base = member.target_path if isinstance(member, griffe.Alias) else f"{module.path}.{head}"
    return f"{base}.{rest}" if rest else base
