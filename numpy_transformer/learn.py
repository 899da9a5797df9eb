"""Learn backprop by writing it: a workbook of every backward pass, graded on the spot.

``start(directory)`` writes ``my_backprop.py`` (one exercise per backward of the textbook, its
forward imported from :mod:`numpy_transformer.functional`, its body ``raise NotImplementedError``)
and a ``README.md`` giving the order to work in. ``check(path, names)`` loads the learner's file,
matches the functions it defines to the textbook's by name and grades each on several drawn cases
(masked attention rows, repeated token ids, padding targets, dropout on and off, length 1):
float64 central differences of the learner's forward (see :mod:`numpy_transformer.gradcheck`),
and the textbook's backward for whether the result is exact and, when it is wrong, which known
mistake it looks like. ``learner_functions(path)`` gives the functions that ``learn train`` runs
the model on (the "learner" kernel set of :mod:`numpy_transformer.kernels`).

The learner's file is their code: it is run (that is the point), and whatever it raises is
caught and shown as theirs, with their file and line, never as a traceback of this package.
"""

from __future__ import annotations
import __future__

import difflib
import importlib.util
import inspect
import math
import re
import signal
import sys
import threading
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy

from . import blocks, functional
from .backend import Array, get_array_module, to_numpy
from .backward_contract import backward_writes, random_upstream
from .files import write_text_atomically
from .gradcheck import gradcheck
from .machine import require

WORKBOOK = "my_backprop.py"
GUIDE = "README.md"

# ------------------------------------------------------------------------------------------------
# the recognisable mistakes: one sentence each, named so that the tests can ask for them

SENTENCES = {
    "rows_sum": "the sum over positions is missing or partial: a parameter is used at every position "
    "of every leading axis, so its gradient adds up all of them",
    "transposed": "it is transposed: a gradient has the shape of what it is the gradient of",
    "sign": "the sign is flipped",
    "factor": "it is off by a constant factor of {factor:.6g}",
    "zero": "it is zero everywhere",
    "ln_mean": "the mean term of layer norm is missing: x also reaches the output through mu",
    "ln_var": "the variance term of layer norm is missing: x also reaches the output through sigma",
    "ln_both": "both the mean and the variance terms of layer norm are missing: x also reaches "
    "the output through mu and sigma",
    "softmax_row_sum": "softmax backward without its row coupling: every output of a row depends on every "
    "input of the row (the outputs sum to 1), so each dx entry has a term from the whole row",
    "scale_forgotten": "the 1/sqrt(d) scale is forgotten: the scores were multiplied by it, so dq and dk are too",
    "scale_twice": "the 1/sqrt(d) scale is applied twice",
    "repeated_ids": "repeated ids are overwritten instead of added: every position holding a token "
    "adds its gradient to that token's row (add.at, not assignment)",
    "mask_leak": "masked positions leak gradient: a masked score is a constant, so its gradient is 0",
    "padding_leak": "padding leaks gradient: positions whose target is padding take no part in the loss",
    "dropout_scale": "the dropout mask is not rescaled: the forward divided by 1 - p, so the backward does too",
    "dropout_mask": "the dropout mask is not applied: entries the forward dropped get no gradient",
    "dropout_dv": "dv uses P where the forward used dropout(P): v was multiplied by the dropped probabilities",
    "token_count": "the loss is not divided by its token count: it is the mean over the non-padding tokens",
    "token_count_pad": "the loss is divided by every position's count, padding included: only the "
    "non-padding tokens are counted",
    "upstream": "the upstream gradient (dloss) is not multiplied in",
    "label_smoothing": "label smoothing is left out: the target distribution is (1 - eps) one_hot + eps / V",
    "embedding_scale": "the sqrt(D) scale of the embedding is forgotten: the forward multiplied the rows by it",
    "residual_dropped": "a residual's skip path is dropped: x reaches the output along the skip and "
    "along the branch, so its gradient is the sum of both",
    "norm_path": "the norm's backward is on the wrong path: in pre-norm the norm is on the branch only (the "
    "skip's gradient passes it by); in post-norm it comes after the sum (both paths' gradients pass through it)",
    "memory_one_layer": "the encoder output's gradient is kept from one decoder layer only: it feeds the "
    "cross-attention of every decoder layer, so their gradients add",
    "tied_not_added": "the tied matrix gets only one of its gradients: tgt_table is the target embedding and "
    "the output projection, so its two gradients add",
    "layer_order": "the layers are undone in the forward's order: the backward goes through the last layer "
    "first, each layer receiving the gradient of the one above it",
    "skipped": "it is fed the gradient reaching {above}: a gradient comes back through every piece in "
    "between, each through its own backward",
    "positional_added": "the positional table is added on the way back: the forward added a constant, so "
    "the gradient passes through unchanged",
    "paths": "a tensor feeding several paths (queries, keys, values, the latent) gets only some of "
    "their gradients: the gradients of every path must be added",
    "relu_skipped": "the relu's backward is left out: the forward zeroed every hidden unit whose input was "
    "not positive, so those units get no gradient (relu_backward with the forward's mask)",
    "relu_mask": "the relu's mask is taken from the gradient: the slope is 1 where the forward's input was "
    "positive (the mask in the cache), whatever the sign of the gradient",
    "swapped": "a gradient is returned under another parameter's key: {name} holds the gradient of "
    "{other}; each key takes the gradient of its own parameter",
    "counted_twice": "a gradient is counted twice: where paths meet, each path's gradient is added once",
    "averaged": "the paths' gradients are averaged: where paths meet, their gradients add",
    "stray_factor": "it is scaled by {factor:.6g}, a constant the forward does not have: between its "
    "pieces a block's backward hands each gradient on unchanged, or adds those that meet",
    "memory_dropped": "the memory's gradient is dropped: the memory feeds the cross-attention's keys and "
    "values, so dmemory is what that attention's backward returns for them (its dx_kv)",
    "wrong_cache": "a piece's backward is handed another piece's cache: {where}'s is used twice, {other}'s "
    "never; each backward takes the cache its own forward returned",
}


def sentence(key: str, **values: Any) -> str:
    """The sentence of a recognised mistake, its numbers filled in."""
    return SENTENCES[key].format(**values)


# ------------------------------------------------------------------------------------------------
# the exercises, easy to hard


@dataclass(frozen=True)
class Exercise:
    backward: str  # the textbook's name of the backward the learner writes
    forward: str
    grads: tuple[str, ...]  # what the backward returns, in order
    signature: str  # of the backward, as the workbook writes it
    doc: str  # the workbook's docstring, the contract: receives, returns, every shape (the insight: HINTS)
    params: bool = False  # a block: the last of grads is a dict, dparams, with the keys of params

    @property
    def title(self) -> str:
        return self.backward.removesuffix("_backward").replace("_", " ")


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        "positional_encoding_backward",
        "positional_encoding_forward",
        ("dx",),
        "(dout, cache)",
        """Gradient of y = x + PE[start : start + T] (the table is a constant).

        dout: (B, T, D) the gradient reaching y; cache: None.
        Returns dx: (B, T, D).""",
    ),
    Exercise(
        "relu_backward",
        "relu_forward",
        ("dx",),
        "(dout, cache)",
        """Gradient of y = max(x, 0).

        dout: any shape; cache: the boolean mask x > 0 of the same shape.
        Returns dx: the shape of dout.""",
    ),
    Exercise(
        "dropout_backward",
        "dropout_forward",
        ("dx",),
        "(dout, cache)",
        """Gradient of inverted dropout y = x * m / (1 - p).

        dout: any shape; cache: None (evaluation or p = 0: y = x) or a DropoutCache(keep, keep_prob),
        keep the boolean mask m of dout's shape, keep_prob = 1 - p.
        Returns dx: the shape of dout.""",
    ),
    Exercise(
        "linear_backward",
        "linear_forward",
        ("dx", "dweight", "dbias"),
        "(dout, cache)",
        """Gradient of y = x W^T + b, W stored (out, in).

        dout: (..., out); cache: LinearCache(x (..., in), weight (out, in), has_bias).
        Returns (dx (..., in), dweight (out, in), dbias (out,) or None when has_bias is false).""",
    ),
    Exercise(
        "embedding_backward",
        "embedding_forward",
        ("dtable",),
        "(dout, cache)",
        """Gradient of y = E[ids] * sqrt(D) with respect to the table E.

        dout: (B, T, D); cache: EmbeddingCache(ids (B, T) integers, table_shape (V, D), scale sqrt(D)).
        Returns dtable: (V, D), zero for tokens that do not occur.""",
    ),
    Exercise(
        "softmax_backward",
        "softmax_forward",
        ("dx",),
        "(dout, cache)",
        """Gradient of y = softmax(x) along the last axis.

        dout: (..., n); cache: y itself, (..., n).
        Returns dx: (..., n).""",
    ),
    Exercise(
        "cross_entropy_backward",
        "cross_entropy_forward",
        ("dlogits",),
        "(dloss, cache)",
        """Gradient of the mean label-smoothed cross-entropy over the non-padding tokens.

        dloss: a float, the gradient reaching the loss; cache: CrossEntropyCache(probs (N, V) =
        softmax of the logits, targets (N,) with padding replaced by 0, valid (N,) true where the
        target is not padding, n_valid, label_smoothing eps, shape of the logits (..., V)).
        Returns dlogits: the shape of the logits.""",
    ),
    Exercise(
        "layer_norm_backward",
        "layer_norm_forward",
        ("dx", "dgamma", "dbeta"),
        "(dout, cache)",
        """Gradient of y = gamma * xhat + beta, xhat = (x - mean(x)) / sqrt(var(x) + eps) per row.

        dout: (..., D); cache: LayerNormCache(xhat (..., D), rstd = 1 / sigma (..., 1), gamma (D,)).
        Returns (dx (..., D), dgamma (D,), dbeta (D,)).""",
    ),
    Exercise(
        "attention_backward",
        "attention_forward",
        ("dq", "dk", "dv"),
        "(dout, cache)",
        """Gradient of scaled dot-product attention y = dropout(P) v, P = softmax(q k^T * scale).

        dout: (B, H, T, K); cache: AttentionCache(q (B, H, T, K), k, v (B, H, S, K), mask
        (broadcastable to (B, H, T, S), false where a query may not see a key) or None, probs P
        (B, H, T, S), dropped = dropout(P), dropout (a DropoutCache or None), scale).
        Returns (dq (B, H, T, K), dk (B, H, S, K), dv (B, H, S, K)).""",
    ),
    Exercise(
        "multi_head_attention_backward",
        "multi_head_attention_forward",
        ("dx_q", "dx_kv", "dw_qkv", "dw_o", "db_qkv", "db_o"),
        "(dout, cache)",
        """Gradient of cross-attention y = MultiHead(x_q W_q^T + b_q, x_kv W_k^T + b_k, x_kv W_v^T + b_v)
        W_o^T + b_o (the biases are optional: b_qkv = [b_q; b_k; b_v] (3D,), b_o (D,)).

        dout: (B, T, D); cache: MultiHeadAttentionCache(q, k, v, heads, output): q, k, v, output a
        LinearCache each, heads a MultiHeadCache(attention, n_heads), attention an AttentionCache.
        Returns (dx_q (B, T, D), dx_kv (B, S, D), dw_qkv (3D, D) = [dW_q; dW_k; dW_v], dw_o (D, D),
        db_qkv (3D,), db_o (D,)); the two bias gradients are None when the forward had no biases.""",
    ),
    Exercise(
        "multi_head_self_attention_backward",
        "multi_head_self_attention_forward",
        ("dx", "dw_qkv", "dw_o", "db_qkv", "db_o"),
        "(dout, cache)",
        """Gradient of self-attention: cross-attention of x with itself.

        dout: (B, T, D); cache: a MultiHeadAttentionCache as above.
        Returns (dx (B, T, D), dw_qkv (3D, D), dw_o (D, D), db_qkv (3D,) or None, db_o (D,) or None).""",
    ),
    Exercise(
        "multi_head_latent_attention_backward",
        "multi_head_latent_attention_forward",
        ("dx_q", "dx_kv", "dw_q_compress", "dw_kv_decompress", "dw_o"),
        "(dout, cache)",
        """Gradient of Multi-Head Latent Attention: Q = x_q W_q^T, C = x_kv W_c^T (B, S, L),
        K = C W_kd^T, V = C W_vd^T, y = MultiHead(Q, K, V) W_o^T.

        dout: (B, T, D); cache: LatentAttentionCache(q, latent, k, v, heads, output): a LinearCache
        each but heads, a MultiHeadCache(attention, n_heads).
        Returns (dx_q (B, T, D), dx_kv (B, S, D), dw_q_compress (D + L, D) = [dW_q; dW_c],
        dw_kv_decompress (2D, L) = [dW_kd; dW_vd], dw_o (D, D)).""",
    ),
    Exercise(
        "multi_head_latent_self_attention_backward",
        "multi_head_latent_self_attention_forward",
        ("dx", "dw_q_compress", "dw_kv_decompress", "dw_o"),
        "(dout, cache)",
        """Gradient of latent self-attention: the queries and the latent both from x.

        dout: (B, T, D); cache: a LatentAttentionCache as above.
        Returns (dx (B, T, D), dw_q_compress, dw_kv_decompress, dw_o).""",
    ),
    Exercise(
        "residual_backward",
        "residual_forward",
        ("dx", "dparams"),
        "(dout, cache)",
        """Gradient of a residual connection around a linear sublayer f, pre-norm y = x + f(norm(x))
        or post-norm y = norm(x + f(x)).

        dout: (..., D); cache: ResidualCache(norm, sublayer, norm_first).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).""",
        params=True,
    ),
    Exercise(
        "feed_forward_backward",
        "feed_forward_forward",
        ("dx", "dparams"),
        "(dout, cache)",
        """Gradient of the feed-forward block y = relu(x W1^T + b1) W2^T + b2.

        dout: (..., D); cache: FeedForwardCache(first, activation, second).
        Returns (dx (..., D), dparams): a dict with the keys w1, b1, w2, b2.""",
        params=True,
    ),
    Exercise(
        "encoder_block_backward",
        "encoder_block_forward",
        ("dx", "dparams"),
        "(dout, cache)",
        """Gradient of a pre-norm encoder block: x = x + SelfAttention(norm_1(x)), y = x +
        FeedForward(norm_2(x)).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, norm_2, feed_forward).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, w_qkv, w_o,
        ln2_gamma, ln2_beta, w1, b1, w2, b2.""",
        params=True,
    ),
    Exercise(
        "decoder_block_backward",
        "decoder_block_forward",
        ("dx", "dmemory", "dparams"),
        "(dout, cache)",
        """Gradient of a pre-norm decoder block: causal self-attention, cross-attention over the
        encoder's output memory, feed-forward, each inside a residual connection.

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, norm_2, cross_attention,
        norm_3, feed_forward).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta,
        self_w_qkv, self_w_o, ln2_gamma, ln2_beta, cross_w_qkv, cross_w_o, ln3_gamma, ln3_beta, w1,
        b1, w2, b2.""",
        params=True,
    ),
    Exercise(
        "encoder_decoder_backward",
        "encoder_decoder_forward",
        ("dparams",),
        "(dloss, cache)",
        """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, tgt_embedding, encoder (a list of
        EncoderBlockCache), encoder_norm, decoder (a list of DecoderBlockCache), decoder_norm,
        projection, loss, n_layers).
        Returns dparams: a dict with every key of params (src_table, tgt_table, enc{i}_*, dec{i}_*,
        enc_norm_*, dec_norm_*).""",
        params=True,
    ),
)
BY_NAME = {exercise.backward: exercise for exercise in EXERCISES}
BLOCKS = frozenset(e.backward for e in EXERCISES if e.params) | frozenset(
    e.forward for e in EXERCISES if e.params
)  # the exercises whose textbook is numpy_transformer.blocks (learn train trains them in its encoder-decoder)


def textbook_function(name: str) -> Callable:
    """The textbook's function ``name``: of functional.py, or of blocks.py for the blocks."""
    return getattr(blocks if name in BLOCKS else functional, name)


# ------------------------------------------------------------------------------------------------
# learn start


def _cache_types(function: Callable) -> list[type]:
    """The NamedTuple caches a forward returns, and those they hold, from its annotations."""
    found: list[type] = []
    kinds = {n: getattr(home, n) for home in (functional, blocks) for n in dir(home) if n.endswith("Cache")}
    source = inspect.getsource(function)
    for name, kind in kinds.items():
        if isinstance(kind, type) and f"{name}(" in source and kind not in found:
            found.append(kind)
    for kind in found:  # grows while it is read: the caches the caches hold
        for annotation in getattr(kind, "__annotations__", {}).values():
            for word in str(annotation).replace("[", " ").replace("]", " ").split():
                inner = kinds.get(word)
                if isinstance(inner, type) and inner not in found:
                    found.append(inner)
    return found


def forward_source(exercise: Exercise, shown: set[str] | None = None) -> str:
    """The textbook's code of the exercise's forward, of the forwards it calls from the heads'
    plumbing, and of the cache NamedTuples it keeps: read from functional.py itself, so that the
    workbook shows what the learner inverts and the real field order, never the backward."""
    shown = set() if shown is None else shown
    forward = textbook_function(exercise.forward)
    parts = []
    helpers = [functional.multi_head_forward] if "multi_head" in exercise.forward else []
    for kind in _cache_types(forward) + _cache_types(functional.multi_head_forward) * bool(helpers):
        if kind.__name__ not in shown:
            shown.add(kind.__name__)
            parts.append(inspect.getsource(kind))
    for function in [*helpers, forward]:
        if function.__name__ not in shown:
            shown.add(function.__name__)
            parts.append(inspect.getsource(function))
    if not parts:
        return f"{exercise.forward}: shown above"
    return "\n".join(part.rstrip() + "\n" for part in parts).rstrip()


def workbook_text(name: str = WORKBOOK) -> str:
    """The source of a fresh workbook, ``name`` the file it is written to (my_backprop.py or the
    notebook): every exercise a stub raising NotImplementedError."""
    imports = sorted(
        {e.forward for e in EXERCISES if e.forward not in BLOCKS} | {"merge_heads", "split_heads"}
    )
    block_imports = sorted(e.forward for e in EXERCISES if e.forward in BLOCKS)
    lines = [
        '"""My backward passes: one exercise for each backward of the Transformer, easiest first.',
        "",
        "Each backward receives dout, the gradient of the loss with respect to its forward's output,",
        "and the cache that forward saved, and returns the gradients of the forward's differentiable",
        "arguments in the order the forward takes them. The forwards are the textbook's, imported",
        "below; above each exercise is the code of its forward and of the cache it keeps (no need to",
        "open functional.py: the backwards, the answers, are there). Replace each",
        "`raise NotImplementedError` with your code, then check it:",
        "",
        f"    numpy-transformer learn check {name} relu_backward",
        f"    numpy-transformer learn check {name}              # the whole ladder",
        f"    numpy-transformer learn status {name}             # done, ready, locked behind what",
        f"    numpy-transformer learn hint {name} relu_backward # a hint, one step further each time",
        f"    numpy-transformer learn train {name}              # a translator on your backward passes",
        "",
        "Each docstring gives the contract (what comes in, the cache, every shape, what to return);",
        "what to notice is yours to find, or learn hint's to give.",
        *(
            [
                "",
                f"A cell whose first line is `{SCRATCH}` is yours to try things in: learn check, status and",
                "train skip it.",
            ]
            if name.endswith(".ipynb")
            else []
        ),
        "Array operations go through xp = get_array_module() (NumPy here, CuPy on a GPU). Your later",
        "exercises may call your earlier ones (multi-head attention calls your linear_backward and",
        "attention_backward). You may also write a forward of your own under the textbook's name:",
        "it is checked with your backward.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import math",
        "",
        "from numpy_transformer.backend import get_array_module",
        "from numpy_transformer.blocks import (",
        *[f"    {name}," for name in block_imports],
        ")",
        "from numpy_transformer.functional import (",
        *[f"    {name}," for name in imports],
        ")",
        "",
    ]
    shown: set[str] = set()
    for exercise in EXERCISES:
        lines += [
            "",
            f"# {exercise.title}: the forward is {exercise.forward} (imported above), the textbook's code:",
            "#",
            *[f"#   {line}" if line else "#" for line in forward_source(exercise, shown).splitlines()],
            "",
            f"def {exercise.backward}{exercise.signature}:",
            '    """' + exercise.doc.replace("\n        ", "\n    "),
            '    """',
            "    raise NotImplementedError",
            "",
        ]
    return "\n".join(lines)


def guide_text() -> str:
    """The workbook's README.md: the order to work in and how to check."""
    ladder = "\n".join(
        f"{number}. `{exercise.backward}` ({exercise.title}): returns {', '.join(exercise.grads)}"
        for number, exercise in enumerate(EXERCISES, 1)
    )
    layers = sum(not e.params for e in EXERCISES)
    return f"""# Learn backprop by writing it

`{WORKBOOK}` holds one exercise for each backward pass of the Transformer, from one layer to the
whole translator: above each is the textbook's code of its forward and of the cache it keeps (no
need to open `numpy_transformer/functional.py` or `blocks.py`, where the answers are), its
docstring says what the backward receives, what it returns, every shape, and gives a hint; its
body raises `NotImplementedError` until you write it. Work in this order, easy to hard: the
layers (1 to {layers}), then the blocks built from them ({layers + 1} to {len(EXERCISES)}), the last the
whole encoder-decoder with its loss:

{ladder}

Check one function as soon as you have written it, or the whole ladder (done / to do / wrong):

```bash
numpy-transformer learn check {WORKBOOK} layer_norm_backward
numpy-transformer learn check {WORKBOOK}
numpy-transformer learn status {WORKBOOK}                     # the ladder: done, ready, locked behind what
numpy-transformer learn hint {WORKBOOK} layer_norm_backward   # one step further each time
```

Each function is run on several drawn cases, the traps included (fully and partly masked
attention rows, repeated token ids, padding targets, dropout on and off, 2-D, 3-D and 4-D
inputs, batch and length 1, pre- and post-norm), and each gradient it returns is compared with
float64 central differences of the forward: ✔ exact (equal to the textbook's to rounding),
≈ close (the largest absolute and relative error), ✖ wrong (the worst entry, yours and the
expected value, and the mistake it looks like where it is a known one, without the formula:
`learn hint` gives that when you ask). A function that raises, exits or runs past
{TIME_LIMIT:g} seconds is reported as yours, as is a file whose import does. The exit status is 0
only when every function checked passes.

Inside your own backward, `from numpy_transformer.learn import cmp, textbook` compares an
intermediate with the textbook's: `cmp("dscores", dscores, textbook(cache, dout)["dscores"])`
prints exact / approximately equal / wrong and the largest difference.

When the layers are done, train a small translator on them:

```bash
numpy-transformer learn train {WORKBOOK}
```

Without options it trains the copy task (400 steps of a one-layer model of width 32: a few
seconds on two idle cores), then the textbook's own code on the same seed (as long again;
`--no-compare` skips it), and prints both dev results side by side. It takes every option of
`numpy-transformer train` (`--task numbers-en-fr`, `--steps`, `--attention mla`, ...) and saves
into `runs/{Path(WORKBOOK).stem}-N` beside this file, a new N each run.

The model runs your layer functions wherever you wrote them (your forward too, if you wrote one)
and says which of them it ran: the latent-attention exercises only with `--attention mla`. Its
blocks are the textbook's modules composing your layer functions. When you have written block
exercises too (`feed_forward_backward`, `encoder_block_backward`, `decoder_block_backward`,
`encoder_decoder_backward`), learn train then trains the encoder-decoder of `blocks.py` itself on
the same task, steps and sizes (float64, a plain Adam), its gradients from your
`encoder_decoder_backward` or else from the textbook's calling your blocks and layer functions,
then the textbook's own blocks on the same seed, and prints both teacher-forced dev losses and
token accuracies on one line (`residual_backward` is checked by `learn check` only: that model has
no such block). A wrong backward shows: the model learns less, or not at all.
"""


NOTEBOOK = "my_backprop.ipynb"
SCRATCH = "# scratch"  # a notebook cell starting so is never run by check, status or train


def notebook_text() -> str:
    """The workbook as a Jupyter notebook (JSON): one cell for the imports, one per exercise (jupytext's
    percent format, read back as a notebook)."""
    require("a notebook workbook", "jupytext")
    import jupytext  # type: ignore[import-untyped]

    text = workbook_text(NOTEBOOK)
    marked = ["# %%"]
    for line in text.split("\n"):
        if line.startswith("# ") and ": the forward is " in line:
            marked.append("# %%")
        marked.append(line)
    notebook = jupytext.reads("\n".join(marked), fmt="py:percent")
    return str(jupytext.writes(notebook, fmt="ipynb"))


def start(directory: str | Path, overwrite: bool = False, notebook: bool = False) -> list[Path]:
    """Write a fresh workbook (``my_backprop.py``, or ``my_backprop.ipynb`` with ``notebook``, and
    ``README.md``) into ``directory``.

    Refuses (FileExistsError) where either file exists, unless ``overwrite``: the learner's work
    is never lost by accident. Each file is written atomically. Returns the paths written.
    """
    if not isinstance(directory, (str, Path)):
        raise TypeError(f"directory must be a path, got {type(directory).__name__}")
    folder = Path(directory).expanduser()
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{folder} exists and is not a directory")
    workbook = NOTEBOOK if notebook else WORKBOOK
    paths = [folder / workbook, folder / GUIDE]
    present = [path for path in paths if path.exists()]
    if present and not overwrite:
        raise FileExistsError(
            f"{present[0]} exists: a workbook is never overwritten (--overwrite replaces it, your work included)"
        )
    texts = (notebook_text() if notebook else workbook_text(), guide_text().replace(WORKBOOK, workbook))
    folder.mkdir(parents=True, exist_ok=True)
    for path, text in zip(paths, texts):
        write_text_atomically(path, text)
    return paths


# ------------------------------------------------------------------------------------------------
# loading the learner's file


class LearnerCodeError(Exception):
    """The learner's own code raised: the message is theirs, with their file and line."""


_NOTEBOOK_CELLS: dict[Path, list[int]] = {}  # a loaded notebook's script: the line each cell starts at


def _place(path: Path, line: int | None) -> str:
    """'file:line', or for a notebook 'file, cell N line M' (its cells counted from 1 as shown)."""
    starts = _NOTEBOOK_CELLS.get(path)
    if not starts or line is None or line < starts[0]:
        return f"{path.name}:{line}"
    cell = max(i for i, start in enumerate(starts) if start <= line)
    return f"{path.name}, cell {cell + 1} line {line - starts[cell]}"


def _their_frames(error: BaseException, path: Path) -> str:
    """'file:line in function' of the innermost frame of the learner's file in error's traceback,
    and the outermost one too when they differ ('..., called from file:line in block_backward'):
    a block's backward that passes the wrong array raises inside the layer it calls."""
    frames = traceback.extract_tb(error.__traceback__)
    theirs = [frame for frame in frames if Path(frame.filename).resolve() == path]
    frame = theirs[-1] if theirs else (frames[-1] if frames else None)
    if isinstance(error, SyntaxError) and error.filename and Path(error.filename).resolve() == path:
        return _place(path, error.lineno)
    if frame is None:
        return ""
    where = f"{_place(Path(frame.filename).resolve(), frame.lineno)} in {frame.name}"
    if len(theirs) > 1 and theirs[0].name != frame.name:
        where += f", called from {_place(path, theirs[0].lineno)} in {theirs[0].name}"
    return where


def describe_error(error: BaseException, path: Path) -> str:
    """One line: the exception as the learner would read it, and where in their file it was raised."""
    where = _their_frames(error, path)
    said = error.msg if isinstance(error, SyntaxError) else str(error)  # its place is said once, as theirs
    text = f"{type(error).__name__}: {said}" if said else type(error).__name__
    return f"{text} ({where})" if where else text


def load_learner(path: str | Path) -> ModuleType:
    """Import the learner's file from its path (their code runs). The textbook's own file is the
    textbook module itself. Raises FileNotFoundError, or LearnerCodeError when importing it raised."""
    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a path to a Python file, got {type(path).__name__}")
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if file.suffix not in (".py", ".ipynb"):
        raise ValueError(f"{path}: expected a Python file (.py) or a notebook (.ipynb)")
    if file == Path(functional.__file__).resolve():
        return functional
    name = f"numpy_transformer_learner_{abs(hash(str(file)))}"
    if file.suffix == ".ipynb":
        module = ModuleType(name)
        module.__file__ = str(file)
        script, flags = _notebook_source(file)

        def run() -> None:  # a syntax error is theirs too, named by cell and line
            exec(compile(script, str(file), "exec", flags=flags, dont_inherit=True), module.__dict__)

    else:
        spec = importlib.util.spec_from_file_location(name, file)
        if spec is None or spec.loader is None:
            raise ValueError(f"{path}: cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        loader = spec.loader

        def run() -> None:
            loader.exec_module(module)

    sys.modules[name] = module
    folder = str(file.parent)  # their file may import a module of its own folder, wherever they run from
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        with _time_limit(TIME_LIMIT):
            run()
    except BaseException as error:  # their import-time code: a syntax error, a failing import, anything
        sys.modules.pop(name, None)
        if isinstance(error, KeyboardInterrupt):
            raise
        if isinstance(error, _TimedOut):
            raise LearnerCodeError(
                f"{path} could not be imported: its top-level code was still running after {TIME_LIMIT:g} "
                f"seconds ({_their_frames(error, file)}); code outside a function runs on every import: "
                'put it inside a function, or under `if __name__ == "__main__":`'
            ) from None
        raise LearnerCodeError(f"{path} could not be imported: {describe_error(error, file)}") from None
    finally:
        if added:
            with suppress(ValueError):
                sys.path.remove(folder)
    return module


def _notebook_source(file: Path) -> tuple[str, int]:
    """A notebook's cells as one script (magics commented out, markdown as comments), each cell
    after a ``# %%`` line; where each starts is kept so that an error names the cell. With it the
    compiler flags of its ``from __future__`` imports, which are commented out: in Jupyter a cell
    may hold them wherever it sits (a cell added above the first), in one script only its start."""
    require(f"{file.name} (a notebook)", "jupytext")
    import jupytext

    try:
        notebook = jupytext.read(file)
    except Exception as error:  # not JSON, not a notebook
        raise LearnerCodeError(f"{file.name} could not be read as a notebook: {error}") from None
    for cell in notebook.cells:  # scratch cells are the learner's to try things in: never run
        if cell.cell_type == "code" and cell.source.lstrip().startswith(SCRATCH):
            cell.source = f"{SCRATCH} (not run)"
    lines = str(jupytext.writes(notebook, fmt="py:percent")).split("\n")
    _NOTEBOOK_CELLS[file] = [n for n, line in enumerate(lines, 1) if line.startswith("# %%")]
    flags = 0
    for number, line in enumerate(lines):
        future = re.fullmatch(r"from __future__ import ([\w ,]+)", line.rstrip())
        names = [name.strip() for name in future.group(1).split(",")] if future else []
        if names and set(names) <= set(__future__.all_feature_names):  # an unknown one: compile names it
            flags |= sum(getattr(__future__, name).compiler_flag for name in names)
            lines[number] = f"# {line}"  # the same number of lines: an error names the cell and line
    return "\n".join(lines), flags


def _own(module: ModuleType, name: str) -> Callable | None:
    """The function ``name`` as the learner's file defines it (None if absent or imported)."""
    value = getattr(blocks if module is functional and name in BLOCKS else module, name, None)
    if not callable(value):
        return None
    if module is functional:
        return value
    if value is getattr(functional, name, None) or value is getattr(blocks, name, None):
        return None
    return value


# ------------------------------------------------------------------------------------------------
# the drawn cases


@dataclass
class Case:
    label: str
    inputs: dict[str, Any]  # the forward's keyword arguments; float64 arrays named in grads are checked
    grads: tuple[str, ...]  # what the backward returns, "" where None is expected
    seed: int | None = None  # dropout on: a fresh generator of this seed is the forward's rng at each call
    dloss: float | None = None  # a loss: the scalar upstream gradient
    factors: dict[str, list[tuple[float, str]]] = field(
        default_factory=dict
    )  # grad -> (c, key): yours = c x right
    regions: dict[str, list[tuple[Array, str]]] = field(default_factory=dict)  # grad -> (where wrong, key)
    candidates: Callable[[Any, Any], dict[str, list[tuple[Array, str]]]] | None = None  # (cache, dout) -> ...
    max_entries: int | None = None  # central differences of this many entries per tensor (all when None)


def _normal(rng: numpy.random.Generator, *shape: int) -> Array:
    return get_array_module().asarray(rng.standard_normal(shape))


def _away_from_zero(rng: numpy.random.Generator, *shape: int) -> Array:
    """Normal entries at least 0.1 from 0, so that a central difference never straddles a kink."""
    x = rng.standard_normal(shape)
    return get_array_module().asarray(numpy.where(numpy.abs(x) < 0.1, numpy.sign(x + 1e-12) * 0.5, x))


def _cases_positional_encoding(rng: numpy.random.Generator) -> list[Case]:
    table = functional.sinusoidal_table(16, 6, numpy.float64)
    return [
        Case("x (2, 3, 6), start 0", {"x": _normal(rng, 2, 3, 6), "table": table}, ("x",)),
        Case("x (1, 1, 6), start 5", {"x": _normal(rng, 1, 1, 6), "table": table, "start": 5}, ("x",)),
    ]


def _cases_relu(rng: numpy.random.Generator) -> list[Case]:
    return [
        Case("x (3, 4)", {"x": _away_from_zero(rng, 3, 4)}, ("x",)),
        Case("x (2, 1, 5)", {"x": _away_from_zero(rng, 2, 1, 5)}, ("x",)),
    ]


def _dropout_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    return {} if cache is None else {"x": [(dout, "dropout_mask"), (dout / cache.keep_prob, "dropout_mask")]}


def _cases_dropout(rng: numpy.random.Generator) -> list[Case]:
    factors = {"x": [(1 - 0.25, "dropout_scale")]}
    return [
        Case(
            "x (3, 5), p 0.25, training",
            {"x": _normal(rng, 3, 5), "p": 0.25, "training": True},
            ("x",),
            seed=11,
            factors=factors,
            candidates=_dropout_candidates,
        ),
        Case(
            "x (2, 1, 4), p 0.5, training",
            {"x": _normal(rng, 2, 1, 4), "p": 0.5, "training": True},
            ("x",),
            seed=12,
            factors={"x": [(0.5, "dropout_scale")]},
            candidates=_dropout_candidates,
        ),
        Case(
            "x (3, 4), p 0.25, evaluation",
            {"x": _normal(rng, 3, 4), "p": 0.25, "training": False},
            ("x",),
            seed=13,
        ),
        Case(
            "x (1, 1), p 0, training", {"x": _normal(rng, 1, 1), "p": 0.0, "training": True}, ("x",), seed=14
        ),
    ]


def _cases_linear(rng: numpy.random.Generator) -> list[Case]:
    return [
        Case(
            "x (2, 3, 4), weight (5, 4), bias",
            {"x": _normal(rng, 2, 3, 4), "weight": _normal(rng, 5, 4), "bias": _normal(rng, 5)},
            ("x", "weight", "bias"),
        ),
        Case(
            "x (4, 3), weight (2, 3), no bias",
            {"x": _normal(rng, 4, 3), "weight": _normal(rng, 2, 3)},
            ("x", "weight", ""),
        ),
        Case(
            "x (2, 2, 3, 4), weight (3, 4), bias",
            {"x": _normal(rng, 2, 2, 3, 4), "weight": _normal(rng, 3, 4), "bias": _normal(rng, 3)},
            ("x", "weight", "bias"),
        ),
        Case(
            "x (4, 3), weight (2, 3), bias",
            {"x": _normal(rng, 4, 3), "weight": _normal(rng, 2, 3), "bias": _normal(rng, 2)},
            ("x", "weight", "bias"),
        ),
        Case(
            "x (1, 1, 3), weight (6, 3), bias",
            {"x": _normal(rng, 1, 1, 3), "weight": _normal(rng, 6, 3), "bias": _normal(rng, 6)},
            ("x", "weight", "bias"),
        ),
    ]


def _repeated_rows(ids: Any, vocab: int, width: int) -> Array:
    counts = numpy.bincount(numpy.asarray(to_numpy(ids)).reshape(-1), minlength=vocab)
    return numpy.repeat((counts > 1)[:, None], width, axis=1)


def _cases_embedding(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()
    cases = []
    for label, ids, vocab, width in (
        ("ids (2, 4) with repeats, table (5, 6)", [[1, 3, 1, 0], [3, 3, 2, 4]], 5, 6),
        ("ids (1, 1), table (3, 4)", [[2]], 3, 4),
        ("ids (1, 5), one sentence with repeats, table (4, 3)", [[2, 0, 2, 2, 1]], 4, 3),
        ("ids (2, 3) all one token, table (4, 2)", [[1, 1, 1], [1, 1, 1]], 4, 2),
    ):
        token_ids = xp.asarray(ids)
        cases.append(
            Case(
                label,
                {"ids": token_ids, "table": _normal(rng, vocab, width)},
                ("table",),
                factors={"table": [(1 / math.sqrt(width), "embedding_scale")]},
                regions={"table": [(_repeated_rows(token_ids, vocab, width), "repeated_ids")]},
            )
        )
    return cases


def _softmax_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    return {"x": [(cache * dout, "softmax_row_sum")]}


def _cases_softmax(rng: numpy.random.Generator) -> list[Case]:
    return [
        Case("x (3, 5)", {"x": _normal(rng, 3, 5)}, ("x",), candidates=_softmax_candidates),
        Case("x (2, 1, 4)", {"x": _normal(rng, 2, 1, 4)}, ("x",), candidates=_softmax_candidates),
        Case("x (4, 1), one column", {"x": _normal(rng, 4, 1)}, ("x",), candidates=_softmax_candidates),
    ]


def _cross_entropy_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    """dlogits with each of the loss's known mistakes: label smoothing left out, padding counted
    (in the gradient, or in the mean), the sum for the mean, dloss not multiplied in."""
    xp = get_array_module()
    probs, targets, valid, n_valid, smoothing, shape = cache
    rows = xp.arange(probs.shape[0])
    one_hot = xp.zeros_like(probs)
    one_hot[rows, targets] = 1.0
    smoothed = (1 - smoothing) * one_hot + smoothing / probs.shape[-1]
    right = (probs - smoothed) * valid[:, None] * (dout / n_valid)
    return {
        "logits": [
            (((probs - one_hot) * (valid[:, None] * (dout / n_valid))).reshape(shape), "label_smoothing"),
            (((probs - smoothed) * (dout / n_valid)).reshape(shape), "padding_leak"),
            ((right * n_valid).reshape(shape), "token_count"),
            ((right * n_valid / probs.shape[0]).reshape(shape), "token_count_pad"),
            ((right / dout).reshape(shape), "upstream"),
        ]
    }


def _cases_cross_entropy(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()
    cases = []
    for label, targets, vocab, pad, smoothing, dloss in (
        ("logits (2, 3, 5), padding targets, smoothing 0.1", [[2, 4, 0], [1, 0, 0]], 5, 0, 0.1, 1.3),
        ("logits (4, 3), no padding, no smoothing", [0, 2, 1, 1], 3, None, 0.0, 0.7),
        ("logits (1, 1, 4), one token, smoothing 0.2", [[3]], 4, 0, 0.2, 2.0),
    ):
        target_ids = xp.asarray(targets)
        flat = numpy.asarray(targets).reshape(-1)
        n_valid = int((flat != pad).sum()) if pad is not None else flat.size
        factors = [(float(n_valid), "token_count"), (1 / dloss, "upstream")]
        if n_valid != flat.size:
            factors.append((n_valid / flat.size, "token_count_pad"))
        padded = numpy.repeat((flat == pad)[:, None], vocab, axis=1).reshape((*numpy.shape(targets), vocab))
        cases.append(
            Case(
                label,
                {
                    "logits": _normal(rng, *numpy.shape(targets), vocab),
                    "targets": target_ids,
                    "pad_id": pad,
                    "label_smoothing": smoothing,
                },
                ("logits",),
                dloss=dloss,
                factors={"logits": factors},
                regions={"logits": [(padded, "padding_leak")]},
                candidates=_cross_entropy_candidates,
            )
        )
    return cases


def _layer_norm_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    xhat, rstd, gamma = cache
    g = dout * gamma
    mean_g = g.mean(axis=-1, keepdims=True)
    mean_g_xhat = (g * xhat).mean(axis=-1, keepdims=True)
    return {
        "x": [
            (rstd * (g - xhat * mean_g_xhat), "ln_mean"),
            (rstd * (g - mean_g), "ln_var"),
            (rstd * g, "ln_both"),
        ]
    }


def _cases_layer_norm(rng: numpy.random.Generator) -> list[Case]:
    def case(label: str, shape: tuple[int, ...]) -> Case:
        width = shape[-1]
        return Case(
            label,
            {"x": _normal(rng, *shape), "gamma": 1 + 0.5 * _normal(rng, width), "beta": _normal(rng, width)},
            ("x", "gamma", "beta"),
            candidates=_layer_norm_candidates,
        )

    return [
        case("x (2, 3, 6)", (2, 3, 6)),
        case("x (5, 3)", (5, 3)),
        case("x (1, 1, 4)", (1, 1, 4)),
        case("x (2, 2, 2, 5)", (2, 2, 2, 5)),
    ]


def _attention_variants(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    """The textbook's attention backward with one known mistake at a time: (dq, dk, dv) for each."""
    xp = get_array_module()
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    found: dict[str, list[tuple[Array, str]]] = {"q": [], "k": [], "v": []}

    def add(key: str, dprobs: Any, zero_masked: bool = True, row_sum: bool = True, dv: Any = None) -> None:
        dscores = functional.softmax_backward(dprobs, probs) if row_sum else probs * dprobs
        if mask is not None and zero_masked:
            dscores = xp.where(mask, dscores, 0.0)
        found["q"].append(((dscores @ k) * scale, key))
        found["k"].append(((dscores.swapaxes(-1, -2) @ q) * scale, key))
        found["v"].append((dropped.swapaxes(-1, -2) @ dout if dv is None else dv, key))

    ddropped = dout @ v.swapaxes(-1, -2)
    dprobs = functional.dropout_backward(ddropped, dropout_cache)
    if mask is not None:
        add("mask_leak", dprobs, zero_masked=False)
    add("softmax_row_sum", dprobs, row_sum=False)
    if dropout_cache is not None:
        add("dropout_scale", ddropped * dropout_cache.keep)
        add("dropout_mask", ddropped)
        found["v"].append((probs.swapaxes(-1, -2) @ dout, "dropout_dv"))
    return found


def _cases_attention(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()

    def case(label: str, b: int, h: int, t: int, s: int, width: int, mask: Any, **extra: Any) -> Case:
        scale_factors = [(math.sqrt(width), "scale_forgotten"), (1 / math.sqrt(width), "scale_twice")]
        seed = extra.pop("seed", None)
        return Case(
            label,
            {
                "q": _normal(rng, b, h, t, width),
                "k": _normal(rng, b, h, s, width),
                "v": _normal(rng, b, h, s, width),
                "mask": mask,
                **extra,
            },
            ("q", "k", "v"),
            seed=seed,
            factors={"q": scale_factors, "k": scale_factors},
            candidates=_attention_variants,
        )

    partly = numpy.ones((2, 1, 3, 5), dtype=bool)
    partly[0, 0, 0, 3:] = False
    partly[1, 0, 2, 1:] = False
    partly[1, 0, 1, :] = False  # a query that may see no key at all
    causal = numpy.tril(numpy.ones((4, 4), dtype=bool))[None, None]
    return [
        case(
            "q (2, 2, 3, 4), k, v (2, 2, 5, 4), rows partly and fully masked",
            2,
            2,
            3,
            5,
            4,
            xp.asarray(partly),
        ),
        case(
            "q, k, v (1, 2, 4, 3), causal mask, dropout 0.25",
            1,
            2,
            4,
            4,
            3,
            xp.asarray(causal),
            dropout_p=0.25,
            training=True,
            seed=21,
        ),
        case("q (1, 1, 1, 2), k, v (1, 1, 1, 2), no mask", 1, 1, 1, 1, 2, None),
        case(
            "q (2, 1, 2, 4), k, v (2, 1, 3, 4), no mask, dropout 0.5",
            2,
            1,
            2,
            3,
            4,
            None,
            dropout_p=0.5,
            training=True,
            seed=22,
        ),
    ]


def _path_candidates(kind: str) -> Callable[[Any, Any], dict[str, list[tuple[Array, str]]]]:
    """Candidates where a tensor feeding several paths gets only some of them."""

    def candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
        dheads, _, _ = functional.linear_backward(dout, cache.output)
        dq, dk, dv = functional.multi_head_backward(dheads, cache.heads)
        dx_q = functional.linear_backward(dq, cache.q)[0]
        if kind.startswith("latent"):
            dlatent_k = functional.linear_backward(dk, cache.k)[0]
            dlatent_v = functional.linear_backward(dv, cache.v)[0]
            dx_k = functional.linear_backward(dlatent_k, cache.latent)[0]
            dx_v = functional.linear_backward(dlatent_v, cache.latent)[0]
        else:
            dx_k = functional.linear_backward(dk, cache.k)[0]
            dx_v = functional.linear_backward(dv, cache.v)[0]
        if kind.endswith("self"):
            partial = [dx_q, dx_k, dx_v, dx_q + dx_k, dx_q + dx_v, dx_k + dx_v]
            return {"x": [(grad, "paths") for grad in partial]}
        return {"x_kv": [(dx_k, "paths"), (dx_v, "paths")]}

    return candidates


def _cases_multi_head(rng: numpy.random.Generator, latent: bool, self_attention: bool) -> list[Case]:
    xp = get_array_module()
    cases: list[Case] = []
    kind = ("latent" if latent else "mha") + ("-self" if self_attention else "")
    masked = numpy.ones((2, 1, 3, 4), dtype=bool)
    masked[0, 0, 1, :] = False
    masked[1, 0, :, 3] = False
    for label, b, t, s, width, heads, mask, extra in (
        ("B 2, T 3, S 4, D 8, 2 heads, a row fully masked", 2, 3, 4, 8, 2, masked, {}),
        (
            "B 1, T 1, S 1, D 4, 1 head, dropout 0.25",
            1,
            1,
            1,
            4,
            1,
            None,
            {"dropout_p": 0.25, "training": True},
        ),
        (
            "B 2, T 3, S 3, D 8, 4 heads, causal, dropout 0.5",
            2,
            3,
            3,
            8,
            4,
            numpy.tril(numpy.ones((3, 3), dtype=bool))[None, None],
            {"dropout_p": 0.5, "training": True},
        ),
    ):
        if self_attention and s != t:
            s = t
            mask = None if mask is None else mask[..., :t]
        small = width // 4
        weights = (
            {
                "w_q_compress": 0.5 * _normal(rng, width + small, width),
                "w_kv_decompress": 0.5 * _normal(rng, 2 * width, small),
            }
            if latent
            else {"w_qkv": 0.5 * _normal(rng, 3 * width, width)}
        )
        inputs = (
            {"x": _normal(rng, b, t, width)}
            if self_attention
            else {"x_q": _normal(rng, b, t, width), "x_kv": _normal(rng, b, s, width)}
        )
        inputs |= {
            **weights,
            "w_o": 0.5 * _normal(rng, width, width),
            "n_heads": heads,
            "mask": None if mask is None else xp.asarray(mask),
            **extra,
        }
        names = (("x",) if self_attention else ("x_q", "x_kv")) + tuple(weights) + ("w_o",)
        if not latent:  # the projections' optional biases: on in the first case, None in the others
            biased = not cases
            if biased:
                inputs |= {"b_qkv": _normal(rng, 3 * width), "b_o": _normal(rng, width)}
            names += ("b_qkv", "b_o") if biased else ("", "")
        cases.append(
            Case(
                label.replace("S 4", "S 3") if self_attention else label,
                inputs,
                names,
                seed=31 if extra else None,
                candidates=_path_candidates(kind),
            )
        )
    return cases


def _params(rng: numpy.random.Generator, **shapes: tuple[int, ...]) -> dict[str, Array]:
    """Normal float64 parameters of the given shapes; a name ending in gamma is 1 + 0.5 * normal."""
    xp = get_array_module()
    return {
        name: xp.asarray((1 if name.endswith("gamma") else 0) + 0.5 * rng.standard_normal(shape))
        for name, shape in shapes.items()
    }


def _residual_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    norm_cache, sublayer, norm_first = cache
    if norm_first:
        dnormed = functional.linear_backward(dout, sublayer)[0]
        branch = functional.layer_norm_backward(dnormed, norm_cache)[0]
        return {
            "x": [
                (branch, "residual_dropped"),
                (dout, "residual_dropped"),
                (dout + dnormed, "norm_path"),
                (functional.layer_norm_backward(dout + dnormed, norm_cache)[0], "norm_path"),
            ]
        }
    dsum = functional.layer_norm_backward(dout, norm_cache)[0]
    return {
        "x": [
            (functional.linear_backward(dsum, sublayer)[0], "residual_dropped"),
            (dsum, "residual_dropped"),
            (dout + functional.linear_backward(dsum, sublayer)[0], "norm_path"),
            (dsum + functional.linear_backward(dout, sublayer)[0], "norm_path"),
            (dout + functional.linear_backward(dout, sublayer)[0], "norm_path"),
        ]
    }


def _cases_residual(rng: numpy.random.Generator) -> list[Case]:
    def case(label: str, shape: tuple[int, ...], norm_first: bool) -> Case:
        width = shape[-1]
        params = _params(rng, gamma=(width,), beta=(width,), weight=(width, width), bias=(width,))
        return Case(
            label,
            {"x": _normal(rng, *shape), "params": params, "norm_first": norm_first},
            ("x", *[f"params.{key}" for key in params]),
            candidates=_residual_candidates,
        )

    return [
        case("x (2, 3, 4), pre-norm", (2, 3, 4), True),
        case("x (2, 3, 4), post-norm", (2, 3, 4), False),
        case("x (3, 5), post-norm", (3, 5), False),
        case("x (1, 1, 4), pre-norm", (1, 1, 4), True),
        case("x (2, 2, 2, 3), pre-norm", (2, 2, 2, 3), True),
    ]


def _cases_feed_forward(rng: numpy.random.Generator) -> list[Case]:
    def case(label: str, shape: tuple[int, ...], hidden: int) -> Case:
        width = shape[-1]
        params = _params(rng, w1=(hidden, width), b1=(hidden,), w2=(width, hidden), b2=(width,))
        return Case(label, {"x": _normal(rng, *shape), "params": params}, ("x", "params.w1", "params.b1",
                    "params.w2", "params.b2"))  # fmt: skip

    return [
        case("x (2, 3, 4), d_ff 6", (2, 3, 4), 6),
        case("x (5, 4), d_ff 3", (5, 4), 3),
        case("x (1, 1, 4), d_ff 2", (1, 1, 4), 2),
        case("x (2, 1, 2, 4), d_ff 5", (2, 1, 2, 4), 5),
    ]


def _block_params(rng: numpy.random.Generator, width: int, hidden: int, decoder: bool) -> dict[str, Array]:
    d, h = width, hidden
    shapes: dict[str, tuple[int, ...]] = {"ln1_gamma": (d,), "ln1_beta": (d,)}
    if decoder:
        shapes |= {"self_w_qkv": (3 * d, d), "self_w_o": (d, d), "ln2_gamma": (d,), "ln2_beta": (d,)}
        shapes |= {"cross_w_qkv": (3 * d, d), "cross_w_o": (d, d), "ln3_gamma": (d,), "ln3_beta": (d,)}
    else:
        shapes |= {"w_qkv": (3 * d, d), "w_o": (d, d), "ln2_gamma": (d,), "ln2_beta": (d,)}
    shapes |= {"w1": (h, d), "b1": (h,), "w2": (d, h), "b2": (d,)}
    return _params(rng, **shapes)


def _through_residuals(
    dout: Any, residuals: list[tuple[Callable, Any]], mistake: tuple[int, str] | None
) -> Any:
    """dx back through pre-norm residuals ``(branch backward, norm cache)``, last first, with one
    ``mistake`` at residual i: "dropped" (the skip's gradient lost), "branch" (the branch's lost),
    "norm_skipped" (the norm's backward left out of the branch) or "norm_after_sum" (the norm's
    backward after the sum)."""
    dx = dout
    for i, (branch_backward, norm_cache) in reversed(list(enumerate(residuals))):
        kind = mistake[1] if mistake is not None and mistake[0] == i else "right"
        if kind == "branch":
            continue
        dbranch = branch_backward(dx)
        if kind == "norm_skipped":
            dx = dx + dbranch
        elif kind == "norm_after_sum":
            dx = functional.layer_norm_backward(dx + dbranch, norm_cache)[0]
        else:
            dh = functional.layer_norm_backward(dbranch, norm_cache)[0]
            dx = dh if kind == "dropped" else dx + dh
    return dx


def _residual_mistakes(dout: Any, residuals: list[tuple[Callable, Any]]) -> list[tuple[Array, str]]:
    """A block's dx with each residual's typical mistake, one residual at a time."""
    sentence = {"dropped": "residual_dropped", "branch": "residual_dropped", "norm_skipped": "norm_path",
                "norm_after_sum": "norm_path"}  # fmt: skip
    return [
        (_through_residuals(dout, residuals, (i, kind)), key)
        for i in range(len(residuals))
        for kind, key in sentence.items()
    ]


def _encoder_block_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    """dx with one residual's skip dropped, or its norm's backward on the wrong path."""
    residuals = [
        (lambda d: functional.multi_head_self_attention_backward(d, cache.attention)[0], cache.norm_1),
        (lambda d: blocks.feed_forward_backward(d, cache.feed_forward)[0], cache.norm_2),
    ]
    return {"x": _residual_mistakes(dout, residuals)}


def _decoder_block_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    residuals = [
        (lambda d: functional.multi_head_self_attention_backward(d, cache.self_attention)[0], cache.norm_1),
        (lambda d: functional.multi_head_attention_backward(d, cache.cross_attention)[0], cache.norm_2),
        (lambda d: blocks.feed_forward_backward(d, cache.feed_forward)[0], cache.norm_3),
    ]
    return {"x": _residual_mistakes(dout, residuals)}


def _cases_encoder_block(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()
    padded = numpy.ones((2, 1, 1, 3), dtype=bool)
    padded[1, ..., 2:] = False
    cases = []
    for label, b, s, width, heads, mask in (
        ("x (2, 3, 8), 2 heads, a padded key", 2, 3, 8, 2, xp.asarray(padded)),
        ("x (1, 1, 4), 1 head, no mask", 1, 1, 4, 1, None),
    ):
        params = _block_params(rng, width, 2 * width, decoder=False)
        cases.append(
            Case(
                label,
                {"x": _normal(rng, b, s, width), "params": params, "mask": mask, "n_heads": heads},
                ("x", *[f"params.{key}" for key in params]),
                candidates=_encoder_block_candidates,
                max_entries=24,
            )
        )
    return cases


def _cases_decoder_block(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()
    src = numpy.ones((2, 1, 1, 4), dtype=bool)
    src[0, ..., 3:] = False
    causal = numpy.tril(numpy.ones((3, 3), dtype=bool))[None, None]
    cases = []
    for label, b, t, s, width, heads, src_mask, tgt_mask in (
        ("x (2, 3, 8), memory (2, 4, 8), 2 heads, causal, a padded source", 2, 3, 4, 8, 2, src, causal),
        ("x (1, 1, 4), memory (1, 1, 4), 1 head, no masks", 1, 1, 1, 4, 1, None, None),
    ):
        params = _block_params(rng, width, 2 * width, decoder=True)
        inputs = {
            "x": _normal(rng, b, t, width),
            "memory": _normal(rng, b, s, width),
            "params": params,
            "src_mask": None if src_mask is None else xp.asarray(src_mask),
            "tgt_mask": None if tgt_mask is None else xp.asarray(tgt_mask),
            "n_heads": heads,
        }
        cases.append(
            Case(
                label,
                inputs,
                ("x", "memory", *[f"params.{key}" for key in params]),
                candidates=_decoder_block_candidates,
                max_entries=24,
            )
        )
    return cases


def _whole_variant(cache: Any, dloss: float, memory: str = "all", tied: str = "both") -> dict[str, Array]:
    """The textbook's encoder_decoder_backward with one block-level mistake: the memory's gradient
    from the first or the last decoder layer only, or the tied table's from one use only."""
    grads: dict[str, Any] = {}
    dlogits = functional.cross_entropy_backward(dloss, cache.loss)
    dy, dprojection, _ = functional.linear_backward(dlogits, cache.projection)
    dy = functional.layer_norm_backward(dy, cache.decoder_norm)[0]
    kept: list[Any] = []
    for i in reversed(range(cache.n_layers)):
        dy, dmemory_i, _ = blocks.decoder_block_backward(dy, cache.decoder[i])
        kept.append(dmemory_i)
    dmemory = {"all": sum(kept), "last": kept[0], "first": kept[-1]}[memory]
    dembedding = functional.embedding_backward(dy, cache.tgt_embedding)
    grads["tgt_table"] = {
        "both": dprojection + dembedding,
        "projection": dprojection,
        "embedding": dembedding,
    }[tied]
    dx, grads["enc_norm_gamma"], grads["enc_norm_beta"] = functional.layer_norm_backward(
        dmemory, cache.encoder_norm
    )
    for i in reversed(range(cache.n_layers)):
        dx, block = blocks.encoder_block_backward(dx, cache.encoder[i])
        grads.update({f"enc{i}_{key}": value for key, value in block.items()})
    grads["src_table"] = functional.embedding_backward(dx, cache.src_embedding)
    return grads


def _whole_candidates(dloss: float) -> Callable[[Any, Any], dict[str, list[tuple[Array, str]]]]:
    def candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
        found: dict[str, list[tuple[Array, str]]] = {}
        for memory in ("first", "last"):
            for key, value in _whole_variant(cache, dloss, memory=memory).items():
                if key != "tgt_table":
                    found.setdefault(f"params.{key}", []).append((value, "memory_one_layer"))
        for tied in ("projection", "embedding"):
            found.setdefault("params.tgt_table", []).append(
                (_whole_variant(cache, dloss, tied=tied)["tgt_table"], "tied_not_added")
            )
        return found

    return candidates


def _cases_encoder_decoder(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()
    cases = []
    for label, src, tgt_in, tgt_out, vocab, width, layers, heads, smoothing, dloss in (
        (
            "src (2, 4) padded, tgt (2, 3), D 8, 2 layers, 2 heads, smoothing 0.1",
            [[1, 2, 3, 0], [4, 5, 6, 2]],
            [[1, 2, 3], [1, 4, 0]],
            [[2, 3, 5], [4, 5, 0]],
            (7, 6),
            8,
            2,
            2,
            0.1,
            1.0,
        ),
        (
            "src (1, 2), tgt (1, 2), D 4, 1 layer, 1 head",
            [[3, 3]],
            [[1, 2]],
            [[2, 2]],
            (4, 3),
            4,
            1,
            1,
            0.0,
            0.5,
        ),
    ):
        params = blocks.init_params(rng, vocab[0], vocab[1], width, 2 * width, layers)
        inputs = {
            "src": xp.asarray(src),
            "tgt_in": xp.asarray(tgt_in),
            "tgt_out": xp.asarray(tgt_out),
            "params": params,
            "n_layers": layers,
            "n_heads": heads,
            "pad_id": 0,
            "label_smoothing": smoothing,
        }
        cases.append(
            Case(
                label,
                inputs,
                tuple(f"params.{key}" for key in params),
                dloss=dloss,
                candidates=_whole_candidates(dloss),
                max_entries=12,
            )
        )
    return cases


CASES: dict[str, Callable[[numpy.random.Generator], list[Case]]] = {
    "positional_encoding_backward": _cases_positional_encoding,
    "relu_backward": _cases_relu,
    "dropout_backward": _cases_dropout,
    "linear_backward": _cases_linear,
    "embedding_backward": _cases_embedding,
    "softmax_backward": _cases_softmax,
    "cross_entropy_backward": _cases_cross_entropy,
    "layer_norm_backward": _cases_layer_norm,
    "attention_backward": _cases_attention,
    "multi_head_attention_backward": lambda rng: _cases_multi_head(rng, False, False),
    "multi_head_self_attention_backward": lambda rng: _cases_multi_head(rng, False, True),
    "multi_head_latent_attention_backward": lambda rng: _cases_multi_head(rng, True, False),
    "multi_head_latent_self_attention_backward": lambda rng: _cases_multi_head(rng, True, True),
    "residual_backward": _cases_residual,
    "feed_forward_backward": _cases_feed_forward,
    "encoder_block_backward": _cases_encoder_block,
    "decoder_block_backward": _cases_decoder_block,
    "encoder_decoder_backward": _cases_encoder_decoder,
}


# ------------------------------------------------------------------------------------------------
# learn check

EXACT = 1e-12  # |yours - textbook's| over the largest gradient: equal to rounding


class _ToDo(Exception):
    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where  # the function of the learner's file that raised NotImplementedError


class _Raised(Exception):
    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


@dataclass
class GradientVerdict:
    """How one returned gradient fared over every case: ``exact``, ``close`` or ``wrong``."""

    name: str
    status: str
    max_abs_error: float = 0.0
    relative_error: float = 0.0
    case: str = ""
    detail: str = ""  # wrong: where and both values
    mistake: str | None = None  # wrong: the key of SENTENCES it looks like
    factor: float | None = None

    def explanation(self) -> str | None:
        return None if self.mistake is None else sentence(self.mistake, factor=self.factor or 0.0)


@dataclass
class FunctionVerdict:
    """One exercise: ``done``, ``wrong``, ``error`` (their code raised), ``to do``, or ``textbook``
    (not defined in the file: the textbook's is used)."""

    name: str
    status: str
    gradients: list[GradientVerdict] = field(default_factory=list)
    message: str = ""
    localised: Localised | None = None  # a wrong block: where its gradients first differ, and why

    @property
    def passed(self) -> bool:
        return self.status == "done"


class _TimedOut(BaseException):
    """Raised inside the learner's code when its function has run past its time (a BaseException,
    so that their own ``except Exception`` cannot swallow it)."""


TIME_LIMIT = 60.0  # seconds for importing the learner's file, and for every case of one exercise


@contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Raise _TimedOut in whatever runs after ``seconds`` (on the main thread, where signals can
    interrupt it; elsewhere, or with None, no limit)."""
    if seconds is None:
        yield
        return
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _TimedOut()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _signature_problem(function: Callable, args: tuple, kwargs: dict[str, Any]) -> str | None:
    """Why ``function`` cannot be called as the model calls it, or None."""
    try:
        inspect.signature(function).bind(*args, **kwargs)
    except TypeError as error:
        return str(error)
    except ValueError:  # no signature to read (a builtin): let the call say
        return None
    return None


def _call(function: Callable, path: Path, *args: Any, **kwargs: Any) -> Any:
    """Run the learner's function; NotImplementedError is "to do", anything else it raises or
    exits with is theirs (a NaN or overflow warning of NumPy included: it names their line)."""
    name = getattr(function, "__name__", "the function")
    problem = _signature_problem(function, args, kwargs)
    if problem is not None:
        given = ", ".join([*("dout" if i == 0 else "cache" for i in range(len(args))), *kwargs])
        raise _Raised(f"{name} cannot be called as the model calls it, {name}({given}): {problem}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            return function(*args, **kwargs)
    except NotImplementedError as error:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename).resolve() == path]
        raise _ToDo(frames[-1].name if frames else name) from None
    except (KeyboardInterrupt, _TimedOut):
        raise
    except BaseException as error:  # SystemExit, GeneratorExit, a BaseException of theirs: all theirs
        raise _Raised(describe_error(error, path)) from None


def _forward_call(forward: Callable, case: Case, inputs: dict[str, Any], path: Path) -> tuple[Any, Any]:
    from .backend import make_rng

    extra = {"rng": make_rng(case.seed)} if case.seed is not None else {}
    result = _call(forward, path, **inputs, **extra)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise _Raised(
            f"{getattr(forward, '__name__', 'the forward')} must return (out, cache), got {type(result).__name__}"
        )
    return result


def _copy(inputs: dict[str, Any]) -> dict[str, Any]:
    return {
        name: _copy(value)
        if isinstance(value, dict)
        else value.copy()
        if hasattr(value, "copy") and hasattr(value, "shape")
        else value
        for name, value in inputs.items()
    }


def _close_enough(yours: Any, right: Any) -> bool:
    """Within the tolerance of central differences of the textbook's gradient (gradcheck's rtol)."""
    scale = max(1.0, float(numpy.abs(right).max(initial=0.0)))
    return bool(numpy.allclose(yours, right, rtol=1e-3, atol=1e-5 * scale))


def _close(a: Any, b: Any) -> bool:
    scale = max(1.0, float(numpy.abs(b).max(initial=0.0)))
    return a.shape == b.shape and bool(numpy.allclose(a, b, rtol=1e-7, atol=1e-9 * scale))


def _as_array(value: Any) -> numpy.ndarray | None:
    if value is None:
        return None
    try:
        raw = numpy.asarray(to_numpy(value))
        if raw.dtype == object or numpy.iscomplexobj(raw) or raw.dtype.kind not in "biuf":
            return None
        return raw.astype(numpy.float64)
    except (TypeError, ValueError, OverflowError):
        return None


def _diagnose(
    yours: numpy.ndarray, right: numpy.ndarray, case: Case, name: str, candidates: list[tuple[Array, str]]
) -> tuple[str | None, float | None]:
    """The key of the known mistake ``yours`` looks like (and the factor, for "factor"), or None."""
    if yours.shape != right.shape:
        lead = yours.ndim - right.ndim
        if (
            lead > 0
            and yours.shape[lead:] == right.shape
            and _close(yours.reshape(-1, *right.shape).sum(0), right)
        ):
            return "rows_sum", None
        if (
            yours.size == right.size
            and lead == 0
            and right.ndim
            and yours.ndim == 2
            and _close(yours.T, right)
        ):
            return "transposed", None
        return None, None
    for candidate, key in candidates:
        candidate = numpy.asarray(to_numpy(candidate), dtype=numpy.float64)
        if candidate.shape == right.shape and not _close(candidate, right) and _close(yours, candidate):
            return key, None
    wrong = ~numpy.isclose(
        yours, right, rtol=1e-7, atol=1e-9 * max(1.0, float(numpy.abs(right).max(initial=0.0)))
    )
    for where, key in case.regions.get(name, []):
        if wrong.any() and not (wrong & ~numpy.asarray(where)).any():
            return key, None
    if not numpy.any(yours) and numpy.any(right):
        return "zero", None
    norm = float((right * right).sum())
    if norm > 0:
        factor = float((yours * right).sum()) / norm
        if abs(factor - 1) > 1e-6 and _close(yours, factor * right):
            if abs(factor + 1) <= 1e-6:
                return "sign", None
            for value, key in case.factors.get(name, []):
                if abs(factor - value) <= 1e-6 * abs(value):
                    return key, None
            return "factor", factor
    return None, None


def _check_output(out: Any, case: Case, name: str) -> None:
    """The learner's forward returned a number (a loss) or a floating array as its output."""
    if case.dloss is not None:
        try:
            float(out)
        except (TypeError, ValueError):
            raise _Raised(f"{name} must return the loss as a number, got {type(out).__name__}") from None
        return
    dtype = getattr(out, "dtype", None)
    if dtype is None or not numpy.issubdtype(numpy.dtype(str(dtype)), numpy.floating):
        raise _Raised(f"{name} must return a floating array as its output, got {type(out).__name__}")


@dataclass
class _Call:
    """One call of a backward made inside the graded one: what it was given and returned, and
    what it wrote into (``backward_writes``'s list)."""

    name: str
    dout: Any
    cache: Any
    result: Any
    writes: list[tuple[str, str]]
    theirs: bool  # defined in the learner's file (not a textbook function they imported)


@contextmanager
def _recording(spaces: Sequence[dict[str, Any]], calls: list[_Call]) -> Iterator[None]:
    """Every exercise's backward that the module globals ``spaces`` hold, wrapped so that each call
    appends a _Call to ``calls``; the globals restored on the way out."""
    textbook = (vars(functional), vars(blocks))
    patched: list[tuple[dict[str, Any], str, Any]] = []

    def wrap(name: str, function: Callable) -> Callable:
        theirs = getattr(function, "__globals__", None) not in textbook

        def recorded(dout: Any, cache: Any, *args: Any, **kwargs: Any) -> Any:
            call = _Call(name, dout.copy() if hasattr(dout, "copy") else dout, cache, None, [], theirs)
            calls.append(call)  # on the way in: a call comes before the calls it makes
            call.result, call.writes = backward_writes(
                lambda d, c: function(d, c, *args, **kwargs), dout, cache
            )
            return call.result

        recorded.__name__ = name
        return recorded

    try:
        for space in spaces:
            for exercise in EXERCISES:
                function = space.get(exercise.backward)
                if callable(function):
                    patched.append((space, exercise.backward, function))
                    space[exercise.backward] = wrap(exercise.backward, function)
        yield
    finally:
        for space, name, function in reversed(patched):
            space[name] = function


def _written(name: str, writes: list[tuple[str, str]], calls: list[_Call]) -> str | None:
    """Why a backward that wrote into dout, an input or its cache breaks the model around it, and
    which function of the learner's did it where one they call did; None when it wrote nothing."""
    if not writes:
        return None
    where, difference = writes[0]
    if where == "dout":
        said = (
            f"{name} changed dout in place: the model hands the same dout to other layers too "
            "(the residual path), so a backward must not write into it"
        )
    elif where.startswith("input "):
        said = (
            f"{name} changed the forward's {where.split(chr(39))[1]} in place (the cache holds it): a "
            "backward must leave what it received as it was"
        )
    else:
        said = (
            f"{name} changed its cache in place, at {where} ({difference}): the model reads those arrays "
            "again (the next case, the next step), so a backward computes into new arrays (y = y * d, not y *= d)"
        )
    culprit = next((c for c in calls if c.theirs and c.writes and c.name != name), None)
    if culprit is not None:
        said += f"; your {culprit.name}, which it calls, wrote into the {culprit.writes[0][0]} it was handed"
    return said


def _cache_paths(cache: Any, path: str = "") -> dict[int, str]:
    """Where each cache inside ``cache`` sits, by identity: "norm_2", "decoder[1].cross_attention",
    "feed_forward.activation" (an array: the relu's mask)."""
    if isinstance(cache, tuple) and hasattr(cache, "_fields"):
        items = [(f"{path}.{key}" if path else key, value) for key, value in zip(cache._fields, cache)]
    elif isinstance(cache, list):
        items = [(f"{path}[{i}]", value) for i, value in enumerate(cache)]
    else:
        return {}
    found: dict[int, str] = {}
    for where, value in items:
        if isinstance(value, (tuple, list)):
            found.setdefault(id(value), where)
            for key, inner in _cache_paths(value, where).items():
                found.setdefault(key, inner)
        elif hasattr(value, "shape"):
            found.setdefault(id(value), where)
    return found


def _recorded(name: str, dout: Any, cache: Any) -> tuple[Any, list[_Call]]:
    """The textbook's backward ``name`` and every backward of blocks.py it called, in call order."""
    calls: list[_Call] = []
    with _recording([vars(blocks)], calls):
        result = textbook_function(name)(dout, cache)
    return result, calls


def _boundaries(calls: list[_Call], cache: Any) -> dict[str, Any]:
    """The gradients at every boundary of a block, from its recorded calls: "d" + a piece's place
    in the cache is the gradient reaching that piece's output (the dout its backward was given),
    and place + "." + a gradient's name is what that backward returned ("decoder[1].dmemory")."""
    paths = _cache_paths(cache)
    named: dict[str, Any] = {}
    for call in calls:
        where = paths.get(id(call.cache))
        if where is None:
            continue
        named.setdefault(f"d{where}", call.dout)
        results = call.result if isinstance(call.result, tuple) else (call.result,)
        for grad, value in zip(BY_NAME[call.name].grads, results):
            named.setdefault(f"{where}.{grad}", value)
    return named


@dataclass
class Localised:
    """Where a block's gradients first differ from the textbook's: the piece whose incoming gradient
    is wrong while every gradient before it (in the backward's order) is right, and why."""

    where: str  # the piece's place in the cache: its incoming gradient is textbook()["d" + where]
    mistake: str | None = None  # a key of SENTENCES
    values: dict[str, Any] = field(default_factory=dict)
    kind: str = "reaching"  # "returned": every piece was handed the right gradient, ``where`` is a
    # gradient the block returns; "cache": a piece's backward was handed another piece's cache

    def explanation(self) -> str:
        said = f": {sentence(self.mistake, **self.values)}" if self.mistake else ""
        if self.kind == "cache":
            return sentence(self.mistake or "wrong_cache", **self.values)
        if self.kind == "returned":
            return f"every piece it calls is handed the textbook's gradient; the {self.where} it returns differs{said}"
        head = f"the first gradient that differs from the textbook's is the one reaching {self.where} "
        return head + f"(textbook(cache, dout)['d{self.where}']; every one before it is right){said}"


def _array(value: Any) -> numpy.ndarray:
    return numpy.asarray(to_numpy(value) if hasattr(value, "shape") else value, dtype=numpy.float64)


def _localise(
    calls: list[_Call], cache: Any, right_calls: list[_Call], right_cache: Any, dloss: float | None
) -> Localised | None:
    """Compare the gradient the learner's block handed each piece (their recorded calls) with the
    textbook's, in the textbook's order; the first that differs is where the mistake is. None when
    every piece they called was handed the right gradient."""
    theirs: dict[str, _Call] = {}
    paths = _cache_paths(cache)
    for call in calls:
        if id(call.cache) in paths:
            theirs.setdefault(paths[id(call.cache)], call)
    right_paths = _cache_paths(right_cache)
    right = {right_paths[id(c.cache)]: c for c in right_calls if id(c.cache) in right_paths}
    used = Counter(paths[id(call.cache)] for call in calls if id(call.cache) in paths)
    needed = Counter(right_paths[id(call.cache)] for call in right_calls if id(call.cache) in right_paths)
    for where, count in used.items():  # a piece's cache handed to a sibling's backward as well
        if where not in needed or count <= needed[where]:
            continue
        unused = [other for other in needed if other not in used and right[other].name == right[where].name]
        if unused:
            return Localised(where, "wrong_cache", {"where": where, "other": unused[0]}, kind="cache")
    wrong = [
        where
        for where, call in right.items()
        if where in theirs
        and not (
            _array(theirs[where].dout).shape == _array(call.dout).shape
            and _close(_array(theirs[where].dout), _array(call.dout))
        )
    ]
    if not wrong:
        return None
    for where in wrong:  # a layer handed a sibling layer's gradient: the stack undone in the wrong order
        stem = where.rsplit("[", 1)[0]
        for other, call in right.items():
            sibling = other != where and "[" in where and other.rsplit("[", 1)[0] == stem
            if sibling and _close_shaped(theirs[where].dout, call.dout):
                return Localised(where, "layer_order")
    where = wrong[0]
    key, values = _boundary_mistake(where, _array(theirs[where].dout), right, right_cache, dloss)
    return Localised(where, key, values)


def _close_shaped(a: Any, b: Any) -> bool:
    a, b = _array(a), _array(b)
    return a.shape == b.shape and _close(a, b)


def _boundary_mistake(
    where: str, yours: numpy.ndarray, right: dict[str, _Call], cache: Any, dloss: float | None
) -> tuple[str | None, dict[str, Any]]:
    """The known mistake that hands ``where`` the gradient ``yours``, from the textbook's gradients at
    the other pieces (``right``, by place): a residual's skip or branch dropped, a norm's backward on
    the wrong path, another piece's gradient reused (a piece skipped), one decoder layer's memory
    gradient, the loss's mistakes, the positional table added, a constant factor."""
    expected = _array(right[where].dout)
    parent = where.rsplit(".", 1)[0] if "." in where else ""
    owner = cache if not parent else next((c.cache for place, c in right.items() if place == parent), None)
    residual = isinstance(owner, RESIDUAL_BLOCKS)
    for call in right.values():
        dhidden = _array(call.dout)
        if call.name == "relu_backward" and dhidden.shape == expected.shape:
            if _close(yours, dhidden):
                return "relu_skipped", {}
            if _close(yours, dhidden * (dhidden > 0)):
                return "relu_mask", {}
    a_norm = right[where].name == "layer_norm_backward"
    for other, call in right.items():
        dout = _array(call.dout)
        if other == where or dout.shape != expected.shape or _close(dout, expected):
            continue
        if _close(yours, dout):  # a norm handed its branch's own gradient: the branch's backward skipped
            return ("residual_dropped", {}) if residual and not a_norm else ("skipped", {"above": other})
        if residual and _close(yours + dout, expected):  # the skip's gradient not added
            return "residual_dropped", {}
        if residual and a_norm and _close(yours - dout, expected):  # the skip's gradient through the norm
            return "norm_path", {}
    for call in right.values():
        a_norm = call.name == "layer_norm_backward" and call.result is not None
        if a_norm and _array(call.result[0]).shape == expected.shape:
            skip = expected - _array(call.result[0])
            branch = skip + _array(call.dout)  # the norm's backward left out of the branch
            summed = _array(functional.layer_norm_backward(get_array_module().asarray(branch), call.cache)[0])
            if _close(yours, branch) or _close(yours, summed):
                return "norm_path", {}
        if call.name == "decoder_block_backward" and _close_shaped(yours, call.result[1]):
            return "memory_one_layer", {}
    if _counted_twice(yours, expected, right.values()):
        return "counted_twice", {}
    loss = getattr(cache, "loss", None)
    if loss is not None and where == "projection":
        for candidate, key in _cross_entropy_candidates(loss, dloss)["logits"]:
            if _close_shaped(yours, candidate):
                return key, {}
    if yours.ndim == 3 and yours.shape == expected.shape:
        added = yours - expected
        table = functional.sinusoidal_table(yours.shape[1], yours.shape[2], numpy.float64)
        if _close(added, numpy.broadcast_to(_array(table), added.shape)):
            return "positional_added", {}
    factor = _constant_factor(yours, expected)
    if factor is not None:
        if yours.ndim == 0 and dloss is not None and abs(factor * dloss - 1) <= 1e-6:
            return "upstream", {}  # the loss's own gradient: dloss itself
        if loss is not None:
            n_valid, count = float(loss.n_valid), float(loss.probs.shape[0])
            for value, key in ((n_valid, "token_count"), (n_valid / count, "token_count_pad")):
                if abs(factor - value) <= 1e-6 * value:
                    return key, {}
        if dloss is not None and abs(factor * dloss - 1) <= 1e-6:
            return "upstream", {}
        return _factor_mistake(factor, residual)
    return None, {}


RESIDUAL_BLOCKS = (blocks.EncoderBlockCache, blocks.DecoderBlockCache, blocks.ResidualCache)


def _constant_factor(yours: numpy.ndarray, right: numpy.ndarray) -> float | None:
    """The constant c != 1 with yours = c * right, or None."""
    norm = float((right * right).sum())
    if norm == 0 or yours.shape != right.shape:
        return None
    factor = float((yours * right).sum()) / norm
    return factor if abs(factor - 1) > 1e-6 and _close(yours, factor * right) else None


def _factor_mistake(factor: float, join: bool) -> tuple[str, dict[str, Any]]:
    """The mistake a block's gradient off by a constant ``factor`` usually is (``join``: in a block
    whose paths meet at residuals): a sign, a gradient counted twice, two paths averaged, a stray constant."""
    if abs(factor + 1) <= 1e-6:
        return "sign", {}
    if abs(factor - 2) <= 1e-6:
        return "counted_twice", {}
    if join and abs(factor - 0.5) <= 1e-6:
        return "averaged", {}
    return "stray_factor", {"factor": factor}


def _counted_twice(yours: numpy.ndarray, right: numpy.ndarray, calls: Iterable[_Call]) -> bool:
    """Whether ``yours`` is ``right`` plus a gradient at one of the textbook's boundaries (what a
    piece was handed or returned first): a path's gradient added twice."""
    for call in calls:
        for value in (call.dout, call.result[0] if isinstance(call.result, tuple) else call.result):
            if not hasattr(value, "shape"):
                continue
            extra = _array(value)
            if extra.shape == right.shape and extra.any() and _close(yours - extra, right):
                return True
    return False


def _returned_mistake(
    names: Sequence[str],
    grads: Sequence[Any],
    expected: Sequence[Any],
    verdicts: dict[str, GradientVerdict],
    right_calls: list[_Call],
    join: bool,
) -> Localised | None:
    """Why a block whose pieces were all handed the right gradients returns a wrong one: a gradient
    under another parameter's key, a square matrix transposed, the memory's gradient dropped, a
    path's gradient added twice, a constant factor; None when it is none of those."""
    rights = [None if right is None else _array(right) for right in expected]
    for label, grad, right in zip(names, grads, rights):
        yours = _as_array(grad)
        wrong = label in verdicts and verdicts[label].status == "wrong"
        if right is None or yours is None or not wrong:
            continue
        yours = yours.astype(numpy.float64)
        for other, value in zip(names, rights):
            if other == label or value is None or not value.any() or _close_shaped(right, value):
                continue
            if _close_shaped(yours, value):
                return Localised(label, "swapped", {"name": label, "other": other}, kind="returned")
        if yours.shape != right.shape:
            continue
        factor = _constant_factor(yours, right)
        if yours.ndim == 2 and yours.shape[0] == yours.shape[1] and _close(yours.T, right):
            return Localised(label, "transposed", kind="returned")
        if label == "dmemory" and not yours.any():
            return Localised(label, "memory_dropped", kind="returned")
        if _counted_twice(yours, right, right_calls):
            return Localised(label, "counted_twice", kind="returned")
        if factor is not None:
            key, values = _factor_mistake(factor, join and label == "dx")
            return Localised(label, key, values, kind="returned")
    return None


def _returned_gradients(name: str, returned: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    """The gradients a backward returned, one per name, or _Raised saying what it returned instead."""
    expected = f"({', '.join(names)})" if len(names) > 1 else f"{names[0]}, an array"
    if returned is None:
        raise _Raised(f"{name} returned None (is its `return` missing?), expected {expected}")
    if inspect.isgenerator(returned) or isinstance(returned, Iterator):
        raise _Raised(
            f"{name} returned a {type(returned).__name__}, expected {expected}"
            + (" as a tuple" if len(names) > 1 else "")
        )
    if len(names) == 1:
        if isinstance(returned, (tuple, list)):
            raise _Raised(
                f"{name} returned a {type(returned).__name__} of {len(returned)}, expected {expected}"
            )
        return (returned,)
    if isinstance(returned, list):
        raise _Raised(f"{name} returned a list, expected the tuple {expected}: return a, b, c makes a tuple")
    if not isinstance(returned, tuple):
        raise _Raised(
            f"{name} returned one {type(returned).__name__}, expected the {len(names)} values {expected}"
        )
    if len(returned) != len(names):
        raise _Raised(f"{name} returned {len(returned)} values, expected {len(names)}: {expected}")
    return returned


def _flatten_params(name: str, grads: tuple[Any, ...], keys: list[str]) -> tuple[Any, ...]:
    """A block's gradients with its dparams dict spread out in the order of ``keys``."""
    dparams = grads[-1]
    if not isinstance(dparams, dict):
        raise _Raised(
            f"{name} must return dparams as a dict with the keys of params, got {type(dparams).__name__}"
        )
    missing = [key for key in keys if key not in dparams]
    extra = [str(key) for key in dparams if key not in keys]
    if missing or extra:
        said = (f"lacks {', '.join(missing)}" if missing else "") + (
            f"{'; ' if missing else ''}has keys params has not: {', '.join(extra)}" if extra else ""
        )
        raise _Raised(f"{name}'s dparams {said}")
    return (*grads[:-1], *[dparams[key] for key in keys])


def _variable(inputs: dict[str, Any], name: str) -> Any:
    """inputs[name], or inputs["params"][key] for the name "params.key"."""
    if name.startswith("params."):
        return inputs["params"][name.removeprefix("params.")]
    return inputs[name]


def _compare_forward(
    name: str, out: Any, cache: Any, textbook_out: Any, textbook_cache: Any, case: Case
) -> None:
    """A forward of the learner's own must compute the textbook's output, and keep a cache the
    model around it can read (the textbook's kind: the layers read its fields)."""
    if case.dloss is not None:
        yours, right = numpy.asarray(float(out)), numpy.asarray(float(textbook_out))
    else:
        yours, right = to_numpy(out), to_numpy(textbook_out)
    if yours.shape != right.shape:
        raise _Raised(
            f"your {name} differs from the textbook's on case {case.label}: output shape {yours.shape}, "
            f"expected {right.shape}"
        )
    if not numpy.allclose(yours, right, rtol=1e-6, atol=1e-9, equal_nan=True):
        difference = numpy.abs(yours.astype(numpy.float64) - right)
        index = tuple(int(i) for i in numpy.unravel_index(int(numpy.nanargmax(difference)), difference.shape))
        raise _Raised(
            f"your {name} differs from the textbook's on case {case.label}: at {index} yours "
            f"{float(yours[index]):.6g}, the textbook's {float(right[index]):.6g} (largest difference "
            f"{float(numpy.nanmax(difference)):.3g})"
        )
    fields = getattr(textbook_cache, "_fields", None)
    if fields is not None and getattr(cache, "_fields", None) != fields:
        raise _Raised(
            f"your {name} keeps a cache of type {type(cache).__name__}, the textbook's is a "
            f"{type(textbook_cache).__name__}({', '.join(fields)}): the model around it reads that cache's "
            "fields, so return one (import it from numpy_transformer.functional)"
        )
    if (
        textbook_cache is not None
        and hasattr(textbook_cache, "shape")
        and getattr(cache, "shape", None) != textbook_cache.shape
    ):
        raise _Raised(
            f"your {name} keeps a cache of type {type(cache).__name__}, the textbook's is an array of shape "
            f"{tuple(textbook_cache.shape)}: keep its layout"
        )


def _run_case(
    exercise: Exercise, module: ModuleType, case: Case, path: Path, seed: int
) -> tuple[list[GradientVerdict], Localised | None]:
    """One case of one exercise: each returned gradient's verdict (raises _ToDo or _Raised), and
    for a wrong block where its mistake is."""
    backward = _own(module, exercise.backward) or textbook_function(exercise.backward)
    textbook_forward = textbook_function(exercise.forward)
    forward = _own(module, exercise.forward) or textbook_forward
    inputs = _copy(case.inputs)
    out, cache = _forward_call(forward, case, inputs, path)
    _check_output(out, case, getattr(forward, "__name__", exercise.forward))
    upstream: Any = case.dloss if case.dloss is not None else random_upstream(out.shape, seed)
    given = upstream.copy() if hasattr(upstream, "copy") else upstream
    calls: list[_Call] = []
    flat = {f"params.{k}": v for k, v in inputs.get("params", {}).items()} | inputs
    spaces = [vars(module)] + [vars(blocks)] * exercise.params
    with _recording(spaces, calls):
        returned, writes = backward_writes(lambda d, c: _call(backward, path, d, c), given, cache, flat)
    written = _written(exercise.backward, writes, calls)
    if written is not None:
        raise _Raised(written)
    names = exercise.grads
    grads = _returned_gradients(exercise.backward, returned, names)
    # the textbook on the same inputs: whether yours is exact, and which mistake it looks like
    reference = _copy(case.inputs)
    textbook_out, textbook_cache = _forward_call(textbook_forward, case, reference, path)
    if forward is not textbook_forward:
        _compare_forward(
            getattr(forward, "__name__", exercise.forward), out, cache, textbook_out, textbook_cache, case
        )
    expected, right_calls = _recorded(exercise.backward, upstream, textbook_cache)
    expected = expected if isinstance(expected, tuple) else (expected,)
    if exercise.params:  # a block: dparams, a dict, graded key by key
        keys = list(case.inputs["params"])
        grads = _flatten_params(exercise.backward, grads, keys)
        expected = (*expected[:-1], *[expected[-1][key] for key in keys])
        names = (*names[:-1], *[f"dparams[{key}]" for key in keys])
    candidates = case.candidates(textbook_cache, upstream) if case.candidates else {}

    verdicts: dict[str, GradientVerdict] = {}
    checked: dict[str, numpy.ndarray] = {}
    for label, variable, grad, right in zip(names, case.grads, grads, expected):
        if variable == "":
            if grad is not None:
                verdicts[label] = GradientVerdict(
                    label,
                    "wrong",
                    case=case.label,
                    detail="expected None (the layer has no bias), got a value",
                )
            continue
        right = to_numpy(right)
        yours = _as_array(grad)
        if isinstance(grad, complex) or (hasattr(grad, "dtype") and numpy.dtype(str(grad.dtype)).kind == "c"):
            verdicts[label] = GradientVerdict(
                label,
                "wrong",
                case=case.label,
                detail=f"returned a complex {type(grad).__name__}: the gradient of a real function is real",
            )
        elif yours is None:
            verdicts[label] = GradientVerdict(
                label,
                "wrong",
                case=case.label,
                detail=f"returned {type(grad).__name__}, expected an array of shape {tuple(right.shape)}",
            )
        elif yours.shape != right.shape:
            mistake, _ = _diagnose(yours, right, case, variable, [])
            verdicts[label] = GradientVerdict(
                label,
                "wrong",
                case=case.label,
                mistake=mistake,
                detail=f"shape {tuple(yours.shape)}, expected {tuple(right.shape)}",
            )
        else:
            checked[variable] = yours

    if checked:

        def loss() -> float:
            value, _ = _forward_call(forward, case, inputs, path)
            return (
                float(value) * upstream
                if case.dloss is not None
                else float((to_numpy(value) * to_numpy(upstream)).sum())
            )

        xp = get_array_module()
        result = gradcheck(
            loss,
            {v: _variable(inputs, v) for v in checked},
            {v: xp.asarray(g) for v, g in checked.items()},
            max_entries=case.max_entries,
            raise_on_failure=False,
        )
        scale = max(
            [1.0] + [float(numpy.abs(to_numpy(r)).max(initial=0.0)) for r in expected if r is not None]
        )
        for report in result.reports:
            variable = report.name
            label = names[case.grads.index(variable)]
            yours = checked[variable]
            right = to_numpy(expected[case.grads.index(variable)])
            differs = not _close_enough(yours, right)  # entries the differences did not sample included
            if not report.passed or differs:
                mistake, factor = _diagnose(
                    yours,
                    right,
                    case,
                    variable,
                    [(to_numpy(c), key) for c, key in candidates.get(variable, [])],
                )
                if report.passed:  # wrong where no central difference was taken: against the textbook's
                    worst = numpy.unravel_index(int(numpy.abs(yours - right).argmax()), right.shape)
                    where = tuple(int(i) for i in worst)
                    detail = f"at {where} yours {yours[worst]:.6g}, expected {right[worst]:.6g}"
                else:
                    index = report.worst_index
                    detail = f"at {index if index else '()'} yours {report.analytic:.6g}, expected {report.numeric:.6g}"
                verdicts[label] = GradientVerdict(
                    label,
                    "wrong",
                    report.max_abs_error,
                    report.relative_error,
                    case.label,
                    detail,
                    mistake,
                    factor,
                )
            else:
                exact = float(numpy.abs(yours - right).max(initial=0.0)) <= EXACT * scale
                verdicts[label] = GradientVerdict(
                    label,
                    "exact" if exact else "close",
                    report.max_abs_error,
                    report.relative_error,
                    case.label,
                )
    localised = None
    if exercise.params and any(v.status == "wrong" for v in verdicts.values()):
        localised = _localise(calls, cache, right_calls, textbook_cache, case.dloss) or _returned_mistake(
            names, grads, expected, verdicts, right_calls, isinstance(textbook_cache, RESIDUAL_BLOCKS)
        )
    return [verdicts[label] for label in names if label in verdicts], localised


def check_function(
    module: ModuleType, name: str, path: Path, seed: int = 0, time_limit: float | None = TIME_LIMIT
) -> FunctionVerdict:
    """Grade the learner's ``name`` (a key of BY_NAME) on every drawn case of it."""
    exercise = BY_NAME[name]
    if _own(module, name) is None:
        return FunctionVerdict(name, "textbook", message="not defined in the file: the textbook's is used")
    merged: dict[str, GradientVerdict] = {}
    localised: Localised | None = None
    rng = numpy.random.default_rng(seed)
    try:
        with _time_limit(time_limit):
            cases = list(enumerate(CASES[name](rng)))
            for number, case in cases:
                graded, where = _run_case(exercise, module, case, path, seed + number)
                localised = localised or where
                for verdict in graded:
                    kept = merged.get(verdict.name)
                    rank = {"exact": 0, "close": 1, "wrong": 2}
                    if kept is None or rank[verdict.status] > rank[kept.status]:
                        merged[verdict.name] = verdict
                    elif kept.status == verdict.status == "close":
                        kept.max_abs_error = max(kept.max_abs_error, verdict.max_abs_error)
                        kept.relative_error = max(kept.relative_error, verdict.relative_error)
    except _ToDo as todo:
        waits = f" (waits on {todo.where}, still to do)" if todo.where and todo.where != name else ""
        return FunctionVerdict(name, "to do", message=f"raises NotImplementedError{waits}")
    except _Raised as raised:
        return FunctionVerdict(name, "error", message=raised.line)
    except _TimedOut:
        return FunctionVerdict(
            name,
            "error",
            message=f"did not return within {time_limit or 0:g} seconds (every case together): a loop that never ends?",
        )
    gradients = list(merged.values())
    status = "wrong" if any(g.status == "wrong" for g in gradients) else "done"
    return FunctionVerdict(name, status, gradients, localised=localised)


def unknown_exercise(name: str) -> str:
    """The refusal of a name that is no exercise: the nearest names first (did you mean)."""
    every = [e.backward for e in EXERCISES]
    near = difflib.get_close_matches(name, every, n=3, cutoff=0.5)
    if not near and not name.endswith("_backward"):
        near = difflib.get_close_matches(f"{name}_backward", every, n=3, cutoff=0.5)
    guess = f"; did you mean {' or '.join(near)}?" if near else ""
    return f"{name!r} is not an exercise{guess} (the exercises: {', '.join(every)})"


def check(
    path: str | Path,
    names: Sequence[str] | None = None,
    seed: int = 0,
    module: ModuleType | None = None,
    time_limit: float | None = TIME_LIMIT,
) -> list[FunctionVerdict]:
    """Grade the learner's file: the exercises ``names`` (every exercise when None), in ladder order.

    Raises ValueError for a name that is no exercise, FileNotFoundError, or LearnerCodeError when
    the file cannot be imported.
    """
    for name in names or ():
        if name not in BY_NAME:
            raise ValueError(unknown_exercise(name))
    module = module if module is not None else load_learner(path)
    file = Path(module.__file__ or path).resolve()
    wanted = [e.backward for e in EXERCISES if names is None or not names or e.backward in names]
    verdicts = [check_function(module, name, file, seed, time_limit) for name in wanted]
    graded = {v.name: v for v in verdicts}
    for verdict in verdicts:  # a wrong function that calls a wrong one of theirs: say which to fix first
        if verdict.status not in ("wrong", "error"):
            continue
        for callee in _callees(module, verdict.name):  # graded here even when not asked for
            if callee not in graded:
                graded[callee] = check_function(module, callee, file, seed, time_limit)
            if graded[callee].status in ("wrong", "error"):
                pointer = f"it calls your {callee}, which is wrong: fix that first"
                if pointer not in verdict.message:
                    verdict.message = f"{verdict.message}; {pointer}" if verdict.message else pointer
                break
    return verdicts


def _callees(module: ModuleType, name: str) -> list[str]:
    """The exercises of the learner's file that their ``name`` calls, directly or through any
    function of their file (their helpers, their other exercises), in ladder order: the first is
    the one to fix first."""
    own = vars(module)
    code = getattr(_own(module, name), "__code__", None)
    codes = [code] if code is not None else []
    seen: set[Any] = set()
    found: set[str] = set()
    while codes:
        code = codes.pop()
        if code in seen:
            continue
        seen.add(code)
        codes += [const for const in code.co_consts if isinstance(const, type(code))]  # nested functions
        for word in code.co_names:
            value = own.get(word)
            if word in BY_NAME and word != name and _own(module, word) is not None:
                found.add(word)
            if inspect.isfunction(value) and value.__globals__ is own:
                codes.append(value.__code__)
    return [e.backward for e in EXERCISES if e.backward in found]


MAX_WRONG_SHOWN = 6  # a whole model has dozens of parameters: one mistake, not one wall of ✖ lines
MARKS = {"done": "✔", "wrong": "✖", "error": "✖", "to do": "·", "textbook": "-"}


def format_verdicts(verdicts: Sequence[FunctionVerdict], details: bool = True) -> str:
    """The report: a line per function, and under it (``details``, or when wrong) one per gradient."""
    width = max((len(v.name) for v in verdicts), default=0)
    lines = []
    for verdict in verdicts:
        status = (
            "from the textbook (not defined in the file)" if verdict.status == "textbook" else verdict.status
        )
        head = f"{MARKS[verdict.status]} {verdict.name:<{width}}  {status}"
        if verdict.status in ("to do", "error") and verdict.message:
            head += f": {verdict.message}"
        lines.append(head)
        if verdict.localised is not None:
            lines.append(f"    {verdict.localised.explanation()}")
        if verdict.status == "wrong" or (details and verdict.status == "done"):
            pad = max(len(g.name) for g in verdict.gradients)
            said: set[str] = set()  # a mistake explained once per function (a block has many gradients)
            wrong = [g for g in verdict.gradients if g.status == "wrong"]
            hidden = wrong[MAX_WRONG_SHOWN:]
            for grad in verdict.gradients:
                if grad in hidden:
                    continue
                if grad.status == "exact":
                    lines.append(f"    {grad.name:<{pad}}  ✔ exact")
                elif grad.status == "close":
                    lines.append(
                        f"    {grad.name:<{pad}}  ≈ close (largest abs error {grad.max_abs_error:.1e}, "
                        f"rel {grad.relative_error:.1e})"
                    )
                else:
                    lines.append(f"    {grad.name:<{pad}}  ✖ wrong, case {grad.case}: {grad.detail}")
                    explanation = grad.explanation()
                    if explanation and explanation in said:
                        lines.append(f"    {'':<{pad}}    (the same mistake as above)")
                    elif explanation:
                        said.add(explanation)
                        lines.append(f"    {'':<{pad}}    {explanation}")
            if hidden:
                lines.append(
                    f"    ... and {len(hidden)} more gradients wrong: {', '.join(g.name for g in hidden)}"
                )
            if verdict.status == "wrong" and verdict.message:
                lines.append(f"    {verdict.message}")
    counts = {
        status: sum(v.status == status for v in verdicts) for status in ("done", "wrong", "error", "to do")
    }
    summary = ", ".join(f"{count} {status}" for status, count in counts.items() if count)
    lines.append(summary or "nothing of yours to check: every function is the textbook's")
    return "\n".join(lines)


def run_check(path: str | Path, names: Sequence[str] | None = None) -> tuple[str, int]:
    """``learn check``: the report and the exit status (0 when every function checked passes)."""
    verdicts = check(path, names)
    checked = [v for v in verdicts if names or v.status != "textbook"]
    return format_verdicts(verdicts, details=bool(names)), 0 if checked and all(
        v.passed for v in checked
    ) else 1


def prerequisites(name: str) -> tuple[str, ...]:
    """The exercises the textbook's ``name`` calls, directly or through a helper of the textbook's
    (multi_head_backward calls attention_backward), in ladder order: the rungs below it."""
    found: set[str] = set()
    codes = [textbook_function(name).__code__]
    seen: set[Any] = set()
    while codes:
        code = codes.pop()
        seen.add(code)
        for called in code.co_names:
            if called in BY_NAME and called != name:
                found.add(called)
                continue
            helper = getattr(functional, called, None) or getattr(blocks, called, None)
            inner = getattr(helper, "__code__", None)
            if inner is not None and inner not in seen:
                codes.append(inner)
    return tuple(e.backward for e in EXERCISES if e.backward in found)


@dataclass
class Rung:
    """One exercise on the ladder: ``done`` (passes learn check), ``ready`` (every rung below it
    done) or ``locked`` (behind ``behind``, the rungs below it not done yet); ``verdict`` as check gave it."""

    name: str
    state: str
    behind: tuple[str, ...]
    verdict: FunctionVerdict


def status(path: str | Path) -> list[Rung]:
    """``learn status``: every exercise of the learner's file graded, and placed on the ladder."""
    verdicts = {verdict.name: verdict for verdict in check(path)}
    done = {name for name, verdict in verdicts.items() if verdict.passed}
    rungs = []
    for exercise in EXERCISES:
        behind = tuple(name for name in prerequisites(exercise.backward) if name not in done)
        state = "done" if exercise.backward in done else "locked" if behind else "ready"
        rungs.append(Rung(exercise.backward, state, behind, verdicts[exercise.backward]))
    return rungs


def format_status(rungs: Sequence[Rung]) -> str:
    """The ladder, a line per exercise, and what to do next."""
    width = max(len(rung.name) for rung in rungs)
    said = {"wrong": "wrong", "error": "raises", "textbook": "not in the file"}
    lines = []
    for number, rung in enumerate(rungs, 1):
        line = f"{number:>2}. {rung.name:<{width}}  {rung.state}"
        if rung.state == "locked":
            line += f" behind {', '.join(rung.behind)}"
        if rung.state != "done" and rung.verdict.status in ("wrong", "error", "textbook"):
            line += f" (yours: {said[rung.verdict.status]})"
        lines.append(line)
    counts = {state: sum(rung.state == state for rung in rungs) for state in ("done", "ready", "locked")}
    lines.append(", ".join(f"{count} {state}" for state, count in counts.items()))
    ready = [rung.name for rung in rungs if rung.state == "ready"]
    lines.append(f"next: {ready[0]}" if ready else "every exercise done")
    return "\n".join(lines)


def learner_functions(
    path: str | Path, block_table: dict[str, Callable] | None = None
) -> tuple[dict[str, Callable], list[FunctionVerdict]]:
    """The functions of the learner's file that the "learner" kernel set runs: every exercise they
    wrote (done or wrong: a wrong backward is theirs to see fail), with their forward where they
    wrote one. Exercises still to do, or whose code raised, stay the textbook's. Their block
    backwards (blocks.py's names), done or wrong, go into ``block_table`` where one is given."""
    module = load_learner(path)
    verdicts = check(path, module=module)
    table: dict[str, Callable] = {}
    for verdict in verdicts:
        own_block = _own(module, verdict.name) if verdict.name in BLOCKS else None
        if verdict.status in ("done", "wrong") and own_block is not None and block_table is not None:
            block_table[verdict.name] = own_block
        if verdict.status in ("done", "wrong") and verdict.name not in BLOCKS:
            exercise = BY_NAME[verdict.name]
            table[exercise.backward] = getattr(module, exercise.backward)
            own_forward = _own(module, exercise.forward)
            if own_forward is not None:
                table[exercise.forward] = own_forward
    return table, verdicts


def guarded(
    functions: dict[str, Callable], path: str | Path, ran: set[str] | None = None
) -> dict[str, Callable]:
    """The learner's functions, each raising a RuntimeError that says what their code raised or
    exited with (with their file:line) instead of a traceback of the model around it; the name of
    each that runs is added to ``ran``."""
    file = Path(path).expanduser().resolve()

    said: set[tuple[str, str]] = set()

    def guard(name: str, function: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not threading.main_thread():  # warnings' filters are global
                return function(*args, **kwargs)
            with warnings.catch_warnings(record=True) as caught:  # NumPy's NaN warnings: say whose
                warnings.simplefilter("always", RuntimeWarning)
                result = function(*args, **kwargs)
            for warning in caught:
                where = f"{Path(warning.filename).name}:{warning.lineno}"
                if (name, str(warning.message)) not in said:
                    said.add((name, str(warning.message)))
                    warnings.warn(f"your {name}: {warning.message} ({where})", UserWarning, stacklevel=2)
            return result

        def run(*args: Any, **kwargs: Any) -> Any:
            if ran is not None:
                ran.add(name)
            try:
                return call(*args, **kwargs)
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # SystemExit included: their code ending the run is theirs to see
                raise RuntimeError(f"your {name} raised {describe_error(error, file)}") from None

        run.__name__ = name
        return run

    wrapped = {name: guard(name, function) for name, function in functions.items()}
    for name, function in functions.items():  # their functions calling each other: guarded and counted too
        space = getattr(function, "__globals__", None)
        theirs = getattr(function, "__module__", None) not in (functional.__name__, blocks.__name__)
        if theirs and isinstance(space, dict) and space.get(name) is function:
            space[name] = wrapped[name]
    return wrapped


# ------------------------------------------------------------------------------------------------
# learn train on the learner's blocks: the encoder-decoder of blocks.py, trained with a plain Adam

TRAINED_BLOCKS = ("feed_forward_backward", "encoder_block_backward", "decoder_block_backward",
                  "encoder_decoder_backward")  # fmt: skip


@contextmanager
def blocks_using(functions: dict[str, Callable]) -> Iterator[None]:
    """numpy_transformer.blocks calling ``functions`` (textbook names: blocks or layers) instead of
    the textbook's wherever it calls them by name; its globals restored on the way out.

    While one of ``functions`` runs, blocks.py is the textbook's own again: what the learner's code
    calls (``blocks.encoder_block_backward`` wrapped, ``textbook()``) reaches the textbook's code,
    never back into theirs."""
    space = vars(blocks)
    saved = {name: space[name] for name in functions if name in space}
    theirs: dict[str, Callable] = {}

    def on_the_textbook(function: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            space.update(saved)
            try:
                return function(*args, **kwargs)
            finally:
                space.update(theirs)

        call.__name__ = function.__name__
        return call

    theirs.update({name: on_the_textbook(functions[name]) for name in saved})
    try:
        space.update(theirs)
        yield
    finally:
        space.update(saved)


@dataclass
class BlocksResult:
    dev_loss: float
    accuracy: float  # teacher-forced: the share of the dev targets (padding aside) predicted first
    steps: int


def train_blocks(
    task: Any,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    width: int,
    n_layers: int,
    n_heads: int,
    d_ff: int,
    seed: int,
    label_smoothing: float,
    dev_pairs: Sequence[tuple[str, str]],
) -> BlocksResult:
    """Train blocks.encoder_decoder_forward's model (float64, blocks.init_params) on ``task``'s
    training batches with Adam (lr constant, betas 0.9, 0.98), the gradients from
    blocks.encoder_decoder_backward as blocks.py reads it now (see blocks_using), and evaluate it
    teacher-forced on ``dev_pairs``: the mean loss (without label smoothing) and the token accuracy."""
    xp = get_array_module()
    pad = task.ids.pad
    params = blocks.init_params(
        numpy.random.default_rng(seed), len(task.src_vocab), len(task.tgt_vocab), width, d_ff, n_layers,
        scale=width**-0.5,
    )  # fmt: skip
    first = {key: xp.zeros_like(value) for key, value in params.items()}
    second = {key: xp.zeros_like(value) for key, value in params.items()}
    beta1, beta2, eps = 0.9, 0.98, 1e-9
    for step in range(1, steps + 1):
        batch = task.train_batch(step - 1, batch_size)
        _, cache = blocks.encoder_decoder_forward(
            batch.src, batch.tgt_in, batch.tgt_out, params, n_layers, n_heads, pad, label_smoothing
        )
        grads = blocks.encoder_decoder_backward(1.0, cache)
        for key, value in params.items():
            grad = xp.asarray(grads[key], dtype=value.dtype) if key in grads else None
            if grad is None or grad.shape != value.shape:
                got = "nothing" if grad is None else f"shape {grad.shape}"
                raise RuntimeError(f"the gradient of {key} is {got}, not shape {value.shape}")
            first[key] = beta1 * first[key] + (1 - beta1) * grad
            second[key] = beta2 * second[key] + (1 - beta2) * grad * grad
            update = (first[key] / (1 - beta1**step)) / (xp.sqrt(second[key] / (1 - beta2**step)) + eps)
            params[key] = value - lr * update
    total = correct = tokens = 0.0
    for start in range(0, len(dev_pairs), 100):
        batch = task.batch(dev_pairs[start : start + 100])
        loss, cache = blocks.encoder_decoder_forward(
            batch.src, batch.tgt_in, batch.tgt_out, params, n_layers, n_heads, pad, 0.0
        )
        predicted = cache.loss.probs.argmax(axis=-1)
        valid = cache.loss.valid
        n = float(valid.sum())
        total += float(loss) * n
        correct += float(((predicted == cache.loss.targets) & valid).sum())
        tokens += n
    return BlocksResult(total / max(tokens, 1.0), correct / max(tokens, 1.0), steps)


# ------------------------------------------------------------------------------------------------
# learning aids: hints one step further each time, and cmp for the intermediates of a backward

HINTS: dict[str, tuple[str, ...]] = {
    "positional_encoding_backward": (
        "The table is a constant: what does adding a constant do to a gradient?",
        "y = x + c, so dy/dx is the identity: dx is dout, unchanged (no sum, no weight: there is none).",
    ),
    "relu_backward": (
        "The slope of max(x, 0) is 1 where x > 0 and 0 elsewhere; the cache is where x > 0.",
        "dx = dout where the cache is true, 0 elsewhere: dout * cache.",
    ),
    "dropout_backward": (
        "With the mask fixed, y is x times a constant per entry: keep / keep_prob.",
        "None as the cache means y = x. Otherwise dx = dout * keep / keep_prob.",
    ),
    "linear_backward": (
        "Write y = x W^T + b for one row first; every row uses the same W and b, so their gradients add "
        "over the rows.",
        "Flatten x to (N, in) and dout to (N, out): dx = dout W, dW = dout_rows^T x_rows, db = the sum of "
        "dout's rows. dx keeps x's shape (any rank: 2-D, 3-D, 4-D).",
    ),
    "embedding_backward": (
        "y[b, t] = E[ids[b, t]] * scale: each output row came from one table row.",
        "Start from zeros of the table's shape and add dout[b, t] * scale into row ids[b, t]; a token that "
        "occurs twice gets both (xp.add.at, not assignment).",
    ),
    "softmax_backward": (
        "Every output of a row depends on every input of that row (they sum to 1).",
        "The Jacobian of one row is diag(y) - y y^T; apply it to dout without building it.",
        "dx = y * (dout - sum(dout * y, over the row, keepdims)).",
    ),
    "cross_entropy_backward": (
        "Softmax and cross-entropy together have a simple gradient with respect to the logits.",
        "Per token: probs - q, q the smoothed target (1 - eps) one_hot + eps / V; padding rows get 0.",
        "dlogits = (probs - q) * valid[:, None] * dloss / n_valid, reshaped to the logits' shape.",
    ),
    "layer_norm_backward": (
        "dgamma and dbeta are the sums over rows of dout * xhat and dout. For dx, x reaches y three ways: "
        "directly, through the mean and through the variance.",
        "With g = dout * gamma (the gradient reaching xhat): the mean's path subtracts the row mean of g, "
        "the variance's path subtracts xhat times the row mean of g * xhat.",
        "dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), the means over the last axis, keepdims.",
    ),
    "attention_backward": (
        "Run the forward backwards: out = dropped @ v, dropped = dropout(P), P = softmax(S), S = q k^T * "
        "scale, masked scores constants; a query row may be masked entirely.",
        "dv = dropped^T dout; ddropped = dout v^T; dP = your dropout_backward; dS = your softmax_backward, "
        "0 where masked.",
        "dq = dS k * scale, dk = dS^T q * scale (swapaxes(-1, -2) for the transposes).",
    ),
    "multi_head_attention_backward": (
        "Reverse the forward: the output projection, the heads (split/merge are rearrangements), then the "
        "three input projections; your linear_backward (each bias's gradient, or None) and "
        "attention_backward do the work.",
        "x_kv feeds both K and V: dx_kv is the sum of the two linear_backwards' dx. Stack dW_q, dW_k, dW_v "
        "(xp.concatenate) and the biases the same way when they are not None.",
    ),
    "multi_head_self_attention_backward": (
        "It is cross-attention with x_q = x_kv = x.",
        "Call your multi_head_attention_backward and add dx_q and dx_kv.",
    ),
    "multi_head_latent_attention_backward": (
        "Reverse the forward: output, heads, then K and V from the latent C, then C and Q from the inputs.",
        "C feeds both K and V: dC is the sum of their linear_backwards' dx; then C's own linear_backward.",
    ),
    "multi_head_latent_self_attention_backward": (
        "It is latent cross-attention with x_q = x_kv = x.",
        "Call your multi_head_latent_attention_backward and add dx_q and dx_kv.",
    ),
    "residual_backward": (
        "x reaches y along two paths, the skip and the branch: what happens to gradients where paths join?",
        "They add. Pre-norm: the norm is on the branch only. Post-norm: the norm is after the sum, so "
        "first go back through it.",
        "pre: dx = dout + layer_norm_backward(linear_backward(dout)); post: ds = layer_norm_backward(dout), "
        "dx = ds + linear_backward(ds); dparams from the two backwards.",
    ),
    "feed_forward_backward": (
        "Three steps forward (linear, relu, linear): three steps back, in reverse order.",
        "dh, dw2, db2 = linear_backward(dout, cache.second); dh = relu_backward(dh, cache.activation); "
        "dx, dw1, db1 = linear_backward(dh, cache.first).",
    ),
    "encoder_block_backward": (
        "Read the forward bottom-up: the feed-forward residual first, then the attention residual; your "
        "feed_forward_backward and multi_head_self_attention_backward do the branches.",
        "At each residual dx = the gradient that arrived + what comes back through the branch (its norm "
        "included); the self-attention's x feeds q, k and v: your multi_head_self_attention_backward adds them.",
    ),
    "decoder_block_backward": (
        "Three residuals, undone in reverse: feed-forward, cross-attention, self-attention. Where does "
        "the memory enter the forward?",
        "The cross-attention's multi_head_attention_backward gives dx_q (towards x) and dx_kv: dx_kv is "
        "dmemory. Each residual adds the gradient that arrived to the branch's.",
    ),
    "encoder_decoder_backward": (
        "Go back from the loss: cross-entropy, the projection (linear_backward with tgt_table), the final "
        "norm, the decoder blocks in reverse, the target embedding; then the encoder. Which tensors does "
        "the forward use more than once?",
        "The memory is used by every decoder layer: add up their dmemory before going into the encoder's "
        "final norm. tgt_table is used twice: add the projection's and the embedding's gradients.",
        "Positional encoding passes gradients unchanged. Name each block's gradients with its prefix "
        "(enc{i}_, dec{i}_) as params does.",
    ),
}


def _hint_file(path: Path) -> Path:
    return path.with_name(f".{path.name}.hints.json")


def next_hint(path: str | Path, name: str) -> str:
    """The next hint for ``name``, one step further than the last one given; the level is kept in
    a small JSON file beside the learner's file (written atomically)."""
    import json

    if name not in HINTS:
        raise ValueError(unknown_exercise(name))
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    state_file = _hint_file(file)
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
        if not isinstance(state, dict):
            state = {}
    except (OSError, ValueError):
        state = {}
    hints = HINTS[name]
    level = state.get(name, 0)
    level = level if isinstance(level, int) and level >= 0 else 0
    if level >= len(hints):
        return f"{name}: no more hints ({len(hints)} of {len(hints)} given); the last one: {hints[-1]}"
    state[name] = level + 1
    write_text_atomically(state_file, json.dumps(state, indent=1, sort_keys=True) + "\n")
    more = "" if level + 1 == len(hints) else " (ask again for the next)"
    return f"{name}, hint {level + 1} of {len(hints)}{more}: {hints[level]}"


def cmp(name: str, yours: Any, reference: Any, quiet: bool = False) -> bool:
    """Compare an intermediate of your backward with the textbook's (backprop-ninja's cmp): prints
    'name  exact / approximately equal / wrong  largest difference' and returns whether it is close.

    Call it inside your backward, e.g. ``cmp("dscores", dscores, textbook(cache, dout)["dscores"])``.
    """
    a, b = to_numpy(yours), to_numpy(reference)
    a = numpy.asarray(a)
    b = numpy.asarray(b)
    if a.shape != b.shape:
        if not quiet:
            print(f"{name:<12} wrong shape: yours {a.shape}, expected {b.shape}")
        return False
    floating = a.dtype.kind in "fc" and b.dtype.kind in "fc"  # NaN where the textbook has NaN is equal
    scale = max(1.0, float(numpy.nanmax(numpy.abs(b), initial=0.0)))
    exact = bool(numpy.array_equal(a, b, equal_nan=floating))
    close = bool(numpy.allclose(a, b, rtol=1e-7, atol=1e-9 * scale, equal_nan=floating))
    difference = numpy.abs(a - b)
    if floating:
        difference = numpy.where(numpy.isnan(a) & numpy.isnan(b), 0.0, difference)
    largest = float(difference.max(initial=0.0))
    verdict = "exact" if exact else "approximately equal" if close else "wrong"
    if not quiet:
        print(f"{name:<12} {verdict:<20} largest difference {largest:.3g}")
    return close


def textbook(cache: Any, dout: Any) -> dict[str, Any]:
    """The textbook's intermediates of the backward of ``cache``'s forward, by name, for ``cmp``.

    Attention (an AttentionCache): dv, ddropped, dprobs, dscores, dq, dk. Layer norm: g (the gradient
    reaching xhat), dx, dgamma, dbeta. Multi-head attention: dheads, dq, dk, dv (before the input
    projections). Linear: dx, dweight, dbias. The cache of any other exercise's forward (a block's
    included): what its backward returns, by the exercise's names ("dx", "dmemory"...), a block's
    parameter gradients as "d" + the parameter's name ("dw1", "dln1_gamma"...), and the gradient at
    every boundary inside it, named by the piece's place in the cache: "d" + place is the gradient
    reaching that piece's output (the dout its backward is given), place + "." + a gradient's name
    is what that backward returns. So for an encoder block "dfeed_forward" is the block's dout,
    "dnorm_2" the feed-forward's dx, "dattention" the gradient between the two residuals,
    "dfeed_forward.activation" the gradient reaching the relu and "feed_forward.activation.dx" the one
    past it (a feed-forward block's own: "dactivation", "activation.dx"); for a
    decoder block "dcross_attention" and "cross_attention.dx_kv" (its dmemory); for the whole model
    "dloss" (dloss), "dprojection" (dlogits), "ddecoder_norm", "ddecoder[i]" (the gradient reaching
    layer i's output: "ddecoder[n-1]" is the stack's output), "decoder[i].dmemory" (layer i's part
    of the memory's gradient), "dencoder_norm" (dmemory, every layer's added), "dtgt_embedding"
    (after the positions, which pass it unchanged), "projection.dweight" and "tgt_embedding.dtable"
    (the tied matrix's two gradients, before they add), and every block's own boundaries under its
    place ("ddecoder[1].norm_3"). Attention's dscores is the gradient of the scaled scores S = q k^T
    * scale (masked entries 0), so dq = dscores @ k * scale.
    """
    xp = get_array_module()
    if isinstance(cache, functional.AttentionCache):
        ddropped = dout @ cache.v.swapaxes(-1, -2)
        dprobs = functional.dropout_backward(ddropped, cache.dropout)
        dscores = functional.softmax_backward(dprobs, cache.probs)
        if cache.mask is not None:
            dscores = xp.where(cache.mask, dscores, 0.0)
        dq, dk, dv = functional.attention_backward(dout, cache)
        return _Intermediates(dv=dv, ddropped=ddropped, dprobs=dprobs, dscores=dscores, dq=dq, dk=dk)
    if isinstance(cache, functional.LayerNormCache):
        dx, dgamma, dbeta = functional.layer_norm_backward(dout, cache)
        return _Intermediates(g=dout * cache.gamma, dx=dx, dgamma=dgamma, dbeta=dbeta)
    if isinstance(cache, (functional.MultiHeadAttentionCache, functional.LatentAttentionCache)):
        dheads = functional.linear_backward(dout, cache.output)[0]
        dq, dk, dv = functional.multi_head_backward(dheads, cache.heads)
        return _Intermediates(dheads=dheads, dq=dq, dk=dk, dv=dv)
    if isinstance(cache, functional.LinearCache):
        return _Intermediates(zip(("dx", "dweight", "dbias"), functional.linear_backward(dout, cache)))
    for exercise in EXERCISES:  # FeedForwardCache: feed_forward_backward, and so on
        stem = exercise.backward.removesuffix("_backward")
        if type(cache).__name__ == "".join(part.title() for part in stem.split("_")) + "Cache":
            result, calls = _recorded(exercise.backward, dout, cache)
            named = _Intermediates(_boundaries(calls, cache))
            for name, value in zip(exercise.grads, result if isinstance(result, tuple) else (result,)):
                named.update(
                    {f"d{key}": v for key, v in value.items()} if isinstance(value, dict) else {name: value}
                )
            return named
    known = [
        "AttentionCache",
        "LayerNormCache",
        "MultiHeadAttentionCache",
        "LatentAttentionCache",
        "LinearCache",
    ]
    raise TypeError(
        f"no intermediates known for a cache of type {type(cache).__name__}: textbook() takes the caches "
        f"{', '.join(known)} and those the exercises' forwards return"
    )


class _Intermediates(dict):
    """textbook()'s result: a missing name says which names there are."""

    def __missing__(self, key: str) -> Any:
        raise KeyError(f"{key!r}: the textbook's intermediates here are {', '.join(self)}")
