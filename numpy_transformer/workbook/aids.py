"""Learning aids: hints one step further each time, the textbook's intermediates and cmp."""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any

import numpy

from .. import functional
from ..backend import get_array_module, to_numpy
from ..files import write_text_atomically
from .exercises.curriculum import EXERCISES, LADDER, hints_of, unknown_exercise
from .grading.diagnosis import boundaries
from .grading.recording import textbook_calls
from .loading import learner_file


def _hint_file(path: Path) -> Path:
    return path.with_name(f".{path.name}.hints.json")


def next_hint(path: str | Path, name: str) -> str:
    """The next hint for ``name``, one step further than the last one given; the level is kept in
    a small JSON file beside the learner's file (written atomically)."""
    import json

    if name not in LADDER:
        raise ValueError(unknown_exercise(name))
    file = learner_file(path)
    state_file = _hint_file(file)
    state: Any = {}
    unreadable = ""  # a state file that is not ours to read: said, then written afresh
    if state_file.exists():
        try:
            state = json.loads(state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            unreadable = f"{type(error).__name__}: {error}"
        if not unreadable and not isinstance(state, dict):
            unreadable = f"a JSON {type(state).__name__}, not an object"
    if unreadable:
        state = {}
        unreadable = f" (counting from hint 1 again: {state_file} held no hint levels, {unreadable})"
    hints = hints_of(name)
    level = state.get(name, 0)
    level = level if isinstance(level, int) and not isinstance(level, bool) and level >= 0 else 0
    if level >= len(hints):
        return f"{name}: no more hints ({len(hints)} of {len(hints)} given); the last one: {hints[-1]}"
    state[name] = level + 1
    more = unreadable + ("" if level + 1 == len(hints) else " (ask again for the next)")
    try:
        write_text_atomically(state_file, json.dumps(state, indent=1, sort_keys=True) + "\n")
    except OSError as error:  # a read-only folder: the hint still helps, the next one repeats it
        more = f" (not remembered: {state_file} could not be written, {error.strerror or error})"
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
    past it (a feed-forward block's own: "dactivation", "activation.dx"); a residual branch's dropout
    "ddropout_2" (where the forward drew a mask); for a decoder block "dcross_attention" and
    "cross_attention.dx_kv" (its dmemory); for a stack "dnorm" (the stack's dout), "dlayers[i]" (the
    gradient reaching layer i's output: "dlayers[n-1]" is the final norm's dx) and, in the decoder's,
    "layers[i].dmemory" (layer i's part of the memory's gradient); for the projection with its loss
    "dloss" (dloss) and "dprojection" (dlogits); for the whole model "doutput" (dloss), "ddecoder" (the
    gradient reaching the decoder stack's output), "decoder.dmemory" (every layer's added),
    "dencoder" (the same dmemory, reaching the encoder stack), "dtgt_embedding" and "dsrc_embedding",
    "output.dparams" and "tgt_embedding.dparams" (the tied matrix's two gradients, as the projection's
    "weight" and the embedding's "table", before they add), and every piece's own boundaries under its
    place ("ddecoder.layers[1].norm_3"). Attention's dscores is the gradient of the scaled scores S = q k^T
    * scale (masked entries 0), so dq = dscores @ k * scale.
    """
    xp = get_array_module()
    number = isinstance(dout, numbers.Real) and not isinstance(dout, bool)  # a loss's dloss is a number
    if not number and (not hasattr(dout, "shape") or not hasattr(dout, "dtype")):
        raise TypeError(
            f"textbook(cache, dout): dout must be an array, the gradient of the forward's output, got "
            f"{type(dout).__name__}"
        )
    if isinstance(cache, (numpy.ndarray, xp.ndarray)):
        raise TypeError(
            "textbook(cache, dout): a cache that is a bare array (relu's, softmax's) keeps no intermediates: "
            "the backward's dx is its only gradient; compare with the textbook's own, "
            "functional.relu_backward(dout, cache) or functional.softmax_backward(dout, cache)"
        )
    try:
        return _textbook(cache, dout)
    except (ValueError, IndexError, AttributeError) as error:  # NumPy's shape errors: the learner's dout
        if isinstance(error, AttributeError) and not number:  # only a number lacks an array's attributes
            raise
        raise ValueError(
            f"textbook(cache, dout): dout of shape {tuple(numpy.shape(dout))} does not fit this "
            f"{type(cache).__name__} (give the gradient of the output its forward returned): {error}"
        ) from None


def _textbook(cache: Any, dout: Any) -> dict[str, Any]:
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
            result, calls = textbook_calls(exercise.backward, dout, cache)
            named = _Intermediates(boundaries(calls, cache))
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
