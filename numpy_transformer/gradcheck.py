"""Gradient checking by central finite differences, for functions of arrays and for modules.

The scalar checked is L = sum(G * f(inputs)) with a random, non-uniform upstream gradient G, so
every output element contributes with a different weight. Each checked entry x_i is moved by
+-h, h = eps max(1, |x_i|), and dL/dx_i ~ (L(x_i + h) - L(x_i - h)) / (2 h) is compared with the
analytic value, with the pass rule of ``torch.autograd.gradcheck``, |analytic - numeric| <= atol' +
rtol |numeric|, where atol' is atol scaled down to the largest |gradient| of the check when that is
below 1, but not below the rounding of the difference, 16 eps_mach T / h with T the larger of
|L| and sqrt(sum (G * out)^2).
Work in float64: in float32 the differences drown in rounding.

Each tensor's relative error is its largest |analytic - numeric| over the largest gradient of the
whole check. The finite-difference noise is absolute, about machine epsilon * |L| / eps and the same
for every tensor of one loss, so a tensor whose gradients are all tiny (one head attending over two
positions: largest gradient 6e-4) would otherwise report that noise (1e-9) as a 1e-6 error.

Non-differentiable points. Where an entry fails, its one-sided slopes (L(x_i + eps) - L(x_i)) / eps
and (L(x_i) - L(x_i - eps)) / eps are compared at eps and 2 eps: a smooth curve's gap between them
is eps L'' and doubles with the step, and its central differences at both steps agree; a kink's gap
stays, or grows other than twofold, or the central differences differ. Tied kink entries (equal
values) are also moved together, and the sum of their analytic values must match that derivative. At a kink the
analytic value passes when it lies between the two slopes (a subgradient: relu or abs at 0, a max
with ties), and the report says so.

Two modes. ``exhaustive`` moves every entry (two forward calls each) and names the worst. ``fast``
checks directional derivatives: for a random direction u over a tensor with |u_i| >= 1 (a random
sign times 1 + |N(0, 1)|), sum(analytic * u) against (L(x + eps u) - L(x - eps u)) / (2 eps), two
forward calls for every entry at once, so one wrong entry among millions shifts the sum by at least
its whole error. A failing projection is bisected
(halves of the entries, the half that still disagrees kept) down to the wrong entries, which are
then checked one by one and named. ``auto`` (the default) is exhaustive up to
``AUTO_EXHAUSTIVE_ENTRIES`` entries in all, fast above.

:func:`gradcheck_function` and :func:`gradcheck_module` also check the contract of a backward pass
before any difference is taken (:func:`check_backward_contract`): the forward leaves its inputs as
given and computes in the precision it is given; the backward leaves ``dout``, the inputs and the
cache as given, returns each gradient in its input's dtype, shape and array library, returns the same
bits for the same arguments, and returns arrays that a later call does not overwrite.

This module is callable: ``numpy_transformer.gradcheck(...)`` calls :func:`gradcheck` (a module whose
class adds ``__call__``, with the function's signature). The package's attribute ``gradcheck`` is
this module, so ``import numpy_transformer.gradcheck as g`` gives the module (``g.gradcheck_function``)
rather than the function of the same name, and ``from numpy_transformer.gradcheck import gradcheck``
gives the function itself.
"""

from __future__ import annotations

import inspect
import math
import numbers
import os
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy

from .backend import Array, get_array_module
from .backward_contract import (
    GradcheckError,
    changed_since,
    check_backward_contract,
    check_gradient_type,
    check_mapping,
    check_seed,
    first_difference,
    first_not_finite,
    forward_faults,
    is_array,
    lower_precision_output,
    output_shape,
    overlap,
    precision_probe,
    raise_faults,
    random_upstream,
    snapshot_of,
)
from .finite_differences import (
    DIRECTIONS,
    GradcheckResult,
    check_by_projections,
    check_every_entry,
    draw_errors,
    entries_to_check,
    failed_tensor,
    loss_value,
    numeric_entries,
    step_at,
)

__all__ = [  # the checker's public names, wherever they are defined
    "AUTO_EXHAUSTIVE_ENTRIES",
    "GradcheckError",
    "GradcheckResult",
    "check_backward_contract",
    "gradcheck",
    "gradcheck_function",
    "gradcheck_module",
    "random_upstream",
]

AUTO_EXHAUSTIVE_ENTRIES = 4096  # mode="auto": every entry up to this many in all, projections above


MODES = ("auto", "exhaustive", "fast")


KINKS = ("subgradient", "fail", "nudge")


def _check_options(
    eps: Any, atol: Any, rtol: Any, max_entries: Any, mode: Any, kinks: Any, directions: Any
) -> None:
    for label, value, positive in (("eps", eps, True), ("atol", atol, False), ("rtol", rtol, False)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{label} must be a real number, got {type(value).__name__} {value!r}")
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise ValueError(
                f"{label} must be a finite {'positive' if positive else 'non-negative'} number, got {value!r}"
            )
    if max_entries is not None and (
        isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1
    ):
        raise ValueError(
            f"max_entries must be a positive whole number of entries to check per tensor (or None for all), "
            f"got {max_entries!r}"
        )
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if kinks not in KINKS:
        raise ValueError(f"kinks must be one of {KINKS}, got {kinks!r}")
    if isinstance(directions, bool) or not isinstance(directions, int) or directions < 1:
        raise ValueError(f"directions must be a whole number >= 1 of random projections, got {directions!r}")


def gradcheck(
    loss: Callable[[], float],
    variables: Mapping[str, Array],
    analytic: Mapping[str, Array],
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    max_entries: int | None = None,
    seed: int = 0,
    raise_on_failure: bool = True,
    mode: str = "auto",
    kinks: str = "subgradient",
    directions: int = DIRECTIONS,
    picture: str | Path | None = None,
    noise_scale: float | None = None,
) -> GradcheckResult:
    """Compare ``analytic[name]`` with central differences of ``loss()`` in each of ``variables``.

    ``loss`` recomputes the scalar from the arrays in ``variables``, which are perturbed in place
    and restored. The step at an entry x is ``eps * max(1, |x|)``. ``max_entries`` samples that
    many entries per tensor (all when None; it implies the exhaustive mode). ``mode``:
    "exhaustive" (every entry), "fast" (``directions`` random projections per tensor, a failure
    bisected to the wrong entries) or "auto" (exhaustive up to ``AUTO_EXHAUSTIVE_ENTRIES``
    entries in all). ``kinks``: at a non-differentiable entry "subgradient" passes an analytic
    value between the one-sided slopes and reports the entry, "fail" fails it (``"nudge"`` acts as
    "subgradient" here; :func:`gradcheck_function` moves such inputs). ``picture``: on failure, a
    PNG of the error over each failing tensor is saved there (needs matplotlib) and the message
    names it. ``noise_scale``: the scale of the loss's rounding, the root sum of squares of the terms
    it adds (sqrt(sum (G * out)^2)); |loss| when None (and never below it). A gradient or a loss that is not finite
    fails, named. On failure raises :class:`GradcheckError` naming the tensor, worst index, both
    values and errors.
    """
    _check_options(eps, atol, rtol, max_entries, mode, kinks, directions)
    check_mapping("variables", variables, "each name to its array")
    check_mapping("analytic", analytic, "each name to its array")
    if picture is not None and not isinstance(picture, (str, os.PathLike)):
        raise TypeError(f"picture must be a file name (str or Path) or None, got {type(picture).__name__}")
    if mode == "fast" and max_entries is not None:
        raise ValueError(
            f"max_entries={max_entries} samples entries for mode='exhaustive'; mode='fast' checks every entry "
            "by projection: give one or the other"
        )
    unchecked = [name for name in variables if name not in analytic]
    if unchecked:
        raise GradcheckError(
            f"no analytic gradient for {', '.join(map(repr, unchecked))}: every variable must be checked"
        )
    extra = [name for name in analytic if name not in variables]
    if extra:
        raise GradcheckError(
            f"analytic gradient for {', '.join(map(repr, extra))}, which is not one of the variables "
            f"{list(variables)}: it would go unchecked"
        )
    if not variables:
        raise ValueError("variables is empty: nothing to check, expected at least one array")
    for name, array in variables.items():
        if getattr(array, "dtype", None) != numpy.float64:
            got = getattr(array, "dtype", type(array).__name__)
            raise TypeError(f"gradcheck needs float64 for '{name}' (a float64 array), got {got}")
        if array.size == 0:
            raise ValueError(
                f"'{name}' is empty (shape {array.shape}): it has no entry to check, expected at least one"
            )
        if analytic[name] is None:
            raise GradcheckError(f"the analytic gradient of '{name}' is None: it would go unchecked")
        if tuple(analytic[name].shape) != tuple(array.shape):
            raise ValueError(
                f"analytic gradient of '{name}' has shape {tuple(analytic[name].shape)}, expected {array.shape}"
            )
    total = sum(int(array.size) for array in variables.values())
    if mode == "auto":
        mode = "exhaustive" if max_entries is not None or total <= AUTO_EXHAUSTIVE_ENTRIES else "fast"
    rng = numpy.random.default_rng(seed)
    result = GradcheckResult()
    base = loss_value(loss())
    scale = max(abs(base), float(noise_scale or 0.0)) if math.isfinite(base) else math.inf
    checked: dict[str, Array] = {}
    for name, array in variables.items():
        xp = get_array_module()
        if (where := first_not_finite(array)) is not None:
            count, index, value = where
            note = f"the input is not finite at {index}: {value} ({count} of {array.size} entries)"
            result.reports.append(failed_tensor(name, int(array.size), index, math.nan, math.nan, note))
        elif (where := first_not_finite(xp.asarray(analytic[name]))) is not None:
            count, index, value = where
            note = (
                f"the analytic gradient is not finite at {index}: {value} ({count} of {array.size} entries)"
            )
            result.reports.append(failed_tensor(name, int(array.size), index, value, math.nan, note))
        elif not math.isfinite(base):
            note = f"the loss is not finite at the point checked ({base}): no derivative of it can be taken"
            result.reports.append(failed_tensor(name, int(array.size), (), math.nan, math.nan, note))
        else:
            checked[name] = array
    largest = 1e-300  # the largest |analytic| or |numeric| of the whole check: the scale of relative errors
    for name in checked:
        largest = max(largest, float(get_array_module().abs(analytic[name]).max()))
    numerics = {}
    if mode == "exhaustive":
        for name, array in checked.items():
            numerics[name] = numeric_entries(
                loss, array, entries_to_check(tuple(array.shape), max_entries, rng), eps
            )
            finite = numerics[name][1][numpy.isfinite(numerics[name][1])]
            largest = max(largest, float(numpy.abs(finite).max(initial=0.0)))
    for name, array in checked.items():
        if mode == "exhaustive":
            indices, numeric, steps = numerics[name]
            report, tensor_scale = check_every_entry(
                loss,
                name,
                array,
                analytic[name],
                base,
                atol,
                rtol,
                kinks,
                eps,
                indices,
                numeric,
                steps,
                scale,
                largest,
            )
        else:
            report, tensor_scale = check_by_projections(
                loss,
                name,
                array,
                analytic[name],
                base,
                eps,
                atol,
                rtol,
                rng,
                kinks,
                directions,
                scale,
                largest,
            )
        largest = max(largest, tensor_scale)
        result.reports.append(report)
    for report in result.reports:
        if math.isfinite(report.max_abs_error):
            report.relative_error = (
                report.fixed_relative if report.fixed_relative is not None else report.max_abs_error / largest
            )
    if not result.passed and picture is not None:
        result.picture = draw_errors(result, variables, analytic, Path(picture))
    if raise_on_failure and not result.passed:
        raise GradcheckError("gradient check failed:\n" + str(result))
    return result


def _weighted_sum(output: Any, upstream: Any) -> float:
    return float((get_array_module().asarray(output) * upstream).sum())


def gradcheck_function(
    forward: Callable[..., tuple[Array, Any]],
    backward: Callable[[Array, Any], Any],
    inputs: Mapping[str, Array],
    wrt: list[str],
    seed: int = 0,
    overwrites: Sequence[str] = (),
    nondet_tol: float = 0.0,
    **options: Any,
) -> GradcheckResult:
    """Check a functional pair: ``forward(**inputs) -> (out, cache)``, ``backward(dout, cache)``.

    ``wrt`` names the inputs whose gradients ``backward`` returns, in its return order (a single
    gradient may be returned bare; ``None`` entries are skipped in the list by naming them ``""``).
    First :func:`check_backward_contract` (``overwrites``, ``nondet_tol``), then the forward's
    precision, then central differences (``options`` go to :func:`gradcheck`). With
    ``kinks="nudge"``, inputs found at a non-differentiable point are moved by 1000 eps away from
    it and the whole check is run again there.
    """
    _check_options(
        options.get("eps", 1e-6),
        options.get("atol", 1e-5),
        options.get("rtol", 1e-3),
        options.get("max_entries"),
        options.get("mode", "auto"),
        options.get("kinks", "subgradient"),
        options.get("directions", DIRECTIONS),
    )
    if options.get("mode") == "fast" and options.get("max_entries") is not None:
        raise ValueError(
            f"max_entries={options['max_entries']} samples entries for mode='exhaustive'; mode='fast' checks every "
            "entry by projection: give one or the other"
        )
    analytic, upstream = check_backward_contract(forward, backward, inputs, wrt, seed, overwrites, nondet_tol)
    variables = {name: inputs[name] for name in analytic}
    first = forward(**inputs)[0]
    first = first.copy() if is_array(first) else first
    raise_faults(forward_faults(first, lambda: forward(**inputs)[0], "forward"), "forward broke its contract")
    fault = precision_probe(lambda: forward(**inputs)[0], variables, "forward")
    if fault:
        raise GradcheckError(f"forward broke its contract:\n- {fault}")
    terms = _terms(forward(**inputs)[0], upstream)
    raising = options.pop("raise_on_failure", True)
    result = gradcheck(
        lambda: _weighted_sum(forward(**inputs)[0], upstream),
        variables,
        analytic,
        seed=seed,
        noise_scale=terms,
        **{**options, "raise_on_failure": False},
    )
    kinks = options.get("kinks", "subgradient")
    crowded = [report.name for report in result.reports if report.many_kinks]
    wrong = [report for report in result.reports if not report.passed and not report.many_kinks]
    if not wrong and kinks != "fail" and (crowded or (kinks == "nudge" and result.kinks)):
        # move the kinks' entries off them, each by its own amount (ties broken), and check there
        eps = float(options.get("eps", 1e-6))
        rng = numpy.random.default_rng(seed + 104729)
        xp = get_array_module()
        for name in crowded:
            array = inputs[name]
            amounts = xp.asarray(
                rng.uniform(1000, 2000, tuple(array.shape)) * rng.choice([-1.0, 1.0], tuple(array.shape))
            )
            array[...] = array + eps * amounts * xp.maximum(xp.abs(array), 1.0)
        kinked = [kink for kink in result.kinks if kink.name not in crowded]
        for k, kink in enumerate(kinked):
            array = inputs[kink.name]
            value = float(array[kink.index])
            array[kink.index] = value + step_at(value, eps) * 1000 * (1 + k / len(kinked))
        nudged = {**options, "kinks": "subgradient", "raise_on_failure": raising}
        again = gradcheck_function(forward, backward, inputs, wrt, seed, overwrites, nondet_tol, **nudged)
        for report in again.reports:
            if report.name in crowded:
                report.note = (
                    f"non-differentiable entries (kinks) throughout '{report.name}', too many to locate one by one: "
                    "checked at the input moved off them (each entry by its own 1000 to 2000 eps)"
                    + (", as kinks='nudge' asks" if kinks == "nudge" else ", as kinks='nudge' would")
                    + (f"; {report.note}" if report.note else "")
                )
        return again
    if raising and not result.passed:
        raise GradcheckError("gradient check failed:\n" + str(result))
    return result


def _terms(output: Any, upstream: Any) -> float:
    """The scale of the rounding of L = sum(G * out): the root sum of squares of its terms (their
    rounding errors, independent from one point to the next, add up as a random walk)."""
    xp = get_array_module()
    terms = xp.asarray(output) * upstream
    return float(xp.sqrt((terms * terms).sum()))


def gradcheck_module(
    module: Any,
    inputs: Mapping[str, Array],
    input_grads: Callable[[Any], Mapping[str, Array]] | None = None,
    forward: Callable[..., Array] | None = None,
    seed: int = 0,
    nondet_tol: float = 0.0,
    **options: Any,
) -> GradcheckResult:
    """Check every parameter of ``module`` (and the inputs that ``input_grads`` maps) at once.

    ``forward(**inputs)`` defaults to ``module.forward``; ``module.backward(G)`` must accumulate
    parameter gradients. ``input_grads`` turns backward's return value into {input name: grad}.
    Dropout must be off (``module.eval()``) so the function is deterministic. Before the central
    differences: the forward and backward leave the inputs and the upstream gradient as given,
    each gradient has its array's dtype, shape and library, a second forward and backward with
    the same arguments give the same gradients (bit for bit, or within ``nondet_tol``), and a
    returned input gradient is not overwritten by a later call.
    """
    check_seed(seed)
    check_mapping("inputs", inputs, "each forward argument's name to its value")
    if not list(module.named_parameters()) and input_grads is None:
        raise ValueError(
            f"{type(module).__name__} has no parameters and input_grads is None: nothing to check; map the "
            "inputs' gradients from the backward's return value with input_grads (lambda dx: {'x': dx})"
        )
    run = forward or module.forward
    input_arrays = [(f"input '{name}'", value) for name, value in inputs.items() if is_array(value)]
    before = snapshot_of(input_arrays)

    def once(upstream: Any | None) -> tuple[Any, dict[str, Any], Any]:
        module.zero_grad()
        try:
            out = run(**inputs)
        except TypeError as error:
            _refuse_integer_inputs(run, inputs, type(module).__name__, error)
            raise
        if out is None:
            raise TypeError("the module's forward returned None (nothing), expected its output array")
        shape = output_shape(out, "the module's forward")
        g = random_upstream(shape, seed) if upstream is None else upstream
        given = g.copy() if shape != () else float(g)
        returned = module.backward(given)
        faults = [f"forward or backward wrote into its {p}: {d}" for p, d in changed_since(before)]
        if shape != () and (diff := first_difference(g, given)) is not None:
            faults.append(f"backward wrote into dout (the upstream gradient it was given): {diff}")
        raise_faults(faults, f"{type(module).__name__} broke its contract")
        mapped: dict[str, Any] = {}
        if input_grads is not None:
            mapped = dict(_mapped(input_grads(returned), inputs))
        for name in mapped:
            if not _floating(inputs[name]):
                raise TypeError(
                    f"inputs[{name!r}] is {_kind(inputs[name])}: a gradient is checked for a floating array only"
                )
        grads = {name: parameter.grad.copy() for name, parameter in module.named_parameters()}
        both = [name for name in mapped if name in grads]
        if both:
            raise ValueError(f"input_grads names {both[0]!r}, which is also a parameter's name")
        return g, {**grads, **mapped}, out

    upstream, analytic, out = once(None)
    faults = [fault] if (fault := lower_precision_output(out, "the module's forward")) else []
    parameters = dict(module.named_parameters())
    for name, grad in analytic.items():
        like = parameters[name].data if name in parameters else inputs[name]
        if (fault := check_gradient_type(name, grad, like, "backward")) is not None:
            faults.append(fault)
    raise_faults(faults, f"{type(module).__name__} broke its contract")
    mapped_first = {name: grad for name, grad in analytic.items() if name not in parameters}
    kept = {name: grad.copy() for name, grad in mapped_first.items()}
    once(random_upstream(output_shape(out, "the module's forward"), seed + 7919))
    for name, grad in mapped_first.items():
        if (diff := first_difference(kept[name], grad)) is not None:
            faults.append(
                f"the gradient of '{name}' returned by one backward changed when backward was called again: "
                f"{diff} — it is a buffer the backward reuses; return a new array"
            )
    _, repeat, _ = once(upstream)
    for name, grad in analytic.items():
        if (diff := first_difference(kept.get(name, grad), repeat[name], nondet_tol)) is not None:
            faults.append(
                f"backward is not deterministic: the gradient of '{name}' differs between two calls with the "
                f"same arguments: {diff}"
            )
    raise_faults(faults, f"{type(module).__name__} broke its contract")
    variables = {name: parameter.data for name, parameter in module.named_parameters()}
    for name in analytic:
        if name not in variables:
            variables[name] = inputs[name]
    shared = _merge_shared(variables, analytic, type(module).__name__)
    first = run(**inputs)
    first = first.copy() if is_array(first) else first
    raise_faults(
        forward_faults(first, lambda: run(**inputs), "module's forward"),
        f"{type(module).__name__} broke its contract",
    )
    fault = precision_probe(lambda: run(**inputs), variables, "the module's forward")
    if fault:
        raise GradcheckError(f"{type(module).__name__} broke its contract:\n- {fault}")
    raising = options.pop("raise_on_failure", True)
    result = gradcheck(
        lambda: _weighted_sum(run(**inputs), upstream),
        variables,
        analytic,
        seed=seed,
        noise_scale=_terms(first, upstream),
        **{**options, "raise_on_failure": False},
    )
    for report in result.reports:
        if report.name in shared:
            others = ", ".join(repr(name) for name in shared[report.name])
            report.note = (
                f"'{report.name}' shares its memory with {others} (one array, tied weights): checked once, against "
                "the sum of their gradients" + (f"; {report.note}" if report.note else "")
            )
    if raising and not result.passed:
        raise GradcheckError("gradient check failed:\n" + str(result))
    return result


def _merge_shared(variables: dict[str, Array], analytic: dict[str, Any], owner: str) -> dict[str, list[str]]:
    """Variables that are one array (parameters sharing their data: tied weights) merged into the first,
    checked against the sum of their gradients; partly overlapping ones refused, named."""
    shared: dict[str, list[str]] = {}
    names = list(variables)
    for k, first in enumerate(names):
        if first not in variables:
            continue
        for second in names[k + 1 :]:
            if second not in variables or not overlap(variables[first], variables[second]):
                continue
            a, b = variables[first], variables[second]
            same = a is b or (
                tuple(a.shape) == tuple(b.shape)
                and getattr(a, "strides", None) == getattr(b, "strides", None)
                and _data_pointer(a) == _data_pointer(b)
            )
            if not same:
                raise GradcheckError(
                    f"{owner}: '{first}' and '{second}' share part of their memory (overlapping views of one "
                    "array): moving an entry of one moves the other, so neither gradient can be checked alone"
                )
            analytic[first] = analytic[first] + analytic.pop(second)
            del variables[second]
            shared.setdefault(first, []).append(second)
    return shared


def _data_pointer(array: Any) -> int | None:
    interface = getattr(array, "__array_interface__", None) or getattr(
        array, "__cuda_array_interface__", None
    )
    if interface is not None:
        return int(interface["data"][0])
    data = getattr(array, "data", None)
    return getattr(data, "ptr", None)


def _floating(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return dtype is not None and numpy.dtype(str(dtype)).kind in "fc"


def _kind(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    return f"{type(value).__name__}{' of ' + str(dtype) if dtype is not None else ''}"


def _refuse_integer_inputs(
    run: Callable[..., Any], inputs: Mapping[str, Any], owner: str, error: TypeError
) -> None:
    """A forward that failed with a TypeError (a numpy casting error deep in a kernel, say) and runs
    with one integer input as float64 instead: that input is named, from ``error``. An integer input
    the forward needs as such (token ids) fails again as float64 and is not blamed."""
    xp = get_array_module()
    for name, value in inputs.items():
        if getattr(value, "dtype", None) is None or numpy.dtype(str(value.dtype)).kind not in "iu":
            continue
        try:
            run(**{**inputs, name: xp.asarray(value, dtype=xp.float64)})
        except Exception:  # not this input's dtype: the next one, or the forward's own error
            continue
        first = str(error).splitlines()[0] if str(error) else ""
        raise TypeError(
            f"inputs[{name!r}] is {_kind(inputs[name])} and {owner}'s forward failed on it "
            f"({type(error).__name__}: {first}): expected a floating array (checked in float64; integer arrays "
            f"are for token ids), pass numpy.asarray({name}, dtype=float)"
        ) from error


def _mapped(mapped: Any, inputs: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    if not isinstance(mapped, Mapping):
        raise TypeError(f"input_grads must return {{input name: gradient}}, got {type(mapped).__name__}")
    for name, grad in mapped.items():
        if name not in inputs:
            raise ValueError(f"input_grads names {name!r}, which is not one of the inputs {list(inputs)}")
        yield name, grad


class _CallableModule(types.ModuleType):
    """This module, callable as :func:`gradcheck`: the package binds the module under the function's
    name, and ``nt.gradcheck(...)`` must go on calling the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> GradcheckResult:
        return gradcheck(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:  # help() and inspect show the function's arguments
        return inspect.signature(gradcheck)


sys.modules[__name__].__class__ = _CallableModule
