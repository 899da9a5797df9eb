"""How many kernels CuPy 14 launches for each operation the stand-in (cupy_standin.py) carries out.

Read in CuPy's source (cupy/_core/_routines_linalg.pyx, _reduction, _indexing, _routines_manipulation)
and counted the way CUPTI counts them through PyTorch's profiler (benchmarks/gpu_profile.py): every
kernel, and every memset and copy, since each costs the host a launch. By family:

- ``elementwise``: one per ufunc, operator, ``where``, cast or fill;
- ``copy``: a copy to a new layout (``ascontiguousarray``, a ``reshape`` that cannot be a view,
  ``astype`` with copy, ``concatenate``: one per array joined);
- ``gemm``: a 2-D product (``dot``/``matmul`` of two matrices; an operand neither C- nor
  F-contiguous is copied first, a transposed one is passed as a flag);
- ``gemm-batched``: a product of more than two dimensions. Each operand not C-contiguous is copied
  (a weight's ``.T`` is not); with a broadcast batch axis (``x @ W.T`` with a 3-D ``x``) CuPy builds
  three pointer arrays (``mat_ptrs``, one kernel per batch axis each) and calls ``gemmBatched``;
  without one, one ``gemmStridedBatched``;
- ``reduction``: ``sum``, ``max``, ``argmax``...: one each (CUB's segmented reduce); ``mean`` is a
  sum and a divide (two); ``var`` five;
- ``index``: a gather by an integer array (one, plus one per further index array combined);
  ``scatter``: an assignment through one, or ``add.at``;
- ``memset``: ``zeros`` (cudaMemsetAsync); ``memcpy``: a host-to-device or device-to-host copy;
- ``sort`` (thrust's radix sort: a dozen), ``scan`` (``cumsum``: two), ``rng`` (a generator's
  state initialisation, one draw), ``fused:NAME`` (a fused kernel: one).

A view (slicing, ``transpose``, ``reshape`` of a contiguous array, ``broadcast_to``) launches nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

LAUNCHES: Counter = Counter()  # kernels (and memsets, copies) CuPy would launch, by family
_PAUSED = [0]  # > 0 inside a fused kernel's twin: its array operations are the one kernel counted
SORT_LAUNCHES = 12  # thrust::stable_sort_by_key on a radix sort: histogram, scan, one pass per digit


def count(family: str, launches: int = 1) -> None:
    """Add ``launches`` kernels of ``family`` (nothing inside a fused kernel's twin)."""
    if launches and not _PAUSED[0]:
        LAUNCHES[family] += launches


def add(counts: dict[str, int]) -> None:
    for family, launches in counts.items():
        count(family, launches)


@contextmanager
def one_kernel(name: str) -> Iterator[None]:
    """What runs inside is one fused kernel ``name`` on a GPU: counted as one launch, its operations not."""
    count(f"fused:{name}")
    _PAUSED[0] += 1
    try:
        yield
    finally:
        _PAUSED[0] -= 1


def total() -> int:
    return sum(LAUNCHES.values())


def _contiguous_either_way(matrix: np.ndarray) -> bool:
    return bool(matrix.flags.c_contiguous or matrix.flags.f_contiguous)


def matmul(a: np.ndarray, b: np.ndarray) -> dict[str, int]:
    """CuPy's matmul: ``dot`` for two dimensions at most, else its batched path."""
    if a.ndim == 1 and b.ndim == 1:
        return {"elementwise": 1, "reduction": 1}
    if max(a.ndim, b.ndim) <= 2:  # tensordot_core: a transposed operand is a flag, any other copied
        copies = sum(1 for m in (a, b) if m.ndim == 2 and not _contiguous_either_way(m))
        return {"copy": copies, "gemm": 1}
    ndim = max(a.ndim, b.ndim)
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    a2 = a2.reshape((1,) * (ndim - a2.ndim) + a2.shape)
    b2 = b2.reshape((1,) * (ndim - b2.ndim) + b2.shape)
    # ascontiguousarray of each operand, then a broadcast batch axis takes the pointer-array path
    copies = sum(1 for m in (a.reshape((1,) * (ndim - a.ndim) + a.shape), b) if not m.flags.c_contiguous)
    broadcast = any(x != y for x, y in zip(a2.shape[:-2], b2.shape[:-2]))
    if broadcast:
        return {"copy": copies, "mat_ptrs": 3 * (ndim - 2), "gemm-batched": 1}
    return {"copy": copies, "gemm-strided-batched": 1}


def _is_view(result: Any, source: np.ndarray) -> bool:
    return isinstance(result, np.ndarray) and (result.size == 0 or np.may_share_memory(result, source))


def _copy_unless_view(args: tuple, kwargs: dict, result: Any) -> dict[str, int]:
    source = args[0] if args and isinstance(args[0], np.ndarray) else None
    return {} if source is None or _is_view(result, source) else {"copy": 1}


def _astype(args: tuple, kwargs: dict, result: Any) -> dict[str, int]:
    source = args[0]
    if kwargs.get("copy", True) is False and _is_view(result, source):
        return {}
    return {"elementwise": 1}


def _joined(args: tuple, kwargs: dict, result: Any) -> dict[str, int]:
    arrays = args[0] if args else kwargs.get("arrays", ())
    return {"copy": len(arrays)}


def _where(args: tuple, kwargs: dict, result: Any) -> dict[str, int]:
    return {"elementwise": 1} if len(args) == 3 else {"scan": 2, "index": 1}


def _matmul_call(args: tuple, kwargs: dict, result: Any) -> dict[str, int]:
    return matmul(np.asarray(args[0]), np.asarray(args[1]))


def _fixed(family: str, launches: int = 1) -> Callable[[tuple, dict, Any], dict[str, int]]:
    return lambda args, kwargs, result: {family: launches}


_NONE: Callable[[tuple, dict, Any], dict[str, int]] = lambda args, kwargs, result: {}  # noqa: E731
_ELEMENTWISE = _fixed("elementwise")
_REDUCTION = _fixed("reduction")
_SORT = _fixed("sort", SORT_LAUNCHES)

# CuPy's functions and ndarray methods (by name, "ndarray." stripped): launches of one call
FUNCTIONS: dict[str, Callable[[tuple, dict, Any], dict[str, int]]] = {
    **dict.fromkeys(("empty", "empty_like", "broadcast_to", "expand_dims", "squeeze", "transpose"), _NONE),
    **dict.fromkeys(("swapaxes", "moveaxis", "view", "diagonal", "split", "flip", "result_type"), _NONE),
    **dict.fromkeys(("reshape", "ravel"), _copy_unless_view),
    **dict.fromkeys(("zeros", "zeros_like"), _fixed("memset")),
    **dict.fromkeys(("ones", "full", "ones_like", "full_like", "arange", "linspace", "fill"), _ELEMENTWISE),
    **dict.fromkeys(
        ("tril", "triu", "clip", "around", "round", "conj", "repeat", "tile", "roll"), _ELEMENTWISE
    ),
    **dict.fromkeys(("diff", "outer", "isclose", "copyto", "diag", "searchsorted", "copy"), _ELEMENTWISE),
    **dict.fromkeys(("flatten",), _fixed("copy")),
    **dict.fromkeys(("sum", "max", "min", "amax", "amin", "argmax", "argmin", "any", "all"), _REDUCTION),
    **dict.fromkeys(("prod", "count_nonzero", "trace"), _REDUCTION),
    "mean": lambda args, kwargs, result: {"reduction": 1, "elementwise": 1},
    "var": lambda args, kwargs, result: {"reduction": 2, "elementwise": 3},
    "std": lambda args, kwargs, result: {"reduction": 2, "elementwise": 4},
    "allclose": lambda args, kwargs, result: {"elementwise": 1, "reduction": 1},
    "array_equal": lambda args, kwargs, result: {"elementwise": 1, "reduction": 1},
    **dict.fromkeys(("cumsum", "cumprod"), _fixed("scan", 2)),
    **dict.fromkeys(("sort", "argsort", "partition", "argpartition"), _SORT),
    "unique": lambda args, kwargs, result: {"sort": SORT_LAUNCHES, "scan": 2, "elementwise": 2, "index": 1},
    **dict.fromkeys(
        ("nonzero", "flatnonzero", "argwhere"), lambda args, kwargs, result: {"scan": 2, "index": 1}
    ),
    "where": _where,
    **dict.fromkeys(("take", "take_along_axis"), _fixed("index")),
    "bincount": lambda args, kwargs, result: {"reduction": 1, "memset": 1, "scatter": 1},
    "pad": lambda args, kwargs, result: {"memset": 1, "copy": 1},
    "eye": lambda args, kwargs, result: {"memset": 1, "elementwise": 1},
    **dict.fromkeys(("triu_indices", "tril_indices"), _fixed("elementwise", 4)),
    **dict.fromkeys(("concatenate", "stack", "vstack", "hstack"), _joined),
    **dict.fromkeys(("matmul", "dot", "tensordot"), _matmul_call),
    "einsum": lambda args, kwargs, result: {"copy": 2, "gemm-strided-batched": 1},
    "astype": _astype,
}


def of_call(name: str, args: tuple, kwargs: dict, result: Any) -> None:
    """Count a call of CuPy's function or ndarray method ``name`` (its arguments unwrapped)."""
    name = name.removeprefix("ndarray.")
    if name.endswith((".reduce", ".outer")):
        count("reduction" if name.endswith(".reduce") else "elementwise")
    elif name.endswith((".accumulate", ".reduceat")):
        count("scan", 2)
    elif name in FUNCTIONS:
        add(FUNCTIONS[name](args, kwargs, result))
    else:  # a ufunc
        count("elementwise")


def _integer_arrays(key: Any) -> int:
    keys = key if isinstance(key, tuple) else (key,)
    return sum(1 for k in keys if isinstance(k, (np.ndarray, list)) and np.asarray(k).dtype.kind in "iu")


def _boolean_mask(key: Any) -> bool:
    keys = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, np.ndarray) and k.dtype == np.bool_ for k in keys)


def of_getitem(key: Any) -> None:
    """``a[key]``: a view launches nothing; a gather one kernel (and one to combine each further index
    array into flat positions); a boolean mask is a nonzero (scan and gather) and then a gather."""
    if _boolean_mask(key):
        add({"scan": 2, "index": 2})
        return
    arrays = _integer_arrays(key)
    if arrays:
        add({"index": 1, "elementwise": arrays - 1})


def of_setitem(key: Any, value: Any) -> None:
    """``a[key] = value``: a fill or a copy into a view, a scatter through integer arrays."""
    if _boolean_mask(key):
        add({"scan": 2, "index": 1, "scatter": 1})
        return
    arrays = _integer_arrays(key)
    if arrays:
        add({"scatter": 1, "elementwise": arrays - 1})
    else:
        count("elementwise" if np.ndim(value) == 0 else "copy")
