"""From a wrong gradient to a named mistake: the known mistakes of each case, the piece of a block or
of the whole model where a mistake lives, a constant factor, a gradient counted twice."""

from __future__ import annotations

import inspect
import itertools
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy

from ... import functional
from ...backend import Array, get_array_module, to_numpy
from .. import blocks
from ..exercises.curriculum import BY_NAME
from ..exercises.exercise import Case
from ..exercises.layer_exercises import cross_entropy_candidates
from .recording import RecordedCall, cache_paths
from .verdicts import GradientVerdict, Localised, Raised, as_array, equal_to_rounding


def diagnose(
    yours: numpy.ndarray, right: numpy.ndarray, case: Case, name: str, candidates: list[tuple[Array, str]]
) -> tuple[str | None, float | None]:
    """The key of the known mistake ``yours`` looks like (and the factor, for "factor"), or None."""
    if yours.shape != right.shape:
        lead = yours.ndim - right.ndim
        if (
            lead > 0
            and yours.shape[lead:] == right.shape
            and equal_to_rounding(yours.reshape(-1, *right.shape).sum(0), right)
        ):
            return "rows_sum", None
        if (
            yours.size == right.size
            and lead == 0
            and right.ndim
            and yours.ndim == 2
            and equal_to_rounding(yours.T, right)
        ):
            return "transposed", None
        if yours.size == right.size and equal_to_rounding(yours.reshape(right.shape), right):
            return "reshaped", None
        return None, None
    for candidate, key in candidates:
        candidate = numpy.asarray(to_numpy(candidate), dtype=numpy.float64)
        if (
            candidate.shape == right.shape
            and not equal_to_rounding(candidate, right)
            and equal_to_rounding(yours, candidate)
        ):
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
        if abs(factor - 1) > 1e-6 and equal_to_rounding(yours, factor * right):
            if abs(factor + 1) <= 1e-6:
                return "sign", None
            for value, key in case.factors.get(name, []):
                if abs(factor - value) <= 1e-6 * abs(value):
                    return key, None
            return "factor", factor
    return None, None


def boundaries(calls: list[RecordedCall], cache: Any) -> dict[str, Any]:
    """The gradients at every boundary of a block, from its recorded calls: "d" + a piece's place
    in the cache is the gradient reaching that piece's output (the dout its backward was given),
    and place + "." + a gradient's name is what that backward returned ("decoder[1].dmemory")."""
    paths = cache_paths(cache)
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


def _array(value: Any) -> numpy.ndarray:
    return numpy.asarray(to_numpy(value) if hasattr(value, "shape") else value, dtype=numpy.float64)


def localise(
    calls: list[RecordedCall],
    cache: Any,
    right_calls: list[RecordedCall],
    right_cache: Any,
    dloss: float | None,
) -> Localised | None:
    """Compare the gradient the learner's block handed each piece (their recorded calls) with the
    textbook's, in the textbook's order; the first that differs is where the mistake is. None when
    every piece they called was handed the right gradient."""
    theirs: dict[str, RecordedCall] = {}
    paths = cache_paths(cache)
    for call in calls:
        if id(call.cache) in paths:
            theirs.setdefault(paths[id(call.cache)], call)
    right_paths = cache_paths(right_cache)
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
            and equal_to_rounding(_array(theirs[where].dout), _array(call.dout))
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
    return a.shape == b.shape and equal_to_rounding(a, b)


def _boundary_mistake(
    where: str, yours: numpy.ndarray, right: dict[str, RecordedCall], cache: Any, dloss: float | None
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
            if equal_to_rounding(yours, dhidden):
                return "relu_skipped", {}
            if equal_to_rounding(yours, dhidden * (dhidden > 0)):
                return "relu_mask", {}
    if right[where].name == "encoder_stack_backward":  # the encoder fed the decoder's input gradient
        stacks = [call for call in right.values() if call.name == "decoder_stack_backward"]
        if any(_close_shaped(yours, call.result[0]) for call in stacks):
            return "memory_swapped", {}
        if any(_close_shaped(yours - _array(call.result[0]), expected) for call in stacks):
            return "memory_plus_input", {}
    a_norm = right[where].name == "layer_norm_backward"
    for other, call in right.items():
        dout = _array(call.dout)
        if other == where or dout.shape != expected.shape or equal_to_rounding(dout, expected):
            continue
        if call.name == "dropout_backward":  # the dropout's backward left out, or its scale
            if equal_to_rounding(yours, dout):
                return "dropout_skipped", {}
            if equal_to_rounding(yours, dout * _array(call.cache.keep)):
                return "dropout_scale", {}
        if (
            isinstance(owner, STACKS)
            and call.name == "layer_norm_backward"
            and equal_to_rounding(yours, dout)
        ):
            return "final_norm_skipped", {}
        if equal_to_rounding(
            yours, dout
        ):  # a norm handed its branch's own gradient: the branch's backward skipped
            return ("residual_dropped", {}) if residual and not a_norm else ("skipped", {"above": other})
        if residual and equal_to_rounding(yours + dout, expected):  # the skip's gradient not added
            return "residual_dropped", {}
        if (
            residual and a_norm and equal_to_rounding(yours - dout, expected)
        ):  # the skip's gradient through the norm
            return "norm_path", {}
    for call in right.values():
        a_norm = call.name == "layer_norm_backward" and call.result is not None
        if a_norm and _array(call.result[0]).shape == expected.shape:
            skip = expected - _array(call.result[0])
            branch = skip + _array(call.dout)  # the norm's backward left out of the branch
            summed = _array(functional.layer_norm_backward(get_array_module().asarray(branch), call.cache)[0])
            if equal_to_rounding(yours, branch) or equal_to_rounding(yours, summed):
                return "norm_path", {}
        if call.name == "decoder_block_backward" and _close_shaped(yours, call.result[1]):
            return "memory_one_layer", {}
    if _counted_twice(yours, expected, right.values()):
        return "counted_twice", {}
    loss = loss_of(cache)
    if loss is not None and where in PROJECTIONS:
        for candidate, key in cross_entropy_candidates(loss, dloss)["logits"]:
            if _close_shaped(yours, candidate):
                return key, {}
    if yours.ndim == 3 and yours.shape == expected.shape:
        added = yours - expected
        table = functional.sinusoidal_table(yours.shape[1], yours.shape[2], numpy.float64)
        if equal_to_rounding(added, numpy.broadcast_to(_array(table), added.shape)):
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
        embedding = right[where].name in ("embedding_backward", "embedding_with_positions_backward")
        named = _named_constant(factor, cache, dloss, where, embedding)
        return named if named is not None else _factor_mistake(factor, residual)
    return None, {}


PROJECTIONS = ("projection", "output.projection")  # the projection with its loss; the whole model's


def loss_of(cache: Any) -> Any:
    """The loss's cache: the projection with its loss holds it, the whole model under its output."""
    loss = getattr(cache, "loss", None)
    return loss if loss is not None else getattr(getattr(cache, "output", None), "loss", None)


RESIDUAL_BLOCKS = (blocks.EncoderBlockCache, blocks.DecoderBlockCache, blocks.ResidualCache)
STACKS = (blocks.EncoderStackCache, blocks.DecoderStackCache)  # N blocks, then a final norm


def _constant_factor(yours: numpy.ndarray, right: numpy.ndarray) -> float | None:
    """The constant c != 1 with yours = c * right, or None."""
    norm = float((right * right).sum())
    if norm == 0 or yours.shape != right.shape:
        return None
    factor = float((yours * right).sum()) / norm
    return factor if abs(factor - 1) > 1e-6 and equal_to_rounding(yours, factor * right) else None


def _embedding_scales(cache: Any) -> list[float]:
    """The sqrt(D) of every embedding in ``cache`` (an EmbeddingCache's scale)."""
    if isinstance(cache, functional.EmbeddingCache):
        return [float(cache.scale)]
    if isinstance(cache, (tuple, list)):
        return [scale for inner in cache for scale in _embedding_scales(inner)]
    return []


def _decoder_layers(cache: Any) -> int:
    """The number of decoder layers of a decoder stack's cache or the whole model's; 0 for others."""
    stack = cache if isinstance(cache, blocks.DecoderStackCache) else getattr(cache, "decoder", None)
    return len(stack.layers) if isinstance(stack, blocks.DecoderStackCache) else 0


def _named_constant(
    factor: float, cache: Any, dloss: float | None, where: str, embedding: bool
) -> tuple[str, dict[str, Any]] | None:
    """A gradient off by one of the exercise's own constants, as the mistake that constant tells:
    dloss twice, the mean twice, the embedding's sqrt(D) twice or undone, the memory's gradients
    averaged over the layers, the tied matrix's two gradients averaged (``embedding``: the gradient
    is an embedding's)."""

    def near(value: float) -> bool:
        return value not in (0.0, 1.0) and abs(factor - value) <= 1e-6 * abs(value)

    if dloss is not None and near(float(dloss)):
        return "upstream_twice", {}
    loss = loss_of(cache)
    if loss is not None and near(1 / float(loss.n_valid)):
        return "token_count_twice", {}
    if embedding or "table" in where:
        for scale in _embedding_scales(cache):
            if near(scale):
                return "embedding_scale_twice", {}
            if near(1 / scale):
                return "embedding_scale", {}
    layers = _decoder_layers(cache)
    if "memory" in where and layers > 1 and near(1 / layers):
        return "memory_averaged", {}
    if "tgt_table" in where and near(0.5):
        return "tied_averaged", {}
    return None


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


def _counted_twice(yours: numpy.ndarray, right: numpy.ndarray, calls: Iterable[RecordedCall]) -> bool:
    """Whether ``yours`` is ``right`` plus a gradient at one of the textbook's boundaries (what a
    piece was handed or returned first): a path's gradient added twice."""
    for call in calls:
        for value in (call.dout, call.result[0] if isinstance(call.result, tuple) else call.result):
            if not hasattr(value, "shape"):
                continue
            extra = _array(value)
            if extra.shape == right.shape and extra.any() and equal_to_rounding(yours - extra, right):
                return True
    return False


def returned_mistake(
    names: Sequence[str],
    grads: Sequence[Any],
    expected: Sequence[Any],
    verdicts: dict[str, GradientVerdict],
    right_calls: list[RecordedCall],
    join: bool,
    cache: Any = None,
    dloss: float | None = None,
) -> Localised | None:
    """Why a block whose pieces were all handed the right gradients returns a wrong one: a gradient
    under another parameter's key, a square matrix transposed, the memory's gradient dropped or
    gathered from some layers only, a path's gradient added twice, a constant factor (one of the
    exercise's own constants (``cache``, ``dloss``) named as the mistake it tells); None when it is
    none of those."""
    rights = [None if right is None else _array(right) for right in expected]
    for label, grad, right in zip(names, grads, rights):
        yours = as_array(grad)
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
        if yours.ndim == 2 and yours.shape[0] == yours.shape[1] and equal_to_rounding(yours.T, right):
            return Localised(label, "transposed", kind="returned")
        if label == "dmemory" and not yours.any():
            return Localised(label, "memory_dropped", kind="returned")
        layers = [c for c in right_calls if c.name == "decoder_block_backward"]
        if label == "dmemory" and len(layers) > 1 and any(_close_shaped(yours, c.result[1]) for c in layers):
            return Localised(label, "memory_one_layer", kind="returned")
        if label == "dmemory" and len(layers) > 2:
            kept = _layers_kept(yours, [_array(c.result[1]) for c in layers])
            if kept:
                return Localised(
                    label, "memory_some_layers", {"kept": kept, "layers": len(layers)}, "returned"
                )
        if _counted_twice(yours, right, right_calls):
            return Localised(label, "counted_twice", kind="returned")
        if factor is not None:
            named = _named_constant(factor, cache, dloss, label, embedding=False)
            key, values = named if named is not None else _factor_mistake(factor, join and label == "dx")
            return Localised(label, key, values, kind="returned")
    return None


def _layers_kept(yours: numpy.ndarray, each: list[numpy.ndarray]) -> int:
    """How many of the layers' gradients ``each`` a sum over only some of them (two or more, not
    all) adds up to ``yours``; 0 when no such sum does."""
    for size in range(2, len(each)):
        for chosen in itertools.combinations(each, size):
            if _close_shaped(yours, sum(chosen[1:], chosen[0])):
                return size
    return 0


def returned_gradients(name: str, returned: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    """The gradients a backward returned, one per name, or Raised saying what it returned instead."""
    expected = f"({', '.join(names)})" if len(names) > 1 else f"{names[0]}, an array"
    if returned is None:
        raise Raised(f"{name} returned None (is its `return` missing?), expected {expected}")
    if inspect.isgenerator(returned) or isinstance(returned, Iterator):
        raise Raised(
            f"{name} returned a {type(returned).__name__}, expected {expected}"
            + (" as a tuple" if len(names) > 1 else "")
        )
    if len(names) == 1:
        if isinstance(returned, (tuple, list)):
            raise Raised(
                f"{name} returned a {type(returned).__name__} of {len(returned)}, expected {expected}"
            )
        return (returned,)
    if isinstance(returned, list):
        raise Raised(f"{name} returned a list, expected the tuple {expected}: return a, b, c makes a tuple")
    if not isinstance(returned, tuple):
        raise Raised(
            f"{name} returned one {type(returned).__name__}, expected the {len(names)} values {expected}"
        )
    if len(returned) != len(names):
        raise Raised(f"{name} returned {len(returned)} values, expected {len(names)}: {expected}")
    return returned
