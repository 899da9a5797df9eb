"""A strict stand-in for CuPy, so CI proves the CuPy path without a GPU.

It behaves like CuPy where CuPy differs from NumPy, and counts what costs on a GPU:

- it calls itself ``cupy`` (with ``cuda`` and ``cupyx``), so every CuPy branch of the package runs;
- its arrays live "on the device": ``numpy.asarray(a)`` and ``a.__array__`` raise TypeError, as
  CuPy does; a host ``numpy.ndarray`` mixed into an operation is refused; reductions return 0-d
  device arrays, never host scalars;
- ufunc methods follow CuPy's support matrix (``reduce``/``accumulate``: add and multiply;
  ``reduceat``: add; ``at``: add, subtract, maximum, minimum and the bitwise ones);
- the module offers only names CuPy 13 (the oldest supported) has: no ``put_along_axis``;
- its random Generator offers CuPy's methods only, and its bit generator's ``state`` is a method
  returning a device pointer (an int), not a serialisable dict;
- it counts every device-to-host synchronisation (``float()``, ``int()``, ``bool()``,
  ``.item()``, ``.tolist()``, ``.get()``, ``asnumpy``) in ``SYNCS``, and in ``SYNCED_AT`` when
  each came (the launches counted by then), and every host-to-device copy in ``UPLOADS``, so tests
  can hold budgets, and see whether a step launches anything after its read;
- integer-array indices out of range wrap around instead of raising (in ``[]``, assignment and
  ``take``), as CuPy documents: ``x[[1, 3]]`` of a 3-element array reads element 0;
- an assignment whose integer indices repeat a location stores one of the values, not always the
  last (CuPy: "the value that is actually stored is undefined"): here a random one;
- ``add.at`` and ``cupyx.scatter_add`` add repeated locations in an order that changes from call
  to call, as atomic additions do, so float sums may differ in their last bits between two calls;
- ``partition`` and ``argpartition`` sort fully, as CuPy's do, with equal values in a random order;
  ``sort`` and ``argsort`` are always stable and refuse any other ``kind``;
- its random generator draws other numbers than NumPy's for the same seed, as cuRAND does;
- ``max`` and ``min`` refuse NumPy's ``initial`` and ``where``, as CuPy's do;
- ``get_default_memory_pool()`` counts the bytes the pool holds: arrays in use, and blocks freed
  but kept until ``free_all_blocks()``;
- it counts in ``LAUNCHES`` every kernel CuPy would launch for what is called, by family, the way
  CuPy launches them (cupy_launches.py: a 3-D product on its batched path, a mean as two kernels);
  ``one_kernel(name)`` runs a fused kernel's twin as the one launch the kernel is on a GPU.
"""

from __future__ import annotations

import operator
import types
import warnings
import weakref
from collections import Counter
from typing import Any, ClassVar

import cupy_launches as launches
import numpy as np
from cupy_launches import one_kernel

SYNCS: Counter = Counter()  # device -> host synchronisations, by kind
SYNCED_AT: list[
    int
] = []  # each synchronisation in turn: the launches counted when it came, its copy included
UPLOADS: Counter = Counter()  # host -> device copies, by function
_UNDEFINED = np.random.default_rng(20261127)  # which duplicate wins, summation orders, tie orders


class _MemoryPool:
    """CuPy's default pool, as far as it shows: a new array takes its bytes from the blocks the pool
    holds free, or from the device when those run short; an array's bytes go back to the pool when it
    is collected, still held (``total_bytes``), and to the device only at ``free_all_blocks()``. So
    ``total_bytes`` is the most ever in use at once since then (CuPy's rounding to blocks aside)."""

    def __init__(self) -> None:
        self.used = 0
        self.free = 0

    def allocate(self, array: ndarray) -> None:
        nbytes = array._a.nbytes
        self.free -= min(self.free, nbytes)
        self.used += nbytes
        weakref.finalize(array, self._release, nbytes)

    def _release(self, nbytes: int) -> None:
        self.used -= nbytes
        self.free += nbytes

    def used_bytes(self) -> int:
        return self.used

    def free_bytes(self) -> int:
        return self.free

    def total_bytes(self) -> int:
        return self.used + self.free

    def free_all_blocks(self) -> None:
        self.free = 0


POOL = _MemoryPool()


def _sync(kind: str) -> None:
    SYNCS[kind] += 1
    launches.count("memcpy")  # the device-to-host copy the host waits for
    SYNCED_AT.append(launches.total())


class HostArrayError(TypeError):
    pass


def _unwrap(value: Any, where: str) -> Any:
    if isinstance(value, ndarray):
        return value._a
    if isinstance(value, np.ndarray):
        raise HostArrayError(f"Unsupported type {type(value)}: a host numpy.ndarray was given to {where}")
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(item, where) for item in value)
    if isinstance(value, dict):
        return {key: _unwrap(item, where) for key, item in value.items()}
    return value


def _wrap(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ndarray(value)
    if isinstance(value, np.generic):  # CuPy's reductions and indexing give 0-d device arrays
        return ndarray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(_wrap(item) for item in value)
    if isinstance(value, list):
        return [_wrap(item) for item in value]
    return value


# CuPy sizes these results on the host: nonzero reads the count back ("synchronize!" in its source),
# and so does indexing with a boolean mask
_SIZED_ON_HOST = {"nonzero", "flatnonzero", "argwhere", "ndarray.nonzero"}


def _masked(key: Any) -> bool:
    keys = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, ndarray) and k.dtype == np.bool_ for k in keys)


# CuPy's max and min take no ``initial`` (nor ``where``): ``a.max(initial=0.0)`` is a TypeError there
# (seen on CuPy 14.2 with a GPU)
_NO_INITIAL = {"max", "min", "amax", "amin", "ndarray.max", "ndarray.min"}


def _call(function: Any, where: str, source: np.ndarray | None = None) -> Any:
    """CuPy's function (or, with the array ``source``, its method) ``where``: launches counted."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if where in _SIZED_ON_HOST:
            _sync(where)
        refused = sorted({"initial", "where"} & set(kwargs)) if where in _NO_INITIAL else []
        if refused:
            raise TypeError(f"{where.split('.')[-1]}() got an unexpected keyword argument '{refused[0]}'")
        args, kwargs = _unwrap(args, where), _unwrap(kwargs, where)
        result = function(*args, **kwargs)
        launches.of_call(where, args if source is None else (source, *args), kwargs, result)
        return _wrap(result)

    call.__name__ = getattr(function, "__name__", where)
    return call


_METHODS = {
    "sum",
    "mean",
    "max",
    "min",
    "argmax",
    "argmin",
    "any",
    "all",
    "prod",
    "var",
    "std",
    "cumsum",
    "cumprod",
    "reshape",
    "transpose",
    "swapaxes",
    "astype",
    "copy",
    "fill",
    "view",
    "ravel",
    "flatten",
    "squeeze",
    "repeat",
    "take",
    "clip",
    "dot",
    "nonzero",
    "argsort",
    "sort",
    "partition",
    "argpartition",
    "conj",
    "round",
    "diagonal",
    "trace",
}
_BINARY = [
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "matmul",
    "and",
    "or",
    "xor",
    "lshift",
    "rshift",
]


class ndarray:
    """A device array: a NumPy array that refuses to leave the device without being asked."""

    __array_priority__ = 1000
    __array_ufunc__ = None  # NumPy's ufuncs refuse device arrays (they would copy to the host)
    __hash__ = None

    def __init__(self, array: np.ndarray) -> None:
        self._a = array
        if array.base is None:  # owns its memory (a view shares another array's)
            POOL.allocate(self)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed. "
            "Please use `.get()` to construct a NumPy array explicitly."
        )

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        raise TypeError(f"numpy.{func.__name__} was called on a device array (use the cupy function)")

    # -- device -> host: counted ----------------------------------------------------------------
    def get(self) -> np.ndarray:
        _sync("get")
        return self._a.copy()

    def item(self) -> Any:
        _sync("item")
        return self._a.item()

    def tolist(self) -> Any:
        _sync("tolist")
        return self._a.tolist()

    def __float__(self) -> float:
        _sync("float")
        return float(self._a)

    def __int__(self) -> int:
        _sync("int")
        return int(self._a)

    def __bool__(self) -> bool:
        _sync("bool")
        return bool(self._a)

    def __index__(self) -> int:
        _sync("index")
        return operator.index(self._a)

    # -- what stays on the device -----------------------------------------------------------------
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    T = property(lambda self: ndarray(self._a.T))
    flags = property(lambda self: self._a.flags)

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self) -> Any:
        return (ndarray(np.asarray(row)) for row in self._a)

    def __repr__(self) -> str:
        return f"cupy-standin.ndarray(shape={self.shape}, dtype={self.dtype})"

    def __getitem__(self, key: Any) -> Any:
        if _masked(key):
            _sync("boolean-mask index")
        key = _unwrap(key, "an index")
        launches.of_getitem(key)
        return _wrap(self._a[_wrapped_indices(key, self.shape)])

    def __setitem__(self, key: Any, value: Any) -> None:
        if _masked(key):
            _sync("boolean-mask index")
        key = _unwrap(key, "an index")
        value = _unwrap(value, "__setitem__")
        launches.of_setitem(key, value)
        key = _wrapped_indices(key, self.shape)
        shuffled = _shuffled_leading_indices(self._a, key, value)
        if shuffled is None:
            self._a[key] = value
        else:  # NumPy keeps the last of repeated locations: in a random order, a random one is last
            self._a[shuffled[0]] = shuffled[1]

    def __getattr__(self, name: str) -> Any:
        if name == "take":
            return lambda indices, axis=None: _take(self, indices, axis)
        if name in ("partition", "argpartition"):
            return lambda kth, axis=-1: _FULL_SORTS[name](self, kth, axis)
        if name == "argsort":  # (ndarray.sort sorts in place: NumPy's, stable, below)
            return lambda axis=-1, kind=None: _STABLE_SORTS[name](self, axis, kind)
        if name in _METHODS:
            return _call(getattr(self._a, name), f"ndarray.{name}", self._a)
        raise AttributeError(f"the CuPy stand-in's ndarray has no attribute {name!r}")

    def __neg__(self) -> ndarray:
        launches.count("elementwise")
        return ndarray(-self._a)

    def __pos__(self) -> ndarray:
        launches.count("elementwise")
        return ndarray(+self._a)

    def __abs__(self) -> ndarray:
        launches.count("elementwise")
        return ndarray(abs(self._a))

    def __invert__(self) -> ndarray:
        launches.count("elementwise")
        return ndarray(~self._a)


def _binary(name: str) -> Any:
    def method(self: ndarray, other: Any) -> Any:
        other = _unwrap(other, f"ndarray.{name}")
        result = getattr(self._a, name)(other)
        if result is NotImplemented:
            return result
        if "matmul" in name:
            launches.add(launches.matmul(*((other, self._a) if name == "__rmatmul__" else (self._a, other))))
        else:
            launches.count("elementwise")
        return self if name.startswith("__i") else _wrap(result)

    method.__name__ = name
    return method


for _op in _BINARY:
    for _name in (f"__{_op}__", f"__r{_op}__", f"__i{_op}__"):
        setattr(ndarray, _name, _binary(_name))
for _name in ("__lt__", "__le__", "__eq__", "__ne__", "__gt__", "__ge__"):
    setattr(ndarray, _name, _binary(_name))


# -- CuPy's indexing: out-of-range integer indices wrap; repeated locations are written in any order --
def _is_integer_array(component: Any) -> bool:
    return isinstance(component, (np.ndarray, list)) and np.asarray(component).dtype.kind in "iu"


def _wrapped_indices(key: Any, shape: tuple[int, ...]) -> Any:
    """``key`` with every integer-array component taken modulo its axis's length (CuPy's wrap)."""
    components = list(key) if isinstance(key, tuple) else [key]
    consumed = sum(
        1 if not isinstance(c, np.ndarray) or c.dtype != np.bool_ else c.ndim
        for c in components
        if c is not None and c is not Ellipsis
    )
    axis, out = 0, []
    for component in components:
        if component is None:
            out.append(component)
        elif component is Ellipsis:
            out.append(component)
            axis += len(shape) - consumed
        elif isinstance(component, np.ndarray) and component.dtype == np.bool_:
            out.append(component)
            axis += component.ndim
        else:
            if _is_integer_array(component) and axis < len(shape) and shape[axis] > 0:
                component = np.asarray(component) % shape[axis]
            out.append(component)
            axis += 1
    return tuple(out) if isinstance(key, tuple) else out[0]


def _shuffled_leading_indices(target: np.ndarray, key: Any, value: Any) -> tuple[Any, Any] | None:
    """(key, value) with the located elements in a random order, where the key's integer arrays come
    first and repeat a location (the layout the package writes: ``table[ids] = rows``,
    ``x[rows, cols] = v``); None where nothing repeats or the layout is another."""
    components = key if isinstance(key, tuple) else (key,)
    leading = 0
    while leading < len(components) and _is_integer_array(components[leading]):
        leading += 1
    rest = components[leading:]
    if leading == 0 or any(_is_integer_array(c) or c is None or c is Ellipsis for c in rest):
        return None
    indices = np.broadcast_arrays(*(np.asarray(c) for c in components[:leading]))
    flat = [index.reshape(-1) for index in indices]
    locations = np.ravel_multi_index(flat, target.shape[:leading])
    if np.unique(locations).size == locations.size:
        return None
    order = _UNDEFINED.permutation(locations.size)
    result_shape = target[key].shape
    values = np.broadcast_to(np.asarray(value, dtype=target.dtype), result_shape)
    values = values.reshape(locations.size, *result_shape[indices[0].ndim :])[order]
    return tuple(index[order] for index in flat) + tuple(rest), values


def _take(array: ndarray, indices: Any, axis: int | None = None) -> ndarray:
    """CuPy's take: out-of-range indices wrap (it has no ``mode``)."""
    indices = np.asarray(_unwrap(indices, "take"))
    launches.count("index")
    size = array.size if axis is None else array.shape[axis]
    return _wrap(np.take(array._a, indices % size if size else indices, axis=axis))


def _full_sort(kind: str) -> Any:
    """CuPy's partition / argpartition: a full sort, equal values in an order of their own."""

    def sort(array: ndarray, kth: Any, axis: int | None = -1) -> ndarray:
        if isinstance(kth, ndarray):
            raise TypeError(f"cupy.{kind} takes kth as an int or a sequence of ints, not an array")
        a = array._a.reshape(-1) if axis is None else array._a
        axis = -1 if axis is None else axis
        launches.count("sort", launches.SORT_LAUNCHES)
        order = np.argsort(a, axis=axis, kind="stable")
        # ties broken at random: sort a random permutation of each row stably, then map back
        permutation = np.argsort(_UNDEFINED.random(a.shape), axis=axis)
        shuffled = np.take_along_axis(a, permutation, axis=axis)
        order = np.take_along_axis(permutation, np.argsort(shuffled, axis=axis, kind="stable"), axis=axis)
        return ndarray(order if kind == "argpartition" else np.take_along_axis(a, order, axis=axis))

    return sort


_FULL_SORTS = {"partition": _full_sort("partition"), "argpartition": _full_sort("argpartition")}


def _stable_sort(kind_of_sort: str) -> Any:
    """CuPy's sort / argsort: always stable; a ``kind`` other than None or "stable" is refused."""

    def sort(array: ndarray, axis: int | None = -1, kind: str | None = None) -> ndarray:
        if kind not in (None, "stable"):
            raise ValueError(
                f"kind={kind!r}: cupy.{kind_of_sort} supports only a stable sort (None or 'stable')"
            )
        launches.count("sort", launches.SORT_LAUNCHES)
        return ndarray(getattr(np, kind_of_sort)(_unwrap(array, kind_of_sort), axis=axis, kind="stable"))

    return sort


_STABLE_SORTS = {"sort": _stable_sort("sort"), "argsort": _stable_sort("argsort")}


def _at_in_any_order(function: Any, target: np.ndarray, indices: Any, values: Any) -> None:
    """ufunc.at with the (location, value) pairs in a random order: atomics' order on a GPU."""
    launches.count("scatter")
    if isinstance(indices, tuple) or values is None:
        function(target, indices, *(() if values is None else (values,)))
        return
    indices = np.asarray(indices)
    order = _UNDEFINED.permutation(indices.size)
    result_shape = target[indices].shape
    values = np.broadcast_to(np.asarray(values), result_shape).reshape(
        indices.size, *result_shape[indices.ndim :]
    )
    function(target, indices.reshape(-1)[order] % target.shape[0], values[order])


# -- ufuncs with CuPy's support matrix ---------------------------------------------------------------
_UFUNC_METHODS = {
    "reduce": {"add", "multiply"},
    "accumulate": {"add", "multiply"},
    "reduceat": {"add"},
    "at": {"add", "subtract", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor"},
}


class ufunc:
    def __init__(self, name: str) -> None:
        self.__name__ = name
        self._f = getattr(np, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _call(self._f, self.__name__)(*args, **kwargs)

    def outer(self, *args: Any, **kwargs: Any) -> Any:
        return _call(self._f.outer, f"{self.__name__}.outer")(*args, **kwargs)

    def __getattr__(self, method: str) -> Any:
        if method not in _UFUNC_METHODS:
            raise AttributeError(method)
        if self.__name__ not in _UFUNC_METHODS[method]:
            raise NotImplementedError(f"cupy.{self.__name__}.{method} is not supported")
        function = getattr(self._f, method)
        if method == "at":  # in place on the device array

            def at(target: ndarray, indices: Any, values: Any = None) -> None:
                values = None if values is None else _unwrap(values, "ufunc.at")
                _at_in_any_order(function, target._a, _unwrap(indices, "ufunc.at"), values)

            return at
        return _call(function, f"{self.__name__}.{method}")


_UFUNCS = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "true_divide",
    "floor_divide",
    "power",
    "maximum",
    "minimum",
    "negative",
    "exp",
    "log",
    "log1p",
    "expm1",
    "sqrt",
    "square",
    "abs",
    "absolute",
    "sign",
    "sin",
    "cos",
    "tanh",
    "isfinite",
    "isnan",
    "isinf",
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "invert",
    "left_shift",
    "right_shift",
    "floor",
    "ceil",
    "fmax",
    "fmin",
    "logaddexp",
    "reciprocal",
    "remainder",
    "mod",
]
# functions of CuPy 13 that take and give arrays (what the package may call; put_along_axis is CuPy 14)
_FUNCTIONS = [
    "zeros",
    "ones",
    "empty",
    "full",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "arange",
    "linspace",
    "concatenate",
    "stack",
    "vstack",
    "hstack",
    "where",
    "take",
    "take_along_axis",
    "tril",
    "triu",
    "sum",
    "mean",
    "max",
    "min",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "argsort",
    "sort",
    "partition",
    "argpartition",
    "cumsum",
    "cumprod",
    "repeat",
    "tile",
    "broadcast_to",
    "expand_dims",
    "squeeze",
    "reshape",
    "transpose",
    "swapaxes",
    "moveaxis",
    "einsum",
    "matmul",
    "dot",
    "tensordot",
    "clip",
    "all",
    "any",
    "unique",
    "searchsorted",
    "nonzero",
    "flatnonzero",
    "count_nonzero",
    "diff",
    "pad",
    "split",
    "flip",
    "roll",
    "outer",
    "prod",
    "var",
    "std",
    "bincount",
    "around",
    "ravel",
    "diag",
    "eye",
    "isclose",
    "allclose",
    "array_equal",
    "copyto",
    "triu_indices",
    "tril_indices",
]


class _Generator:
    """CuPy's Generator: its methods only, its bit generator's state not a serialisable dict."""

    _METHODS: ClassVar[set[str]] = {
        "random",
        "uniform",
        "integers",
        "standard_normal",
        "standard_exponential",
        "exponential",
        "gamma",
        "standard_gamma",
        "beta",
        "binomial",
        "poisson",
        "geometric",
        "chisquare",
        "dirichlet",
        "f",
        "hypergeometric",
        "logseries",
        "power",
    }

    def __init__(self, seed: Any) -> None:
        if seed is not None and not isinstance(seed, (int, np.integer)):
            raise TypeError(f"the CuPy stand-in's default_rng takes an int seed, got {type(seed).__name__}")
        # cuRAND's streams are not NumPy's: the same seed draws other numbers
        self._rng = np.random.default_rng(
            None if seed is None else np.random.SeedSequence([int(seed), 0xC0DA])
        )
        launches.count("rng")  # cuRAND's states initialised on the device, one per thread
        self.bit_generator = types.SimpleNamespace(state=lambda: id(self._rng))  # a device pointer, in CuPy

    def __getattr__(self, name: str) -> Any:
        if name not in self._METHODS:
            raise AttributeError(f"cupy.random.Generator has no method {name!r}")
        method = getattr(self._rng, name)

        def draw(*args: Any, **kwargs: Any) -> Any:
            result = method(*_unwrap(args, name), **_unwrap(kwargs, name))
            launches.count("rng")
            return ndarray(np.asarray(result))  # a 0-d array too, never a host scalar

        return draw


def _asarray(value: Any, dtype: Any = None, **kwargs: Any) -> ndarray:
    if isinstance(value, ndarray):
        if dtype is None or value.dtype == dtype:
            return value
        launches.count("elementwise")
        return ndarray(value._a.astype(dtype))
    UPLOADS["asarray"] += 1
    launches.count("memcpy")
    return ndarray(np.array(value, dtype=dtype, **kwargs))


def _array(value: Any, dtype: Any = None, copy: bool | None = True, **kwargs: Any) -> ndarray:
    if isinstance(value, ndarray):
        result = np.array(value._a, dtype=dtype, copy=copy, **kwargs)
        if not np.may_share_memory(result, value._a):
            launches.count("copy")
        return ndarray(result)
    # host data is copied to the device whatever ``copy`` says (CuPy 14.2 as measured on a GPU; NumPy 2
    # would raise for copy=False)
    UPLOADS["array"] += 1
    launches.count("memcpy")
    return ndarray(np.array(value, dtype=dtype, **kwargs))


def _ascontiguousarray(value: Any, dtype: Any = None) -> ndarray:
    if isinstance(value, ndarray) and not value._a.flags.c_contiguous:
        launches.count("copy")
        value = ndarray(np.ascontiguousarray(value._a))
    return _asarray(value, dtype)


def asnumpy(value: Any) -> np.ndarray:
    if isinstance(value, ndarray):
        _sync("asnumpy")
        return value._a.copy()
    return np.asarray(value)


def _scatter_add(target: ndarray, indices: Any, values: Any) -> None:
    warnings.warn(
        "cupyx.scatter_add is deprecated. Please use cupy.add.at instead.", DeprecationWarning, stacklevel=2
    )
    _at_in_any_order(np.add.at, target._a, _unwrap(indices, "scatter_add"), _unwrap(values, "scatter_add"))


class _Device:
    def __init__(self, device: int = 0) -> None:
        self.id = device

    @property
    def mem_info(self) -> tuple[int, int]:
        return 16 * 2**30, 16 * 2**30

    def synchronize(self) -> None:
        pass


def make_module() -> types.ModuleType:
    """A fresh ``cupy`` stand-in module."""
    module = types.ModuleType("cupy")
    module.__doc__ = __doc__
    module.ndarray = ndarray
    module.ufunc = ufunc
    for name in _UFUNCS:
        setattr(module, name, ufunc(name))
    for name in _FUNCTIONS:
        setattr(module, name, _call(getattr(np, name), name))
    for name in (
        "float16",
        "float32",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool_",
        "integer",
        "floating",
        "signedinteger",
        "unsignedinteger",
        "number",
        "inexact",
        "dtype",
        "finfo",
        "iinfo",
        "issubdtype",
        "result_type",
        "can_cast",
        "inf",
        "nan",
        "pi",
        "e",
        "newaxis",
    ):
        setattr(module, name, getattr(np, name))
    module.asarray, module.array, module.asnumpy = _asarray, _array, asnumpy
    module.ascontiguousarray = _ascontiguousarray
    module.get_array_module = lambda *arrays: module
    module.take = lambda a, indices, axis=None: _take(a, indices, axis)
    module.partition, module.argpartition = (
        lambda a, kth, axis=-1: _FULL_SORTS["partition"](a, kth, axis),
        lambda a, kth, axis=-1: _FULL_SORTS["argpartition"](a, kth, axis),
    )
    module.sort, module.argsort = _STABLE_SORTS["sort"], _STABLE_SORTS["argsort"]
    module.get_default_memory_pool = lambda: POOL
    module.one_kernel = one_kernel  # the stand-in's own: a fused kernel's twin counted as its one launch
    module.random = types.SimpleNamespace(default_rng=_Generator, Generator=_Generator)
    module.cuda = types.SimpleNamespace(
        Device=_Device,
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
        Stream=types.SimpleNamespace(null=types.SimpleNamespace(synchronize=lambda: None)),
    )
    module.cupyx = types.ModuleType("cupyx")
    module.cupyx.scatter_add = _scatter_add
    return module
