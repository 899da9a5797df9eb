"""The contract of a backward pass, checked before any finite difference: it writes into nothing it
was handed (dout, the inputs, the forward's cache), returns gradients of its inputs' dtype, shape
and array library, gives the same result for the same arguments, answers the dout it is given
(linear in it), and returns no buffer a later call changes; the forward computes in the precision it
is given. :func:`~numpy_transformer.gradient_checking.assert_gradients` and
:func:`~numpy_transformer.gradient_checking.assert_module_gradients` run these checks first."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy

from ..backend import Array, get_array_module, to_numpy
from .arguments import check_mapping, check_names, check_nondet_tol, check_overwrites, check_seed
from .differences import FLOAT64_EPS, unravel
from .report import GradcheckError
from .upstream import random_upstream


def first_not_finite(values: Array) -> tuple[int, tuple[int, ...], float] | None:
    """(how many, the first index, its value) of the entries of ``values`` that are not finite."""
    xp = get_array_module()
    bad = ~xp.isfinite(values)
    count = int(bad.sum())
    if count == 0:
        return None
    flat = int(bad.reshape(-1).argmax())
    index = unravel(flat, tuple(values.shape))
    return count, index, float(values.reshape(-1)[flat])


def output_shape(output: Any, where: str) -> tuple[int, ...]:
    """The shape of what the forward returned: an array's, or () for one number (a loss)."""
    if isinstance(output, (bool, str, bytes)) or output is None:
        raise TypeError(f"{where} must return an array or a number, got {type(output).__name__}")
    if isinstance(output, (int, float, numpy.number)):
        return ()
    shape = getattr(output, "shape", None)
    if shape is None:
        raise TypeError(f"{where} must return an array or a number, got {type(output).__name__}")
    return tuple(shape)


def _gradients(grads: Any, wrt: list[str], where: str) -> dict[str, Any]:
    """Pair backward's return value with ``wrt``, refusing a missing, extra or non-array gradient."""
    if grads is None:
        raise GradcheckError(
            f"{where} returned None, expected the gradients of {[n for n in wrt if n]} (a tuple, or one array)"
        )
    if isinstance(grads, list):
        raise TypeError(
            f"{where} returned a list of {len(grads)}, expected a tuple of the gradients of {wrt} "
            "(or one array)"
        )
    grads = grads if isinstance(grads, tuple) else (grads,)
    if len(grads) < len(wrt):
        missing = [name for name in wrt[len(grads) :] if name]
        raise GradcheckError(
            f"{where} returned {len(grads)} gradient(s) for wrt {wrt}: no gradient for "
            f"{', '.join(map(repr, missing))}, which would go unchecked"
        )
    if any(grad is not None for grad in grads[len(wrt) :]):  # a None past wrt: nothing left unchecked
        raise GradcheckError(
            f"{where} returned {len(grads)} values but wrt names {len(wrt)} ({wrt}): the extra "
            f"{sum(g is not None for g in grads[len(wrt) :])} would go unchecked; name every returned gradient in wrt "
            '("" for one not to check)'
        )
    analytic = {}
    for name, grad in zip(wrt, grads):
        if not name:
            continue
        if grad is None:
            raise GradcheckError(f"{where} returned None for the gradient of '{name}': it would go unchecked")
        if not hasattr(grad, "shape"):
            raise TypeError(
                f"{where} returned a {type(grad).__name__} for the gradient of '{name}', expected an array"
            )
        analytic[name] = grad
    return analytic


def is_array(value: Any) -> bool:
    return (
        hasattr(value, "shape")
        and hasattr(value, "dtype")
        and hasattr(value, "copy")
        and not isinstance(value, numpy.generic)
    )


def _arrays_in(value: Any, path: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Every array inside a cache: tuples, named tuples, lists, dicts and simple objects, walked."""
    if depth > 6:
        return
    if is_array(value):
        yield path, value
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        for key, item in zip(value._fields, value):
            yield from _arrays_in(item, f"{path}.{key}", depth + 1)
    elif isinstance(value, (tuple, list)):
        for k, item in enumerate(value):
            yield from _arrays_in(item, f"{path}[{k}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _arrays_in(item, f"{path}[{key!r}]", depth + 1)
    elif not callable(value) and type(value).__module__ != "builtins":
        for key, item in _attributes(value):
            yield from _arrays_in(item, f"{path}.{key}", depth + 1)


def _attributes(value: Any) -> list[tuple[str, Any]]:
    """An object's attributes: its __dict__, its __slots__ (a dataclass(slots=True)) and its
    dataclass fields."""
    names = list(vars(value)) if hasattr(value, "__dict__") else []
    for klass in type(value).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    if dataclasses.is_dataclass(value):
        names += [f.name for f in dataclasses.fields(value)]
    seen: list[tuple[str, Any]] = []
    for name in dict.fromkeys(names):
        if name in ("__dict__", "__weakref__") or not hasattr(value, name):
            continue
        seen.append((name, getattr(value, name)))
    return seen


def _keys_in(value: Any, path: str, depth: int = 0) -> Iterator[tuple[str, Any, tuple[Any, ...]]]:
    """Every dict (and object's attribute set) inside a cache with its keys: a backward that adds
    one (a gradient memoized in the cache) writes into the cache."""
    if depth > 6 or is_array(value):
        return
    if isinstance(value, dict):
        yield path, value, tuple(value)
        for key, item in value.items():
            yield from _keys_in(item, f"{path}[{key!r}]", depth + 1)
    elif isinstance(value, (tuple, list)):
        for k, item in enumerate(value):
            yield from _keys_in(item, f"{path}[{k}]", depth + 1)
    elif hasattr(value, "__dict__") and not callable(value) and type(value).__module__ != "builtins":
        yield path, value, tuple(vars(value))
        for key, item in vars(value).items():
            yield from _keys_in(item, f"{path}.{key}", depth + 1)


def _library(value: Any) -> str:
    if isinstance(value, (numpy.ndarray, numpy.generic)):
        return "numpy"
    xp = get_array_module()
    if xp is not numpy and isinstance(value, xp.ndarray):
        return str(getattr(xp, "__name__", "cupy"))
    return type(value).__module__.split(".")[0]


def first_difference(before: Any, after: Any, tolerance: float = 0.0) -> str | None:
    """None when ``after`` holds ``before``'s values (bit for bit, NaN equal to NaN, or within
    ``tolerance``); otherwise how many entries changed and the first of them."""
    xp = get_array_module()
    if tuple(before.shape) != tuple(after.shape):
        return f"shape {tuple(before.shape)} became {tuple(after.shape)}"
    if before.size == 0:
        return None
    floating = numpy.dtype(str(before.dtype)).kind in "fc"
    if tolerance > 0 and floating:
        differs = xp.abs(after - before) > tolerance
    else:
        differs = after != before
    if floating:
        differs = differs & ~(xp.isnan(after) & xp.isnan(before))
    count = int(differs.sum())
    if count == 0:
        return None
    flat = int(differs.reshape(-1).argmax())
    where = unravel(flat, tuple(before.shape))
    b, a = before.reshape(-1)[flat], after.reshape(-1)[flat]
    largest = f", largest difference {float(xp.abs(after - before).max()):.3g}" if floating else ""
    return f"{count} of {before.size} entries differ, the first at {where}: {b.item()!r} then {a.item()!r}{largest}"


def watched_inputs(inputs: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The arrays among ``inputs``, each named as a fault names it ("input 'x'")."""
    return [(f"input '{name}'", value) for name, value in inputs.items() if is_array(value)]


def snapshot_of(arrays: Sequence[tuple[str, Any]]) -> list[tuple[str, Any, Any]]:
    return [(path, array, array.copy()) for path, array in arrays]


def changed_since(snapshot: Sequence[tuple[str, Any, Any]]) -> list[tuple[str, str]]:
    return [
        (path, diff) for path, array, copy in snapshot if (diff := first_difference(copy, array)) is not None
    ]


def backward_writes(
    backward: Callable[[Any, Any], Any], dout: Any, cache: Any, inputs: Mapping[str, Any] | None = None
) -> tuple[Any, list[tuple[str, str]]]:
    """Call ``backward(dout, cache)`` and say what it wrote into: ``(what it returned, [(where,
    difference)])``, ``where`` one of ``"dout"``, ``"input 'name'"`` (an array of ``inputs``) or a
    path inside the cache (``"cache.probs"``). The third rule of :func:`check_backward_contract`,
    for a caller that grades the values its own way."""
    returned, writes = _watched_backward(backward, dout, cache, inputs)
    return returned, [(path, diff) for path, diff, _ in writes]


def _watched_backward(
    backward: Callable[[Any, Any], Any], dout: Any, cache: Any, inputs: Mapping[str, Any] | None = None
) -> tuple[Any, list[tuple[str, str, Any]]]:
    """:func:`backward_writes` with the array written into (None for a key added) beside each write."""
    watched = [("dout", dout)] if is_array(dout) else []
    watched += watched_inputs(inputs or {})
    snapshot = snapshot_of(watched + list(_arrays_in(cache, "cache")))
    keys = list(_keys_in(cache, "cache"))
    returned = backward(dout, cache)
    writes: list[tuple[str, str, Any]] = [
        (path, diff, array)
        for path, array, copy in snapshot
        if (diff := first_difference(copy, array)) is not None
    ]
    for path, holder, before in keys:
        after = tuple(holder) if isinstance(holder, dict) else tuple(vars(holder))
        added = [key for key in after if key not in before]
        if added:
            writes.append((path, f"the key(s) {', '.join(map(repr, added))} added", None))
    return returned, writes


def check_gradient_type(name: str, grad: Any, like: Any, where: str) -> str | None:
    """A fault line when ``grad`` differs from its input ``like`` in array library, dtype or shape."""
    if _library(grad) != _library(like):
        return (
            f"gradient of '{name}' is a {_library(grad)} array ({type(grad).__name__}) for an input that is "
            f"a {_library(like)} array: {where} must return the input's array library"
        )
    if str(grad.dtype) != str(like.dtype):
        return (
            f"gradient of '{name}' is {grad.dtype}, its input {like.dtype}: {where} must return the "
            "input's dtype (a lower one loses the precision the check is made in)"
        )
    if tuple(grad.shape) != tuple(like.shape):
        return f"gradient of '{name}' has shape {tuple(grad.shape)}, its input {tuple(like.shape)}"
    return None


def precision_probe(output: Callable[[], Any], variables: Mapping[str, Array], given: str) -> str | None:
    """A fault line when the forward computes in lower precision than float64: a relative change of
    2^-30 in an input entry (resolved in float64, lost in float32) leaves its output bit for bit the
    same at every probed entry, while a change of 1e-3 moves it."""
    xp = get_array_module()
    base = output()
    probed = suspicious = mixed = 0
    probed_name = ""
    for name, array in variables.items():
        probed_name = name
        flat = array.reshape(-1)
        picks = numpy.unique(to_numpy(xp.argsort(xp.abs(flat))[-4:])) if array.size > 4 else range(array.size)
        for k in picks:
            index = unravel(int(k), tuple(array.shape))
            original = float(array[index])
            if abs(original) < 1e-290:  # 0, or so small that 2^-30 of it is below the smallest float64
                continue
            array[index] = original * (1 + 2.0**-30)
            tiny = output()
            array[index] = original * (1 + 2.0**-16)
            middle = output()
            array[index] = original + 1e-3 * max(abs(original), 1.0)
            big = output()
            array[index] = original
            if _same(big, base) or not _resolvable(
                base, big, abs(original) * 2.0**-30 / (1e-3 * max(abs(original), 1.0))
            ):
                continue  # the output does not depend on this entry here, or float64 cannot resolve 2^-30 of it
            probed += 1
            suspicious += _same(tiny, base)
            mixed += _slopes_differ(base, tiny, middle, abs(original))
        if probed >= 2:
            break
    if probed >= 2 and suspicious < probed and mixed == probed:
        return (
            f"{given} computes part of its output in lower precision than float64: its change for a relative "
            f"change of 2^-30 in '{probed_name}' (which float64 resolves and float32 does not) is not 2^-14 times "
            f"its change for 2^-16, at all {probed} entries probed: a branch computed in float32 (or float16) "
            "that the small change does not reach; finite differences of such a function are rounding noise, "
            "not a gradient. Compute every branch in the input's dtype"
        )
    if probed >= 2 and suspicious == probed:
        return (
            f"{given} computes in lower precision than float64: a relative change of 2^-30 in "
            f"'{probed_name}' (which float64 resolves and float32 does not) leaves its output "
            f"unchanged, bit for bit, at all {probed} entries probed; finite differences of such a function are "
            "rounding noise, not a gradient. Compute in the input's dtype"
        )
    return None


def _resolvable(base: Any, big: Any, fraction: float) -> bool:
    """Whether ``fraction`` of the change from ``base`` to ``big`` is 64 units in the last place of the
    output somewhere: a change float64 resolves (x + 1 at x = 1e-38 does not)."""
    xp = get_array_module()
    base, big = xp.asarray(base, dtype=xp.float64), xp.asarray(big, dtype=xp.float64)
    return bool((xp.abs(big - base) * fraction > 64 * FLOAT64_EPS * xp.abs(base)).any())


def _slopes_differ(base: Any, tiny: Any, middle: Any, size: float) -> bool:
    """Whether the output's change per unit of input differs, beyond rounding and curvature, between
    a relative change of 2^-30 and one of 2^-16 (a float32 branch sees the second only)."""
    xp = get_array_module()
    base, tiny, middle = (xp.asarray(v, dtype=xp.float64) for v in (base, tiny, middle))
    small, large = size * 2.0**-30, size * 2.0**-16
    slope, slope2 = (tiny - base) / small, (middle - base) / large
    rounding = float((4 * FLOAT64_EPS * (xp.abs(base) + xp.abs(tiny))).sum()) / small
    differ = float(xp.abs(slope - slope2).sum())
    return differ > 0.05 * float(xp.abs(slope2).sum()) + rounding


def _same(a: Any, b: Any) -> bool:
    if is_array(a) and is_array(b):
        return first_difference(b, a) is None
    return bool(float(a) == float(b))


def lower_precision_output(out: Any, given: str) -> str | None:
    dtype = getattr(out, "dtype", None)
    if dtype is None:
        return None
    kind = numpy.dtype(str(dtype))
    if kind.kind == "f" and kind.itemsize < 8:
        return (
            f"{given} computes in lower precision than it is given: it returns {dtype} for float64 inputs; "
            f"finite differences of a {dtype} function are rounding noise, not a gradient"
        )
    return None


def raise_faults(faults: list[str], where: str) -> None:
    if faults:
        raise GradcheckError(f"{where}:\n" + "\n".join(f"- {fault}" for fault in faults))


def _linear(base: Any, scaled: Any, factor: float, tolerance: float) -> str | None:
    """None when ``scaled`` is ``factor * base`` (within rounding, or ``tolerance`` times |factor|)."""
    xp = get_array_module()
    expected = factor * base
    bound = abs(factor) * tolerance + 1e-10 * float(xp.abs(expected).max()) if base.size else 0.0
    return first_difference(expected, scaled, bound) if bound > 0 else first_difference(expected, scaled)


def overlap(a: Any, b: Any) -> bool:
    """Whether two arrays share memory (the same array, or views of one)."""
    if a is b:
        return True
    if isinstance(a, numpy.ndarray) and isinstance(b, numpy.ndarray):
        return bool(numpy.shares_memory(a, b))
    shares = getattr(get_array_module(), "shares_memory", None)
    if shares is not None:
        try:
            return bool(shares(a, b))
        except (TypeError, NotImplementedError):
            pass
    return getattr(a, "base", None) is b or getattr(b, "base", None) is a


def forward_faults(out: Any, again: Callable[[], Any] | None, given: str) -> list[str]:
    """A forward whose output is not finite, or differs between two calls with the same inputs."""
    value = out if is_array(out) else get_array_module().asarray(float(out))
    if (where := first_not_finite(value)) is not None:
        count, index, bad = where
        return [
            f"the {given}'s output is not finite at {index}: {bad} ({count} of {value.size} entries): no "
            "derivative of it can be taken (a log or a division at 0, an overflow?)"
        ]
    if again is None:
        return []
    second = again()
    second = second if is_array(second) else get_array_module().asarray(float(second))
    if (diff := first_difference(value, second)) is not None:
        return [
            f"the {given} is not deterministic: two calls with the same inputs return different outputs: {diff} "
            "— random draws (dropout, sampling) must be off or seeded inside the forward"
        ]
    return []


_OVERWRITE_HELP = "if it does so on purpose, name it in overwrites=(...)"


class Pair:
    """A forward/backward pair under check: ``forward(**inputs) -> (out, cache)``,
    ``backward(dout, cache)`` returning the gradients of ``wrt``; ``overwrites`` names what the
    backward writes into on purpose ("dout", "cache" or an input), given a fresh copy each call."""

    def __init__(
        self,
        forward: Callable[..., tuple[Any, Any]],
        backward: Callable[[Any, Any], Any],
        inputs: Mapping[str, Any],
        wrt: list[str],
        overwrites: Sequence[str] = (),
    ) -> None:
        self.forward = forward
        self.backward = backward
        self.inputs = inputs
        self.wrt = wrt
        self.overwrites = overwrites
        self.input_arrays = watched_inputs(inputs)
        self.before = snapshot_of(self.input_arrays)
        self.overwritten = [entry for entry in self.before if entry[0].split("'")[1] in self.overwrites]
        self.shape: tuple[int, ...] = ()  # the output's, once the forward has run

    def run_forward(self) -> tuple[Any, Any]:
        returned = self.forward(**self.inputs)
        if returned is None:
            raise TypeError("forward returned None (nothing), expected (output, cache): return out, cache")
        if not (isinstance(returned, tuple) and len(returned) == 2):
            raise TypeError(
                f"forward must return (output, cache), got {type(returned).__name__}"
                + (f" of {len(returned)}" if isinstance(returned, tuple) else "")
            )
        return returned

    def dout(self, upstream: Any) -> Any:
        """A fresh dout to hand the backward: a float for a loss, else a copy of ``upstream``."""
        return float(upstream) if self.shape == () else upstream.copy()

    def may_write(self, path: str, array: Any) -> bool:
        """Whether ``overwrites`` allows the backward to write where ``path`` says."""
        if path == "dout":
            return "dout" in self.overwrites
        if path.startswith("input "):
            return path.split("'")[1] in self.overwrites
        if "cache" in self.overwrites:
            return True
        # an input the cache holds, named in overwrites, is that input
        return array is not None and any(
            name in self.overwrites and is_array(value) and overlap(array, value)
            for name, value in self.inputs.items()
        )

    def restore(self) -> None:
        """The inputs the backward overwrites on purpose, given back their values."""
        for _, array, copy in self.overwritten:
            array[...] = copy

    def backward_again(self, upstream: Any, cache: Any) -> tuple[dict[str, Any], Any]:
        """The gradients of another backward call (on a fresh cache where one is overwritten), and its cache."""
        self.restore()
        if changed := [path for path, _ in changed_since(self.before)]:
            raise GradcheckError(f"the inputs changed between calls: {changed}")
        if "cache" in self.overwrites or self.overwritten:  # a fresh cache for each call
            cache = self.run_forward()[1]
        return _gradients(self.backward(self.dout(upstream), cache), self.wrt, "backward"), cache


def check_contract_arguments(inputs: Any, wrt: Any, seed: Any, overwrites: Any, nondet_tol: Any) -> None:
    """The arguments of :func:`check_backward_contract`, refused by name before any call."""
    check_mapping("inputs", inputs, "each forward argument's name to its value")
    check_names("wrt", wrt, "input names, in the order backward returns their gradients", unique=True)
    check_overwrites(overwrites, inputs)
    check_nondet_tol(nondet_tol)
    check_seed(seed)


def refuse_non_finite_inputs(pair: Pair) -> None:
    """A floating input that is not finite: no derivative can be taken there."""
    for path, value in pair.input_arrays:
        if numpy.dtype(str(value.dtype)).kind in "fc" and (where := first_not_finite(value)) is not None:
            count, index, bad = where
            raise GradcheckError(
                f"the {path} is not finite at {index}: {bad} ({count} of {value.size} entries): no derivative "
                "can be taken there"
            )


def checked_forward(pair: Pair) -> tuple[Any, Any]:
    """The forward's (output, cache), once it is seen to leave its inputs as given, to compute in
    float64 and to return finite values."""
    out, cache = pair.run_forward()
    written = changed_since(pair.before)
    raise_faults(
        [
            f"forward wrote into its {path}: {diff} — a forward must leave its inputs as given "
            "(compute into a new array: x = x - m, not x -= m)"
            for path, diff in written
        ],
        "forward broke its contract",
    )
    pair.shape = output_shape(out, "forward")
    raise_faults(
        [fault] if (fault := lower_precision_output(out, "forward")) else [], "forward broke its contract"
    )
    raise_faults(forward_faults(out, None, "forward"), "forward broke its contract")
    return out, cache


def first_backward(pair: Pair, upstream: Any, cache: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The gradients of the first backward call, once it is seen to write into nothing it was
    handed and to return each gradient in its input's dtype, shape and array library: (copies of
    them, the arrays it returned)."""
    grads, writes = _watched_backward(pair.backward, pair.dout(upstream), cache, pair.inputs)
    faults = []
    for path, diff, array in writes:
        if pair.may_write(path, array):
            continue
        if path == "dout":
            faults.append(f"backward wrote into dout: {diff} — {_OVERWRITE_HELP}")
        elif path.startswith("input "):
            faults.append(f"backward wrote into its {path}: {diff} — {_OVERWRITE_HELP}")
        else:
            faults.append(
                f"backward wrote into the cache the forward returned, at {path}: {diff} — {_OVERWRITE_HELP}"
            )
    analytic = _gradients(grads, pair.wrt, "backward")
    unknown = [name for name in analytic if name not in pair.inputs]
    if unknown:
        raise ValueError(f"wrt names {unknown[0]!r}, which is not one of the inputs {list(pair.inputs)}")
    for name, grad in analytic.items():
        if (fault := check_gradient_type(name, grad, pair.inputs[name], "backward")) is not None:
            faults.append(fault)
    raise_faults(faults, "backward broke its contract")
    return {name: grad.copy() for name, grad in analytic.items()}, analytic


def repeated_backward(
    pair: Pair,
    first: Mapping[str, Any],
    returned: Mapping[str, Any],
    upstream: Any,
    cache: Any,
    nondet_tol: float,
) -> None:
    """Call the backward again: with dout * -2, the gradients it returned first must stay as they
    were (no buffer reused) and the new ones be -2 times them (it follows its dout); with the first
    dout, the same gradients (bit for bit, or within ``nondet_tol``)."""
    scaled, cache = pair.backward_again(-2.0 * upstream, cache)  # a reused buffer now holds other values
    raise_faults(
        [
            f"the gradient of '{name}' returned by one call changed when backward was called again "
            f"(with another dout): {diff} — it is a buffer the backward reuses; return a new array"
            for name, grad in returned.items()
            if (diff := first_difference(first[name], grad)) is not None
        ],
        "backward broke its contract",
    )
    raise_faults(
        [
            f"backward does not follow its dout: the gradient of '{name}' for dout * -2 is not -2 times "
            f"its gradient for dout: {diff} — a gradient kept from an earlier call (memoized in the cache "
            "or the backward) instead of computed from the dout it is given"
            for name in first
            if (diff := _linear(first[name], scaled[name], -2.0, nondet_tol)) is not None
        ],
        "backward broke its contract",
    )
    repeat, _ = pair.backward_again(upstream, cache)
    pair.restore()
    tolerance = (
        " (nondet_tol=... accepts differences up to a bound)"
        if nondet_tol == 0
        else f" (nondet_tol={nondet_tol})"
    )
    raise_faults(
        [
            f"backward is not deterministic: the gradient of '{name}' differs between two calls with the "
            f"same arguments: {diff}{tolerance}"
            for name in first
            if (diff := first_difference(first[name], repeat[name], nondet_tol)) is not None
        ],
        "backward broke its contract",
    )


def check_backward_contract(
    forward: Callable[..., tuple[Any, Any]],
    backward: Callable[[Any, Any], Any],
    inputs: Mapping[str, Any],
    wrt: list[str],
    seed: int = 0,
    overwrites: Sequence[str] = (),
    nondet_tol: float = 0.0,
) -> tuple[dict[str, Any], Any]:
    """Check what a forward/backward pair must keep, without finite differences, and return
    ``(analytic gradients by name, upstream gradient)`` for the central differences to check.

    Faults, each named with its argument and the first entry that shows it (a GradcheckError):
    the forward writes into an input; the forward returns a lower precision than float64; the
    backward writes into ``dout``, an input or the cache the forward returned; a gradient's dtype,
    shape or array library differs from its input's; the backward returns different results for
    the same arguments (bit for bit, or within ``nondet_tol``); a gradient it returned changes when
    it is called again (a buffer it reuses). ``overwrites`` names what the backward writes into on
    purpose ("dout", "cache", or an input's name): the check then gives it a fresh copy each call.
    """
    check_contract_arguments(inputs, wrt, seed, overwrites, nondet_tol)
    pair = Pair(forward, backward, inputs, wrt, overwrites)
    refuse_non_finite_inputs(pair)
    _, cache = checked_forward(pair)
    upstream = random_upstream(pair.shape, seed)
    first, returned = first_backward(pair, upstream, cache)
    repeated_backward(pair, first, returned, upstream, cache, nondet_tol)
    return first, upstream


def check_forward(output: Callable[[], Any], variables: Mapping[str, Array], given: str, owner: str) -> Any:
    """The forward's output (a copy), once two calls are seen to agree, its values finite and its
    precision float64 (see :func:`precision_probe`); ``owner`` heads the fault's message."""
    first = output()
    first = first.copy() if is_array(first) else first
    raise_faults(forward_faults(first, output, given), owner)
    fault = precision_probe(output, variables, given)
    raise_faults([fault] if fault else [], owner)
    return first
