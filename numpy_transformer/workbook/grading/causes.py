"""The causes of a wrong block that the first diagnosis (diagnosis.py) leaves unnamed or names too
broadly, read from the calls the learner's block made: a residual's branch dropped (told from its
skip), the pieces undone in the forward's order, two sibling caches swapped, a post-norm residual
undone in pre-norm order, the norm applied after the sum, the relu's mask inverted or applied on the
wrong side, a linear's input gradient through W^T, only one of an attention's input gradients kept,
padding counted in the loss's mean, the layers of a stack not chained or its final norm undone last,
a gradient subtracted where it adds, part of a matrix's gradient zeroed; and of a block that raised
inside: which function was handed which cache, and a gradient of which shape, an accumulator of zeros
shaped like another tensor, the whole model's two tables' gradients mixed up, a dropout's cache read
where dropout is off (None)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy

from ... import functional
from ...backend import get_array_module, to_numpy
from .. import blocks
from ..exercises.curriculum import BY_NAME
from ..exercises.mistakes import sentence
from .diagnosis import PROJECTIONS, STACKS, localise, loss_of, returned_mistake
from .recording import RecordedCall, cache_paths, textbook_calls
from .verdicts import GradientVerdict, Localised, Raised, as_array, equal_to_rounding

# what diagnosis.py names that a closer look may name better
BROAD = {None, "residual_dropped", "layer_order", "counted_twice", "stray_factor", "factor", "zero"}


def _array(value: Any) -> numpy.ndarray | None:
    if value is None or isinstance(value, (tuple, list, dict)):
        return None
    try:
        raw = numpy.asarray(to_numpy(value))
    except (TypeError, ValueError):
        return None
    return raw.astype(numpy.float64) if raw.dtype.kind in "biuf" else None


def _same(a: Any, b: Any) -> bool:
    a, b = _array(a), _array(b)
    return a is not None and b is not None and a.shape == b.shape and equal_to_rounding(a, b)


def _shape_of(value: Any) -> tuple[int, ...] | None:
    array = _array(value)
    return None if array is None else array.shape


def _results(call: RecordedCall) -> tuple[Any, ...]:
    return call.result if isinstance(call.result, tuple) else (call.result,)


def _first_result(call: RecordedCall) -> numpy.ndarray | None:
    return _array(_results(call)[0]) if call.result is not None else None


class _Calls:
    """The learner's calls and the textbook's, each by the place of the cache it was handed."""

    def __init__(
        self, calls: list[RecordedCall], cache: Any, right_calls: list[RecordedCall], right_cache: Any
    ):
        paths, right_paths = cache_paths(cache), cache_paths(right_cache)
        self.theirs = [(paths[id(c.cache)], c) for c in calls if id(c.cache) in paths]
        self.right: dict[str, RecordedCall] = {}
        for call in right_calls:
            if id(call.cache) in right_paths:
                self.right.setdefault(right_paths[id(call.cache)], call)
        self.order = list(self.right)  # the textbook's order
        self.cache = right_cache

    def first(self, place: str) -> RecordedCall | None:
        return next((c for p, c in self.theirs if p == place), None)

    def reaching(self, value: Any, but: str = "") -> str | None:
        """The place whose textbook gradient (the dout it is handed) ``value`` is, other than ``but``."""
        for place, call in self.right.items():
            if place != but and _same(value, call.dout) and bool(numpy.any(_array(call.dout))):
                return place
        return None

    def direct(self, places: Sequence[str]) -> list[str]:
        """The places among ``places`` that are the block's own pieces (not inside another piece)."""
        return [p for p in places if "." not in p]


def _owner(cache: Any, where: str) -> Any:
    """The cache of the block that holds the piece at ``where``."""
    parent = where.rsplit(".", 1)[0] if "." in where else ""
    owner = cache
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", parent):
        owner = owner[int(part[1:-1])] if part.startswith("[") else getattr(owner, part, None)
    return owner


def _post_norm(owner: Any) -> bool:
    return getattr(owner, "norm_first", True) is False


def _norm_of(place: str) -> bool:
    return place.rsplit(".", 1)[-1].startswith("norm")


def _path_dropped(
    yours: numpy.ndarray, expected: numpy.ndarray, calls: _Calls, where: str
) -> tuple[str, dict[str, Any]] | None:
    """A residual's skip or branch dropped where the paths meet: ``yours`` is ``expected`` less the
    gradient one piece's backward returned (the branch through it, or the post-norm sum's)."""
    owner = _owner(calls.cache, where) if where else calls.cache
    prefix = where.rsplit(".", 1)[0] + "." if "." in where else ""
    for place, call in calls.right.items():
        if not place.startswith(prefix) or "." in place[len(prefix) :]:
            continue  # only the pieces of the block the paths meet in
        result = _first_result(call)
        if result is None or result.shape != expected.shape or not result.any():
            continue
        rest = expected - result
        if not rest.any():
            continue
        skip = _post_norm(owner) and _norm_of(place)  # post-norm: the norm's dx is the sum's (the skip's)
        if equal_to_rounding(yours, rest):
            return ("residual_dropped", {}) if skip else ("branch_dropped", {"piece": place[len(prefix) :]})
        if equal_to_rounding(yours, result):
            return ("branch_dropped", {"piece": "the sublayer"}) if skip else ("residual_dropped", {})
    branches = [  # two branches dropped at once: a piece handed the gradient from two residuals above
        (place[len(prefix) :], result)
        for place, call in calls.right.items()
        if place.startswith(prefix) and "." not in place[len(prefix) :] and _norm_of(place)
        for result in [_first_result(call)]
        if result is not None and result.shape == expected.shape and result.any()
    ]
    for i, (first, a) in enumerate(branches):
        for second, b in branches[i + 1 :]:
            if not _post_norm(owner) and equal_to_rounding(yours, expected - a - b):
                return "branch_dropped", {"piece": f"{first} and through {second}"}
    return None


def _norm_last(calls: _Calls, where: str) -> bool:
    """A stack undone from its last layer, handed the stack's dout, its final norm after the layers."""
    prefix = where.rsplit(".", 1)[0] + "." if "." in where else ""
    if not isinstance(_owner(calls.cache, where), STACKS) or where != prefix + "norm":
        return False
    mine = [p for p, _ in calls.theirs if p.startswith(prefix) and "." not in p[len(prefix) :]]
    first = calls.first(mine[0]) if mine else None
    return (
        first is not None
        and mine[0] != where
        and where in mine
        and _same(first.dout, calls.right[where].dout)
    )


def _order(calls: _Calls, where: str) -> tuple[str, dict[str, Any]] | None:
    """The pieces undone in the forward's order: the learner's backward starts at another piece than
    the one nearest the output, handing it the block's dout."""
    prefix = where.rsplit(".", 1)[0] + "." if "." in where else ""
    mine = [p for p, _ in calls.theirs if p.startswith(prefix) and "." not in p[len(prefix) :]]
    right = [p for p in calls.order if p.startswith(prefix) and "." not in p[len(prefix) :]]
    if not mine or not right or mine[0] == right[0] or "[" in mine[0]:
        return None
    started = calls.first(mine[0])
    if started is None or not _same(started.dout, calls.right[right[0]].dout):
        return None
    owner = _owner(calls.cache, where)
    if isinstance(owner, blocks.ResidualCache) and _post_norm(owner):
        return "post_norm_order", {}
    names = [p[len(prefix) :] for p in right]
    return "piece_order", {"started": mine[0][len(prefix) :], "last": names[0], "first": names[-1]}


def _sibling_cache(calls: _Calls, where: str) -> tuple[str, dict[str, Any]] | None:
    """The gradient reaching ``where`` handed to the backward of a sibling piece (with its cache)."""
    expected = calls.right[where].dout
    for place, call in calls.theirs:
        sibling = place != where and place in calls.right and call.name == calls.right[where].name
        if sibling and _same(call.dout, expected) and not _same(calls.right[place].dout, expected):
            return "cache_swapped", {"where": where, "other": place, "function": call.name}
    return None


def _norm_after_sum(yours: numpy.ndarray, calls: _Calls, where: str) -> bool:
    """A pre-norm piece handed the norm's backward of what it should get: the norm applied after the sum."""
    expected = _array(calls.right[where].dout)
    if expected is None:
        return False
    xp = get_array_module()
    for place, call in calls.right.items():
        pre_norm = call.name == "layer_norm_backward" and not _post_norm(_owner(calls.cache, place))
        if pre_norm and _shape_of(call.dout) == expected.shape:
            summed = _array(functional.layer_norm_backward(xp.asarray(expected), call.cache)[0])
            if summed is not None and equal_to_rounding(yours, summed):
                return True
    return False


def _relu(yours: numpy.ndarray, expected: numpy.ndarray, calls: _Calls) -> str | None:
    """The relu's mask inverted, or a relu's backward applied to the block's own gradient."""
    for call in calls.right.values():
        if call.name != "relu_backward":
            continue
        mask = _array(call.cache)
        dhidden = _array(call.dout)
        if mask is None or dhidden is None or dhidden.shape != mask.shape:
            continue
        inverted = numpy.where(mask > 0, 0.0, dhidden)
        xp = get_array_module()
        for first in (c for c in calls.right.values() if c.name == "linear_backward"):
            if _shape_of(first.dout) == mask.shape:
                through = _array(functional.linear_backward(xp.asarray(inverted), first.cache)[0])
                if through is not None and equal_to_rounding(yours, through):
                    return "relu_inverted"
        if yours.shape == mask.shape and equal_to_rounding(yours, inverted):
            return "relu_inverted"
    if expected.any() and equal_to_rounding(yours, expected * (expected > 0)):
        return "relu_place"
    return None


def _linear_transposed(yours: numpy.ndarray, calls: _Calls) -> bool:
    """A linear's input gradient computed with W^T (dout W^T) where it is dout W."""
    for call in calls.right.values():
        weight = getattr(call.cache, "weight", None)
        dout = _array(call.dout)
        if call.name != "linear_backward" or weight is None or dout is None:
            continue
        w = _array(weight)
        square = w is not None and w.shape[0] == w.shape[1] == dout.shape[-1]
        if square and yours.shape == dout.shape and equal_to_rounding(yours, dout @ w.T):  # type: ignore[union-attr]
            return True
    return False


def _one_input_kept(yours: numpy.ndarray, calls: _Calls, where: str) -> bool:
    """Of an attention whose queries, keys and values all come from x, only some input gradients kept."""
    for place, call in calls.theirs:
        right = calls.right.get(place)
        if right is None or call.result is None or not isinstance(call.result, tuple):
            continue
        if call.name != right.name and "self" in right.name:
            parts = [_array(r) for r in call.result[:2]]
            if any(p is not None and p.shape == yours.shape and equal_to_rounding(yours, p) for p in parts):
                return True
            xp = get_array_module()
            for part in parts:
                norm = calls.right.get(where)
                if part is None or norm is None or norm.name != "layer_norm_backward":
                    continue
                if part.shape == _shape_of(norm.dout):
                    through = _array(functional.layer_norm_backward(xp.asarray(part), norm.cache)[0])
                    if through is not None and equal_to_rounding(yours, through):
                        return True
    return False


def _padding_counted(yours: numpy.ndarray, calls: _Calls, dloss: float | None) -> bool:
    """The loss's gradient with padding counted in the gradient and in the mean (over every position)."""
    loss = loss_of(calls.cache)
    if loss is None or dloss is None or not hasattr(loss, "probs"):
        return False
    probs, targets = _array(loss.probs), numpy.asarray(to_numpy(loss.targets))
    if probs is None:
        return False
    smoothing = float(loss.label_smoothing)
    rows = numpy.arange(probs.shape[0])
    target = numpy.full_like(probs, smoothing / probs.shape[1])
    target[rows, targets] += 1.0 - smoothing
    counted = (
        ((probs - target) * (dloss / probs.shape[0])).reshape(yours.shape)
        if probs.size == yours.size
        else None
    )
    return counted is not None and equal_to_rounding(yours, counted)


def _not_chained(calls: _Calls, where: str) -> bool:
    """A stack's layers undone in the right order, each handed the gradient from above the stack."""
    stem = where.rsplit("[", 1)[0]
    mine = [p for p, _ in calls.theirs if p.startswith(stem + "[") and "." not in p[len(stem) :]]
    right = [p for p in calls.order if p.startswith(stem + "[") and "." not in p[len(stem) :]]
    if not mine or mine[: len(right)] != right[: len(mine)]:
        return False
    top = calls.right[right[0]].dout
    return all(_same(c.dout, top) for p, c in calls.theirs if p in right)


def _extra_call(calls: _Calls) -> Localised | None:
    """A piece's backward called again, the second time with another piece's gradient."""
    seen: set[str] = set()
    for place, call in calls.theirs:
        if place in seen and place in calls.right and not _same(call.dout, calls.right[place].dout):
            above = calls.reaching(call.dout, but=place)
            if above is not None:
                return Localised(place, "skipped", {"above": above})
        seen.add(place)
    return None


def _reaching_cause(
    localised: Localised, calls: _Calls, dloss: float | None
) -> tuple[str | None, dict[str, Any]] | None:
    """A closer cause for the gradient handed to ``localised.where``."""
    where = localised.where
    mine = calls.first(where)
    if mine is None or where not in calls.right:
        return None
    yours, expected = _array(mine.dout), _array(calls.right[where].dout)
    if yours is None or expected is None or yours.shape != expected.shape:
        return None
    swapped = _sibling_cache(calls, where)
    if swapped is not None:
        return swapped
    if localised.mistake == "layer_order" and _not_chained(calls, where):
        return "not_chained", {}
    if localised.mistake == "layer_order":
        return None
    dropped = _path_dropped(yours, expected, calls, where)
    if dropped is not None:
        return dropped
    if localised.mistake == "residual_dropped":  # the gradient from above a piece, no paths meeting
        above = calls.reaching(yours, but=where)
        if above is not None:
            return "skipped", {"above": above}
    if _norm_after_sum(yours, calls, where):
        return "norm_path", {}
    if _norm_last(calls, where):
        return "final_norm_last", {}
    order = _order(calls, where)
    if order is not None:
        return order
    relu = _relu(yours, expected, calls)
    if relu is not None:
        return relu, {}
    if _linear_transposed(yours, calls):
        return "linear_dx_transposed", {}
    if _one_input_kept(yours, calls, where):
        return "paths", {}
    if where in PROJECTIONS and _padding_counted(yours, calls, dloss):
        return "padding_leak", {}
    return None


def _returned_cause(
    label: str, yours: numpy.ndarray, right: numpy.ndarray, calls: _Calls
) -> tuple[str, dict[str, Any]] | None:
    """A closer cause for a gradient the block returns while every piece was handed the right one."""
    if label == "dx":
        dropped = _path_dropped(yours, right, calls, "")
        if dropped is not None:
            return dropped
        for place, call in calls.theirs:  # a piece called again with another's gradient
            if place in calls.right and not _same(call.dout, calls.right[place].dout):
                above = calls.reaching(call.dout, but=place)
                if above is not None:
                    return "skipped", {"above": above}
    if label == "dmemory":  # a gradient of x's path added to the memory's
        for place, call in calls.right.items():
            extra = _array(call.dout)
            stray = extra is not None and extra.shape == right.shape and bool(extra.any())
            if stray and equal_to_rounding(yours - extra, right) and not call.name.startswith("decoder"):
                return "foreign_term", {"what": f"the gradient reaching {place}", "label": label}
    for place, call in calls.right.items():  # a gradient subtracted where two add
        for name, value in zip(BY_NAME[call.name].grads, _results(call)):
            extra = _array(value)
            if (
                extra is not None
                and extra.shape == right.shape
                and extra.any()
                and equal_to_rounding(yours, right - 2 * extra)
            ):
                return "subtracted", {"what": f"{place}.{name}"}
    if right.ndim == 2 and right.shape[0] == 3 * right.shape[1]:  # w_qkv: the q, k and v rows
        third = right.shape[1]
        parts = ("queries'", "keys'", "values'")
        zero = [
            i
            for i in range(3)
            if not yours[i * third : (i + 1) * third].any() and right[i * third : (i + 1) * third].any()
        ]
        kept = [
            i
            for i in range(3)
            if equal_to_rounding(yours[i * third : (i + 1) * third], right[i * third : (i + 1) * third])
        ]
        if zero and len(zero) + len(kept) == 3 and kept:
            return "qkv_part", {
                "zero": " and ".join(parts[i] for i in zero),
                "kept": " and ".join(parts[i] for i in kept),
            }
    return None


def partial_sum(yours: numpy.ndarray, right: numpy.ndarray) -> str | None:
    """A parameter's gradient with a leading axis left over: its sum over positions is partial."""
    lead = yours.ndim - right.ndim
    return "rows_sum" if right.ndim and lead > 0 and yours.shape[lead:] == right.shape else None


def block_mistake(
    calls: list[RecordedCall],
    cache: Any,
    right_calls: list[RecordedCall],
    right_cache: Any,
    dloss: float | None,
    names: Sequence[str],
    grads: Sequence[Any],
    expected: Sequence[Any],
    verdicts: dict[str, GradientVerdict],
    join: bool,
) -> Localised | None:
    """Where a wrong block's mistake is and why: diagnosis.py's localise and returned_mistake, with
    the causes they leave unnamed, or name too broadly, named here."""
    localised = localise(calls, cache, right_calls, right_cache, dloss)
    found = _Calls(calls, cache, right_calls, right_cache)
    if localised is not None and localised.kind == "reaching" and localised.mistake in BROAD:
        closer = _reaching_cause(localised, found, dloss)
        if closer is not None:
            return Localised(localised.where, closer[0], closer[1])
    if localised is not None:
        return localised
    extra = _extra_call(found)
    if extra is not None:
        return extra
    returned = returned_mistake(names, grads, expected, verdicts, right_calls, join, right_cache, dloss)
    if returned is None or returned.mistake in BROAD:
        for label, grad, right in zip(names, grads, expected):
            yours, wanted = as_array(grad), _array(right)
            if (
                yours is None
                or wanted is None
                or yours.shape != wanted.shape
                or equal_to_rounding(yours, wanted)
            ):
                continue
            closer = _returned_cause(label, yours, wanted, found)
            if closer is not None:
                return Localised(label, closer[0], closer[1], kind="returned")
            if returned is not None and returned.where == label:
                break
    return returned


# ------------------------------------------------------------------------------------------------
# a block that raised inside: which function was handed which cache and a gradient of which shape

SHAPES = re.compile(r"shapes? \(([\d, ]*)\),? \(([\d, ]*)\)")


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.replace(" ", "").split(",") if n)


def _named(calls: _Calls) -> dict[str, numpy.ndarray]:
    """Every boundary gradient of the textbook's backward, by name ("dnorm_2", "cross_attention.dx_kv")."""
    named: dict[str, numpy.ndarray] = {}
    for place, call in calls.right.items():
        dout = _array(call.dout)
        if dout is not None:
            named.setdefault(f"d{place}", dout)
        if call.result is not None:
            for name, value in zip(BY_NAME[call.name].grads, _results(call)):
                array = _array(value)
                if array is not None:
                    named.setdefault(f"{place}.{name}", array)
    return named


def _handed_a_sibling(calls: _Calls) -> tuple[str, dict[str, Any]] | None:
    """The last call before the error (its result then used) handed the gradient reaching a sibling
    piece, that piece not yet undone: the two pieces' caches swapped."""
    done = [(p, c) for p, c in calls.theirs if c.result is not None]
    if not done:
        return None
    place, call = done[-1]
    right = calls.right.get(place)
    if right is None or right.name != call.name or _same(call.dout, right.dout):
        return None
    other = calls.reaching(call.dout, but=place)
    if other is None or calls.right[other].name != call.name or other in {p for p, _ in done}:
        return None
    return "cache_swapped", {"where": other, "other": place, "function": call.name}


def _table_shapes(cache: Any) -> set[tuple[int, ...]]:
    """The whole model's two tables' shapes (src_table's, tgt_table's); empty for other caches."""
    if not isinstance(cache, blocks.EncoderDecoderCache):
        return set()
    return {
        tuple(cache.src_embedding.embedding.table_shape),
        tuple(cache.tgt_embedding.embedding.table_shape),
    }


def _zeros_accumulator(
    calls: _Calls, names: dict[str, Any], a: tuple[int, ...], b: tuple[int, ...]
) -> dict[str, Any] | None:
    """An array of zeros (a local of the learner's failing line) of one of the two shapes that met,
    while a gradient of the textbook's boundaries, of the other shape, was to be added to it."""
    named = _named(calls)
    for name, value in names.items():
        zeros = _array(value)
        if zeros is None or zeros.shape not in (a, b) or a == b or not zeros.size or zeros.any():
            continue
        other = b if zeros.shape == a else a
        for candidate in names.values():
            array = _array(candidate)
            if array is None or array.shape != other:
                continue
            what = next(
                (n for n, v in named.items() if v.shape == other and equal_to_rounding(array, v)), None
            )
            if what is not None:
                return {"name": name, "zeros": zeros.shape, "what": what, "other": other}
    return None


def _raised_cause(
    calls: _Calls, line: str, names: dict[str, Any] | None = None
) -> tuple[str, dict[str, Any]] | None:
    failing = next(((p, c) for p, c in calls.theirs if c.result is None), None)
    if failing is not None:
        place, call = failing
        right = calls.right.get(place)
        if right is None:
            return None
        direct = [p for p, _ in calls.theirs if "." not in p]
        starts = direct and direct[0] == place and calls.order and place != calls.order[0]
        if starts and _same(call.dout, calls.right[calls.order[0]].dout):
            order = _order(calls, place)
            if order is not None:
                return order
        other = calls.reaching(call.dout, but=place)
        used = {p for p, c in calls.theirs if c is not call and c.result is not None}
        if call.name != right.name:
            if other is not None and calls.right[other].name == call.name and other not in used:
                return "cache_swapped", {"where": other, "other": place, "function": call.name}
            return "wrong_function", {"function": call.name, "where": place, "right": right.name}
        dout, wanted = _array(call.dout), _array(right.dout)
        if other is not None and calls.right[other].name == call.name and other not in used:
            return "cache_swapped", {"where": other, "other": place, "function": call.name}
        if dout is not None and wanted is not None and dout.shape != wanted.shape:
            named = _named(calls)
            same = [n for n, v in named.items() if v.shape == dout.shape and _same(v, dout)]
            reaching = [n for n in same if n.startswith("d") and n[1:] in calls.right]  # not "decoder.dx"
            what = reaching[0] if reaching else same[0] if same else None
            said = (
                ""
                if what is None
                else f" (the gradient reaching {what[1:]})"
                if what in reaching
                else f" ({what})"
            )
            return "shape", {"where": place, "shape": dout.shape, "what": said, "expected": wanted.shape}
        return None
    swapped = _handed_a_sibling(calls)
    if swapped is not None:
        return swapped
    match = SHAPES.search(line)
    if match is None:
        return None
    a, b = _shape(match.group(1)), _shape(match.group(2))
    if len(a) == 2 and a == b[::-1] and a != b:
        return "transposed", {}
    tables = _table_shapes(calls.cache)
    if len(tables) == 2 and {a, b} == tables:
        return "tables_swapped", {"first": a, "second": b}
    accumulator = _zeros_accumulator(calls, names or {}, a, b)
    if accumulator is not None:
        return "zeros_shape", accumulator
    last = next((c for p, c in reversed(calls.theirs) if c.result is not None and "." not in p), None)
    if last is not None and isinstance(last.result, tuple):
        grads = BY_NAME[last.name].grads
        shapes = {name: _shape_of(v) for name, v in zip(grads, last.result)}
        first = next((n for n, s in shapes.items() if s == a), None)
        second = next((n for n, s in shapes.items() if s == b and n != first), None)
        if first and second:
            return "different_tensors", {"first": first, "second": second, "function": last.name}
    return None


def explain_raised(error: Raised, name: str, dout: Any, cache: Any, calls: list[RecordedCall]) -> Raised:
    """The error a learner's block raised, its file and line kept, with the cause where the recorded
    calls show it (the textbook's backward run on the same cache to compare)."""
    if error.cause is None and DROPOUT_NONE.search(error.line) and _dropout_off(cache):
        return _with_cause(error, "dropout_none", {})
    if not calls or not BY_NAME[name].params or error.cause is not None:
        return error
    try:
        _, right_calls = textbook_calls(name, dout, cache)
    except Exception:  # the learner's own forward's cache: no textbook run to compare with
        return error
    cause = _raised_cause(_Calls(calls, cache, right_calls, cache), error.line, error.names)
    return error if cause is None else _with_cause(error, *cause)


def _with_cause(error: Raised, key: str, values: dict[str, Any]) -> Raised:
    raised = Raised(f"{error.line}: {sentence(key, **values)}")
    raised.cause = key
    return raised


DROPOUT_NONE = re.compile(r"'NoneType' object has no attribute '(keep|keep_prob)'")  # a DropoutCache's


def _dropout_off(cache: Any) -> bool:
    """Whether ``cache`` is, or holds, a dropout cache that is None (dropout off: p = 0)."""
    if cache is None:
        return True
    if isinstance(cache, list):  # a stack's layers
        return any(_dropout_off(layer) for layer in cache if layer is not None)
    fields = getattr(cache, "_fields", None)
    if fields is None:
        return False
    return any(
        (field.startswith("dropout") and value is None)
        or (isinstance(value, (tuple, list)) and _dropout_off(value))
        for field, value in zip(fields, cache)
    )


# ------------------------------------------------------------------------------------------------
# a gradient returned in another dtype than the textbook's (the input's)


def dtype_drift(grad: Any, right: Any) -> str | None:
    """The detail of a gradient returned in another floating dtype than its input's, or None."""
    mine, theirs = getattr(grad, "dtype", None), getattr(right, "dtype", None)
    if mine is None or theirs is None:
        return None
    mine, theirs = numpy.dtype(str(mine)), numpy.dtype(str(theirs))
    if mine == theirs or mine.kind != "f" or theirs.kind != "f":
        return None
    return f"dtype {mine}, expected {theirs}"
