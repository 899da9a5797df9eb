"""A Module checked in one call: :func:`assert_module_gradients`, every parameter (and the inputs
whose gradients its backward returns) against central differences of its forward. Its stages: the
arguments (:func:`check_module_arguments`), the contract of the module's forward and backward
(:func:`check_module_contract`, on a :class:`ModuleRun`), the arrays to move, one per memory
(:func:`merge_shared`), the forward's determinism and precision, and central differences
(:func:`~numpy_transformer.gradient_checking.gradcheck`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy

from ..backend import Array, get_array_module
from .arguments import check_mapping, check_seed, in_float64, kind_of
from .checker import gradcheck
from .contract import (
    changed_since,
    check_forward,
    check_gradient_type,
    first_difference,
    lower_precision_output,
    output_shape,
    overlap,
    raise_faults,
    snapshot_of,
    watched_inputs,
)
from .report import GradcheckError, GradcheckResult
from .upstream import random_upstream, rounding_scale, weighted_sum

SECOND_UPSTREAM_SEED = 7919  # added to the seed for the other upstream gradient of the second call


class ModuleRun:
    """A module's forward and backward, called as the check calls them: zeroed gradients, the
    inputs watched for writes, the parameters' and mapped inputs' gradients collected."""

    def __init__(
        self,
        module: Any,
        inputs: Mapping[str, Any],
        input_grads: Callable[[Any], Mapping[str, Array]] | None,
        forward: Callable[..., Any] | None,
        seed: int,
    ) -> None:
        self.module, self.inputs, self.input_grads, self.seed = module, inputs, input_grads, seed
        self.run = forward or module.forward
        self.owner = type(module).__name__
        self.before = snapshot_of(watched_inputs(inputs))

    def forward(self) -> Any:
        """The module's output for the inputs; an integer input it cannot take is named."""
        try:
            out = self.run(**self.inputs)
        except TypeError as error:
            refuse_integer_inputs(self.run, self.inputs, self.owner, error)
            raise
        if out is None:
            raise TypeError("the module's forward returned None (nothing), expected its output array")
        return out

    def once(self, upstream: Any | None) -> tuple[Any, dict[str, Any], Any]:
        """One forward and backward with ``upstream`` (a random one when None): (the upstream gradient,
        {name: gradient} of the parameters and mapped inputs, the output)."""
        self.module.zero_grad()
        out = self.forward()
        shape = output_shape(out, "the module's forward")
        g = random_upstream(shape, self.seed) if upstream is None else upstream
        given = g.copy() if shape != () else float(g)
        returned = self.module.backward(given)
        faults = [f"forward or backward wrote into its {p}: {d}" for p, d in changed_since(self.before)]
        if shape != () and (diff := first_difference(g, given)) is not None:
            faults.append(f"backward wrote into dout (the upstream gradient it was given): {diff}")
        raise_faults(faults, f"{self.owner} broke its contract")
        mapped = dict(mapped_gradients(self.input_grads(returned), self.inputs)) if self.input_grads else {}
        for name in mapped:
            if not _floating(self.inputs[name]):
                raise TypeError(
                    f"inputs[{name!r}] is {kind_of(self.inputs[name])}: a gradient is checked for a floating "
                    "array only"
                )
        grads = {name: parameter.grad.copy() for name, parameter in self.module.named_parameters()}
        both = [name for name in mapped if name in grads]
        if both:
            raise ValueError(f"input_grads names {both[0]!r}, which is also a parameter's name")
        return g, {**grads, **mapped}, out


def check_module_contract(run: ModuleRun, nondet_tol: float) -> tuple[Any, dict[str, Any], Any]:
    """Three calls: each gradient of the first in its array's dtype, shape and library; a returned
    input gradient unchanged by a second call with another upstream gradient (no buffer reused);
    the same gradients from a third call with the first's upstream gradient (bit for bit, or
    within ``nondet_tol``). Returns the first call's (upstream gradient, gradients, output)."""
    upstream, analytic, out = run.once(None)
    faults = [fault] if (fault := lower_precision_output(out, "the module's forward")) else []
    parameters = dict(run.module.named_parameters())
    for name, grad in analytic.items():
        like = parameters[name].data if name in parameters else run.inputs[name]
        if (fault := check_gradient_type(name, grad, like, "backward")) is not None:
            faults.append(fault)
    raise_faults(faults, f"{run.owner} broke its contract")
    mapped_first = {name: grad for name, grad in analytic.items() if name not in parameters}
    kept = {name: grad.copy() for name, grad in mapped_first.items()}
    run.once(random_upstream(output_shape(out, "the module's forward"), run.seed + SECOND_UPSTREAM_SEED))
    for name, grad in mapped_first.items():
        if (diff := first_difference(kept[name], grad)) is not None:
            faults.append(
                f"the gradient of '{name}' returned by one backward changed when backward was called again: "
                f"{diff} — it is a buffer the backward reuses; return a new array"
            )
    _, repeat, _ = run.once(upstream)
    for name, grad in analytic.items():
        if (diff := first_difference(kept.get(name, grad), repeat[name], nondet_tol)) is not None:
            faults.append(
                f"backward is not deterministic: the gradient of '{name}' differs between two calls with the "
                f"same arguments: {diff}"
            )
    raise_faults(faults, f"{run.owner} broke its contract")
    return upstream, analytic, out


def check_module(
    module: Any,
    inputs: Mapping[str, Any],
    input_grads: Callable[[Any], Mapping[str, Array]] | None,
    forward: Callable[..., Any] | None,
    seed: int,
    nondet_tol: float,
    unchecked: tuple[str, ...],
    options: dict[str, Any],
) -> GradcheckResult:
    """Integer inputs that are data refused, the module's contract, then central differences of
    sum(G * out) in its parameters and the mapped inputs at once, arrays sharing one memory (tied
    weights) checked as one."""
    check_seed(seed)
    if not list(module.named_parameters()) and input_grads is None:
        raise ValueError(
            f"{type(module).__name__} has no parameters and input_grads is None: nothing to check; map the "
            "inputs' gradients from the backward's return value with input_grads (lambda dx: {'x': dx})"
        )
    run = ModuleRun(module, inputs, input_grads, forward, seed)
    refuse_integer_data(run.run, inputs, run.owner, unchecked)
    upstream, analytic, _ = check_module_contract(run, nondet_tol)
    variables = {name: parameter.data for name, parameter in module.named_parameters()}
    variables.update({name: inputs[name] for name in analytic if name not in variables})
    shared = merge_shared(variables, analytic, run.owner)
    first = check_forward(
        lambda: run.run(**inputs), variables, "the module's forward", f"{run.owner} broke its contract"
    )
    result = gradcheck(
        lambda: weighted_sum(run.run(**inputs), upstream),
        variables,
        analytic,
        seed=seed,
        noise_scale=rounding_scale(first, upstream),
        **{**options, "raise_on_failure": False},
    )
    for report in result.reports:
        if report.name in shared:
            others = ", ".join(repr(name) for name in shared[report.name])
            report.note = (
                f"'{report.name}' shares its memory with {others} (one array, tied weights): checked once, against "
                "the sum of their gradients" + (f"; {report.note}" if report.note else "")
            )
    if options.get("raise_on_failure", True):
        result.raise_if_failed()
    return result


def merge_shared(variables: dict[str, Array], analytic: dict[str, Any], owner: str) -> dict[str, list[str]]:
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


def _integer(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return dtype is not None and numpy.dtype(str(dtype)).kind in "iu"


def refuse_integer_data(
    run: Callable[..., Any], inputs: Mapping[str, Any], owner: str, unchecked: tuple[str, ...]
) -> None:
    """An integer input (not named in ``unchecked``) that the forward takes as float64 too is data,
    not token ids (which a forward cannot index with as floats): a float64 central difference
    cannot move an integer entry, and its gradient would go unchecked, so it is refused by name
    before the check, whichever kernel set would or would not have taken it as it is."""
    xp = get_array_module()
    for name, value in inputs.items():
        if name in unchecked or not _integer(value):
            continue
        try:
            run(**{**inputs, name: xp.asarray(value, dtype=xp.float64)})
        except Exception:  # the forward needs it as integers: token ids, held as given
            continue
        raise TypeError(
            f"inputs[{name!r}] is {kind_of(value)}, and {owner}'s forward takes it as float64 too: expected a "
            f"floating array (a central difference in float64 cannot move an integer entry), pass "
            f"numpy.asarray({name}, dtype=float) and map its gradient with input_grads, or name it in "
            f"unchecked=({name!r},) to hold it as given"
        )


def refuse_integer_inputs(
    run: Callable[..., Any], inputs: Mapping[str, Any], owner: str, error: TypeError
) -> None:
    """A forward that failed with a TypeError (a numpy casting error deep in a kernel, say) and runs
    with one integer input as float64 instead: that input is named, from ``error``. An integer input
    the forward needs as such (token ids) fails again as float64 and is not blamed."""
    xp = get_array_module()
    for name, value in inputs.items():
        if getattr(value, "dtype", None) is None or numpy.dtype(str(value.dtype)).kind not in "biu":
            continue
        try:
            run(**{**inputs, name: xp.asarray(value, dtype=xp.float64)})
        except Exception:  # not this input's dtype: the next one, or the forward's own error
            continue
        first = str(error).splitlines()[0] if str(error) else ""
        raise TypeError(
            f"inputs[{name!r}] is {kind_of(inputs[name])} and {owner}'s forward failed on it "
            f"({type(error).__name__}: {first}): expected a floating array (checked in float64; integer arrays "
            f"are for token ids), pass numpy.asarray({name}, dtype=float)"
        ) from error


def mapped_gradients(mapped: Any, inputs: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """The pairs of what ``input_grads`` returned, once it is seen to map input names to gradients."""
    if not isinstance(mapped, Mapping):
        raise TypeError(f"input_grads must return {{input name: gradient}}, got {type(mapped).__name__}")
    for name, grad in mapped.items():
        if name not in inputs:
            raise ValueError(f"input_grads names {name!r}, which is not one of the inputs {list(inputs)}")
        yield name, grad


def check_module_arguments(
    module: Any, inputs: Any, input_grads: Any, unchecked: Any, forward: Any = None
) -> None:
    """The arguments of :func:`assert_module_gradients`, refused by name before any call."""
    if isinstance(module, type) or not callable(getattr(module, "named_parameters", None)):
        what = (
            f"the class {module.__name__}, not one of its instances"
            if isinstance(module, type)
            else type(module).__name__
        )
        raise TypeError(f"module must be a Module (numpy_transformer.module.Module) to check, got {what}")
    check_mapping("inputs", inputs, "each forward argument's name to its value")
    if input_grads is not None and not callable(input_grads):
        raise TypeError(
            "input_grads must be a function of the backward's return value giving {input name: gradient}, "
            f"got {type(input_grads).__name__}"
        )
    if forward is not None and not callable(forward):
        raise TypeError(
            f"forward must be a function of the inputs giving the module's output (or None for module.forward), "
            f"got {type(forward).__name__} {forward!r}"
        )
    if (
        isinstance(unchecked, str)
        or not isinstance(unchecked, (tuple, list, set, frozenset))
        or not all(isinstance(name, str) for name in unchecked)
    ):
        raise TypeError(f"unchecked must be a tuple (or a set) of input names, got {unchecked!r}")
    unknown = [name for name in unchecked if name not in inputs]
    if unknown:
        raise ValueError(f"unchecked names {unknown[0]!r}, which is not one of the inputs {list(inputs)}")
    for parameter_name, parameter in module.named_parameters():
        if parameter.data.dtype != numpy.float64:
            raise TypeError(
                f"module parameter {parameter_name!r} is {parameter.data.dtype}: build the module with "
                "dtype='float64' to check it"
            )


def assert_module_gradients(
    module: Any,
    inputs: Mapping[str, Any],
    input_grads: Callable[[Any], Mapping[str, Any]] | None = None,
    seed: int = 0,
    unchecked: tuple[str, ...] = (),
    forward: Callable[..., Any] | None = None,
    nondet_tol: float = 0.0,
    **options: Any,
) -> GradcheckResult:
    """Check every parameter of a Module (and the inputs ``input_grads`` maps from its backward's
    return value) against central differences of its forward, with dropout off (``eval()``).

    The module's parameters must be float64 (build it with ``dtype="float64"``); floating inputs
    are checked as float64 copies; an integer input that the forward also takes as float64 (data, not
    token ids) is refused unless ``unchecked`` names it. ``forward(**inputs)`` defaults to ``module.forward``;
    ``module.backward(G)`` must accumulate parameter gradients. The contract is checked first: the
    forward and backward leave the inputs and the upstream gradient as given, each gradient has its
    array's dtype, shape and library, a second forward and backward with the same arguments give
    the same gradients (bit for bit, or within ``nondet_tol``), and a returned input gradient is not
    overwritten by a later call. ``options`` are those of
    :func:`~numpy_transformer.gradient_checking.assert_gradients`. Every floating input must be
    checked: one that ``input_grads`` maps no gradient for fails the call by name, unless
    ``unchecked`` names it (a float mask, say). Parameters sharing one array (tied weights) are
    checked once, against the sum of their gradients. The module is given back in its modes, with
    its gradients. Raises
    :class:`~numpy_transformer.gradient_checking.report.GradcheckError` naming each wrong gradient.
    """
    check_module_arguments(module, inputs, input_grads, unchecked, forward)
    values = in_float64(inputs)
    # checked with dropout off; the module is given back as it came: each part's mode, every gradient
    modes = [(part, part.training) for part in module.modules()] if hasattr(module, "modules") else []
    owners = {id(p.owner): p.owner for _, p in module.named_parameters() if hasattr(p, "owner")}
    grads = [(p, p.grad.copy()) for p in owners.values()]
    module.eval()
    try:
        result = check_module(
            module, values, input_grads, forward, seed, nondet_tol, tuple(unchecked), options
        )
    except GradcheckError as error:
        raise GradcheckError(f"{type(module).__name__}: {error}") from None
    finally:
        for part, training in modes:
            object.__setattr__(part, "training", training)  # as Module.train sets it
        for parameter, grad in grads:
            parameter.grad[...] = grad
    checked = {report.name for report in result.reports}
    skipped = [
        name
        for name, value in values.items()
        if getattr(value, "dtype", None) == numpy.float64 and name not in checked and name not in unchecked
    ]
    if skipped:
        raise GradcheckError(
            f"{type(module).__name__}: no gradient checked for the floating input(s) "
            f"{', '.join(map(repr, skipped))}: map it from the backward's return value with input_grads "
            f"(lambda dx: {{{skipped[0]!r}: dx}}), or name it in unchecked=(...) to leave it out on purpose"
        )
    return result
