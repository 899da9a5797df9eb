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
  ``.item()``, ``.tolist()``, ``.get()``, ``asnumpy``) in ``SYNCS`` and every host-to-device copy
  in ``UPLOADS``, so tests can hold budgets.
"""

from __future__ import annotations

import operator
import types
import warnings
from collections import Counter
from typing import Any, ClassVar

import numpy as np

SYNCS: Counter = Counter()  # device -> host synchronisations, by kind
UPLOADS: Counter = Counter()  # host -> device copies, by function


def _sync(kind: str) -> None:
    SYNCS[kind] += 1


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


def _call(function: Any, where: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        if where in _SIZED_ON_HOST:
            _sync(where)
        return _wrap(function(*_unwrap(args, where), **_unwrap(kwargs, where)))

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
        return _wrap(self._a[_unwrap(key, "an index")])

    def __setitem__(self, key: Any, value: Any) -> None:
        if _masked(key):
            _sync("boolean-mask index")
        self._a[_unwrap(key, "an index")] = _unwrap(value, "__setitem__")

    def __getattr__(self, name: str) -> Any:
        if name in _METHODS:
            return _call(getattr(self._a, name), f"ndarray.{name}")
        raise AttributeError(f"the CuPy stand-in's ndarray has no attribute {name!r}")

    def __neg__(self) -> ndarray:
        return ndarray(-self._a)

    def __pos__(self) -> ndarray:
        return ndarray(+self._a)

    def __abs__(self) -> ndarray:
        return ndarray(abs(self._a))

    def __invert__(self) -> ndarray:
        return ndarray(~self._a)


def _binary(name: str) -> Any:
    def method(self: ndarray, other: Any) -> Any:
        result = getattr(self._a, name)(_unwrap(other, f"ndarray.{name}"))
        if result is NotImplemented:
            return result
        return self if name.startswith("__i") else _wrap(result)

    method.__name__ = name
    return method


for _op in _BINARY:
    for _name in (f"__{_op}__", f"__r{_op}__", f"__i{_op}__"):
        setattr(ndarray, _name, _binary(_name))
for _name in ("__lt__", "__le__", "__eq__", "__ne__", "__gt__", "__ge__"):
    setattr(ndarray, _name, _binary(_name))


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
                args = (_unwrap(indices, "ufunc.at"),) + (
                    () if values is None else (_unwrap(values, "ufunc.at"),)
                )
                function(target._a, *args)

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
        self._rng = np.random.default_rng(seed)
        self.bit_generator = types.SimpleNamespace(state=lambda: id(self._rng))  # a device pointer, in CuPy

    def __getattr__(self, name: str) -> Any:
        if name not in self._METHODS:
            raise AttributeError(f"cupy.random.Generator has no method {name!r}")
        method = getattr(self._rng, name)

        def draw(*args: Any, **kwargs: Any) -> Any:
            result = method(*_unwrap(args, name), **_unwrap(kwargs, name))
            return ndarray(np.asarray(result))  # a 0-d array too, never a host scalar

        return draw


def _asarray(value: Any, dtype: Any = None, **kwargs: Any) -> ndarray:
    if isinstance(value, ndarray):
        return value if dtype is None or value.dtype == dtype else ndarray(value._a.astype(dtype))
    UPLOADS["asarray"] += 1
    return ndarray(np.array(value, dtype=dtype, **kwargs))


def _array(value: Any, dtype: Any = None, copy: bool = True, **kwargs: Any) -> ndarray:
    if isinstance(value, ndarray):
        return ndarray(np.array(value._a, dtype=dtype, copy=copy, **kwargs))
    UPLOADS["array"] += 1
    return ndarray(np.array(value, dtype=dtype, **kwargs))


def asnumpy(value: Any) -> np.ndarray:
    if isinstance(value, ndarray):
        _sync("asnumpy")
        return value._a.copy()
    return np.asarray(value)


def _scatter_add(target: ndarray, indices: Any, values: Any) -> None:
    warnings.warn(
        "cupyx.scatter_add is deprecated. Please use cupy.add.at instead.", DeprecationWarning, stacklevel=2
    )
    np.add.at(target._a, _unwrap(indices, "scatter_add"), _unwrap(values, "scatter_add"))


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
    module.ascontiguousarray = lambda value, dtype=None: _asarray(value, dtype)
    module.get_array_module = lambda *arrays: module
    module.random = types.SimpleNamespace(default_rng=_Generator, Generator=_Generator)
    module.cuda = types.SimpleNamespace(
        Device=_Device,
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
        Stream=types.SimpleNamespace(null=types.SimpleNamespace(synchronize=lambda: None)),
    )
    module.cupyx = types.ModuleType("cupyx")
    module.cupyx.scatter_add = _scatter_add
    return module
