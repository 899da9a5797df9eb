"""The gradient checker: float64 central differences against a hand-written backward, in three names.

    from numpy_transformer.gradient_checking import assert_gradients, assert_module_gradients, gradcheck

    assert_gradients(gelu_forward, gelu_backward, {"x": x})              # a forward/backward pair
    assert_module_gradients(my_layer, {"x": x}, lambda dx: {"x": dx})   # a Module's parameters (and inputs)
    gradcheck(loss, {"w": w}, {"w": dw})                                 # any scalar loss of named arrays

The two ``assert_*`` helpers check the contract of the backward first (nothing it was given written
into: ``dout``, the inputs, the cache; gradients in their input's dtype, shape and array library;
the same bits for the same arguments; no returned gradient overwritten by a later call; a forward
that neither writes into its inputs nor computes in lower precision than float64), then compare
the analytic gradients with float64 central differences, floating inputs copied to float64 whatever
their dtype. At a non-differentiable point (relu or abs at 0, a max with ties) an analytic value
between the one-sided slopes passes and is reported. Above 4096 entries the check projects on
random directions (every entry at once) and bisects a failure down to the wrong entries.

Each returns a :class:`~numpy_transformer.gradient_checking.report.GradcheckResult` and raises a
:class:`~numpy_transformer.gradient_checking.report.GradcheckError` (an ``AssertionError``, so
pytest shows it as a failed assertion) naming each wrong gradient, its worst entry, the analytic
and numeric values there and the errors. Hypothesis strategies of arrays and shapes for such tests
are in :mod:`~numpy_transformer.gradient_checking.strategies`.

The rooms: :mod:`~numpy_transformer.gradient_checking.checker` (``gradcheck``: the method),
:mod:`~numpy_transformer.gradient_checking.pairs` and
:mod:`~numpy_transformer.gradient_checking.modules` (the two helpers),
:mod:`~numpy_transformer.gradient_checking.contract` (what a backward must keep),
:mod:`~numpy_transformer.gradient_checking.differences` (every entry),
:mod:`~numpy_transformer.gradient_checking.projections` (random directions, bisected),
:mod:`~numpy_transformer.gradient_checking.upstream` (the scalar checked),
:mod:`~numpy_transformer.gradient_checking.report` (the result and the error),
:mod:`~numpy_transformer.gradient_checking.arguments` (refusals of bad arguments) and
:mod:`~numpy_transformer.gradient_checking.picture` (a failure drawn).
"""

from .checker import gradcheck
from .modules import assert_module_gradients
from .pairs import assert_gradients

__all__ = ["assert_gradients", "assert_module_gradients", "gradcheck"]
