"""A shape trace: every module's name and the shapes it receives and returns, forward and backward.

    with shape_trace(model):
        logits = model.forward(src, tgt, src_mask, tgt_mask)
        model.backward(dlogits)

prints, in the notation of the from-scratch design, lines such as::

    encoder.layers.0.self_attention_block.forward  x_q (10, 8, 512)  mask (10, 1, 1, 8)
      (B, T, 512) -> split into 8 heads (10, 8, 8, 64) -> scores (10, 8, 8, 8) -> concat (10, 8, 512)
    encoder.layers.0.self_attention_block.forward -> (10, 8, 512)

The module classes are wrapped only inside the ``with`` block, so the trace costs nothing when off.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from .layers import MultiHeadAttentionBlock, MultiHeadLatentAttentionBlock
from .module import Module

ATTENTION_BLOCKS = (MultiHeadAttentionBlock, MultiHeadLatentAttentionBlock)


def _describe(value: Any) -> str:
    if hasattr(value, "shape"):
        return str(tuple(int(n) for n in value.shape))
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    return "None" if value is None else type(value).__name__


class ShapeTrace:
    """Collects the lines; ``lines`` keeps them for tests and tools, ``file`` receives them as they come."""

    def __init__(self, names: dict[int, str], file: TextIO | None) -> None:
        self.names, self.file, self.depth = names, file, 0
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        line = "  " * self.depth + text
        self.lines.append(line)
        if self.file is not None:
            print(line, file=self.file)

    def wrap(self, method: Callable, kind: str) -> Callable:
        parameters = list(inspect.signature(method).parameters)[1:]

        @functools.wraps(method)
        def traced(module: Module, *args: Any, **kwargs: Any) -> Any:
            name = f"{self.names.get(id(module), type(module).__name__)}.{kind}"
            shown = [
                f"{p} {_describe(a)}"
                for p, a in zip(parameters, args)
                if not callable(a) or hasattr(a, "shape")
            ]
            shown += [f"{p} {_describe(a)}" for p, a in kwargs.items() if not callable(a)]
            self.write(f"{name}  " + "  ".join(shown))
            self.depth += 1
            try:
                out = method(module, *args, **kwargs)
            finally:
                self.depth -= 1
            if kind == "forward" and isinstance(module, ATTENTION_BLOCKS):
                self._attention_detail(module, args)
            self.write(f"{name} -> {_describe(out)}")
            return out

        return traced

    def _attention_detail(self, block: Any, args: tuple) -> None:
        x_q = args[0]
        x_kv = args[1] if len(args) > 1 and args[1] is not None else x_q  # self-attention: keys from x_q
        batch, length, width = x_q.shape
        heads, head_width, keys = block.h, block.d_k, x_kv.shape[1]
        latent = (
            f" -> latent ({batch}, {keys}, {block.latent_dim}) -> keys, values"
            if hasattr(block, "latent_dim")
            else ""
        )
        self.write(
            f"  (B, T, {width}){latent} -> split into {heads} heads ({batch}, {heads}, {length}, {head_width}) "
            f"-> scores ({batch}, {heads}, {length}, {keys}) -> concat ({batch}, {length}, {width})"
        )


@contextmanager
def shape_trace(model: Module, file: TextIO | None = sys.stdout) -> Iterator[ShapeTrace]:
    """Trace every forward and backward of ``model``'s modules inside the block."""
    names = {id(module): name or type(module).__name__ for name, module in model.named_modules()}
    trace = ShapeTrace(names, file)
    originals: list[tuple[type, str, Callable]] = []
    for cls in {type(module) for _, module in model.named_modules()}:
        for kind in ("forward", "backward"):
            method = cls.__dict__.get(kind)
            if method is not None:
                originals.append((cls, kind, method))
                setattr(cls, kind, trace.wrap(method, kind))
    try:
        yield trace
    finally:
        for cls, kind, method in originals:
            setattr(cls, kind, method)
