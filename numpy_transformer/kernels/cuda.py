"""Kernels for CuPy (a CUDA GPU): where the textbook's way costs a GPU determinism or launches.

* ``embedding_backward``: the textbook's ``add.at`` adds repeated ids with atomics on a GPU, in
  an order that changes from run to run, so two identical runs (or a run and its resumption)
  drift apart in the last bits. Here each id's rows are summed as a segment of the ids sorted
  (a stable sort), so the sums are the same at every run.
* ``AdamUpdate``: the model's parameters live in one flat buffer (module.FlatParameters), so
  Adam's update is a handful of whole-model operations instead of a dozen per parameter tensor.

Both are plain array operations (they run on NumPy too, which is how the tests prove them equal
to the textbook without a GPU). Fused ``ElementwiseKernel``s would save more launches; none is
here because none could be tested on a GPU yet.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..backend import Array, get_array_module
from ..functional import EmbeddingCache


def embedding_backward(dout: Array, cache: EmbeddingCache) -> Array:
    """dE[v] = sqrt(D) * (sum of dy over every position whose token is v), by sorted segments.

    The rows of dy are sorted by id (stable), prefix-summed in float64, and every position takes
    its id's segment total as the difference of the prefix sums at the segment's two ends; every
    position of an id then writes the same total into dE[v], so the order of the writes does not
    matter. No transfer to the host and no shape that depends on the data. dout: (B, T, D) -> (V, D)
    """
    xp = get_array_module()
    ids, table_shape, scale = cache
    flat_ids = ids.reshape(-1)
    order = xp.argsort(flat_ids, kind="stable")
    sorted_ids = flat_ids[order]
    rows = dout.reshape(-1, table_shape[1])[order].astype(xp.float64)
    prefix = xp.concatenate(
        [xp.zeros((1, table_shape[1])), xp.cumsum(rows, axis=0)]
    )  # prefix[i] = rows[:i].sum(0)
    first = xp.searchsorted(sorted_ids, sorted_ids, side="left")
    after_last = xp.searchsorted(sorted_ids, sorted_ids, side="right")
    totals = (prefix[after_last] - prefix[first]) * scale
    dtable = xp.zeros(table_shape, dtype=dout.dtype)
    dtable[sorted_ids] = totals.astype(dout.dtype)
    return dtable


class AdamUpdate:
    """Adam.step's update over the model's flat buffers, equal to the textbook loop in Adam.step.

    The moments are two flat buffers laid out as the parameters (``m``, ``v``: one view per
    parameter, for the optimiser's state); AdamW's decoupled decay is one product with a flat
    vector that holds 1 - lr * wd where a parameter decays and 1 elsewhere.
    """

    needs_flat_buffers = True  # Adam of a list of parameters (no flat buffers) runs the textbook loop

    def __init__(self, named_parameters: list[tuple[str, Any]], threads: int | None, flat: Any) -> None:
        xp = get_array_module()
        self.named_parameters, self.flat = named_parameters, flat
        self._m, self._v = xp.zeros_like(flat.data), xp.zeros_like(flat.data)
        self.m = [
            self._m[start:stop].reshape(p.shape)
            for (_, p), (start, stop) in zip(named_parameters, flat.ranges)
        ]
        self.v = [
            self._v[start:stop].reshape(p.shape)
            for (_, p), (start, stop) in zip(named_parameters, flat.ranges)
        ]
        self._decaying: tuple[tuple[bool, ...], Array] | None = (
            None  # (which parameters decay, their flat 0/1 vector), built at the first step
        )

    def _decay_vector(self, decays: Sequence[bool]) -> Array | None:
        """1 where a parameter decays, 0 elsewhere, over the flat buffer (built once per mask)."""
        decays = tuple(decays)
        if not any(decays):
            return None
        if self._decaying is None or self._decaying[0] != decays:
            xp = get_array_module()
            vector = xp.zeros_like(self.flat.data)
            for decay, (start, stop) in zip(decays, self.flat.ranges):
                if decay:
                    vector[start:stop] = 1
            self._decaying = (decays, vector)
        return self._decaying[1]

    def step(
        self,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        t: int,
        weight_decay: float,
        decays: Sequence[bool],
    ) -> None:
        """One update of step ``t``; ``decays[i]``: whether parameter i takes the decoupled decay."""
        xp = get_array_module()
        beta1, beta2 = betas
        data, g, m, v = self.flat.data, self.flat.gradients(), self._m, self._v
        decay = self._decay_vector(decays) if weight_decay else None
        if decay is not None:
            data *= 1.0 - (lr * weight_decay) * decay
        m *= beta1
        m += (1.0 - beta1) * g
        v *= beta2
        v += (1.0 - beta2) * (g * g)
        # lr * m_hat / (sqrt(v_hat) + eps) = k * m / (sqrt(v) + eps'), k = lr sqrt(1 - b2^t) / (1 - b1^t)
        root_correction2 = math.sqrt(1.0 - beta2**t)
        data -= (lr * root_correction2 / (1.0 - beta1**t)) * m / (xp.sqrt(v) + eps * root_correction2)
