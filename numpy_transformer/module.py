"""Parameters and the Module base class: named parameters, gradients, train/eval, state dicts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from .backend import Array, get_array_module, make_rng, resolve_dtype, to_numpy


class Parameter:
    """A trainable array ``data`` and its accumulated gradient ``grad`` (same shape and dtype).

    Both are updated in place, never rebound, so a parameter may be a view into a larger buffer
    (the attention blocks keep W_q, W_k and W_v in one matrix and multiply by it once); such a
    view names the buffer's Parameter as its ``owner``.

    The gradient's array is made on first use (reading ``grad``, a backward's accumulate(), an
    optimiser): a model loaded to translate never holds a second copy of its weights' size.
    It reads as zero until something is accumulated into it.

    zero_grad() is lazy: it marks the gradient as zero, and the next accumulate() copies its value
    in rather than adding it to an array of zeros, which saves two passes over every gradient per
    training step. Reading ``grad`` before that writes the zeros, so it always reads as zero.
    """

    __slots__ = ("_flat_grad", "_grad", "_index", "_owner", "_zero_pending", "data")

    def __init__(
        self, data: Array, grad: Array | None = None, owner: Parameter | None = None, index: Any = None
    ) -> None:
        self.data = data
        self._grad = grad  # None: made by _gradient() on first use
        # None for an owner itself: a reference to itself would be a cycle, which only the cyclic
        # garbage collector frees (a tied model's replaced embedding tables stayed resident until it ran)
        self._owner = owner
        self._index = index  # a view's place in its owner: data is owner.data[index]
        self._zero_pending = False
        self._flat_grad: FlatGradient | None = None  # the flat buffer an owner's gradient is to live in

    def _gradient(self) -> Array:
        """The gradient array, made now if it does not exist yet: a view's from its owner's, an owner's
        as its part of a flat buffer (made for every parameter of it at once) or on its own."""
        if self._grad is None:
            owner = self._owner
            if owner is not None:
                self._grad = owner._gradient()[self._index]
            elif self._flat_grad is not None:
                self._flat_grad.allocate()  # sets _grad of every owner in the buffer
            else:
                self._grad = get_array_module().zeros_like(self.data)
        return self._grad

    def rebind(self, data: Array, grad: Array | None) -> None:
        """Move this parameter (not a view) into ``data`` and ``grad`` (None: not made yet), keeping its value."""
        data[...] = self.data
        if grad is not None and self._grad is not None:
            grad[...] = self._grad
        self.data, self._grad = data, grad

    def follow_owner(self) -> None:
        """A view takes its place in its owner's (moved) arrays again."""
        owner = self.owner
        self.data = owner.data[self._index]
        self._grad = None if owner._grad is None else owner._grad[self._index]

    @property
    def owner(self) -> Parameter:
        """The Parameter whose arrays this one's are views of: itself unless it is a view."""
        return self if self._owner is None else self._owner

    @property
    def grad(self) -> Array:
        owner = self if self._owner is None else self._owner
        if owner._zero_pending:
            owner._gradient().fill(0)
            owner._zero_pending = False
        grad = self._grad
        return self._gradient() if grad is None else grad

    @grad.setter
    def grad(self, value: Array) -> None:
        # `p.grad += g` assigns the (same) array back; anything else would unlink views and optimisers
        if value is not self._grad:
            raise AttributeError("Parameter.grad is updated in place (p.grad[...] = g), never rebound")

    def zero_grad(self) -> None:
        self.owner._zero_pending = True

    def writable_gradient(self) -> Array | None:
        """Where a backward may write this parameter's gradient whole, instead of handing it to
        accumulate() (which would copy it in): the gradient array, while it reads as zero (right after
        zero_grad()), claimed (it holds what the backward writes); None for a view, and where the
        gradient holds a value to add to."""
        if self._owner is not None or not self._zero_pending:
            return None
        self._zero_pending = False
        return self._gradient()

    def accumulate(self, gradient: Array) -> None:
        """grad += gradient; right after zero_grad() the gradient is copied in instead."""
        if self._owner is None and self._zero_pending:
            self._gradient()[...] = gradient
            self._zero_pending = False
        else:
            self.grad += gradient

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    def __repr__(self) -> str:
        return f"Parameter(shape={self.data.shape}, dtype={self.data.dtype})"


class FlatGradient:
    """The flat gradient buffer of FlatParameters, made (zeros) when a gradient is first needed.

    It knows its owners' places but not the data buffer, so a model whose weights moved elsewhere
    (thread_parallel's replicas) keeps no copy of its old weights alive through it.
    """

    def __init__(self, owners: list[Parameter], starts: list[int], size: int, dtype: Any) -> None:
        self.owners, self.starts, self.size, self.dtype = owners, starts, size, dtype
        self.array: Array | None = None

    def allocate(self) -> Array:
        """The buffer, made now if needed, every owner's gradient a view of its part of it."""
        if self.array is None:
            self.array = get_array_module().zeros(self.size, dtype=self.dtype)
            for owner, start in zip(self.owners, self.starts):
                owner._grad = self.array[start : start + owner.data.size].reshape(owner.shape)
        return self.array


class FlatParameters:
    """Every parameter of a model as a view of one flat ``data`` buffer, every gradient of one
    flat ``grad`` buffer, in the order of ``named_parameters``.

    Whole-model operations (the gradient norm, clipping, a fused optimiser update, an all-reduce)
    are then one operation each instead of one per parameter: on a GPU every operation is a
    kernel launch. ``ranges[i]`` is the (start, stop) of parameter i in the buffers. The ``grad``
    buffer is made on first use (FlatGradient), unless a parameter already had its gradient.
    """

    def __init__(self, parameters: list[Parameter]) -> None:
        xp = get_array_module()
        owners = list({id(p.owner): p.owner for p in parameters}.values())
        dtypes = {p.data.dtype for p in owners}
        if len(dtypes) != 1:
            raise ValueError(f"a flat buffer holds one dtype, the parameters have {sorted(map(str, dtypes))}")
        total = sum(p.data.size for p in owners)
        dtype = dtypes.pop()
        self.data = xp.empty(total, dtype=dtype)
        self.owners = owners
        start, starts = 0, {}
        for owner in owners:
            starts[id(owner)] = start
            start += owner.data.size
        offsets = [starts[id(owner)] for owner in owners]
        self._grad = FlatGradient(owners, offsets, total, dtype)
        made = any(owner._grad is not None for owner in owners)  # keep the gradients already there
        grad = xp.zeros(total, dtype=dtype) if made else None
        for owner, offset in zip(owners, offsets):
            stop = offset + owner.data.size
            owner.rebind(
                self.data[offset:stop].reshape(owner.shape),
                None if grad is None else grad[offset:stop].reshape(owner.shape),
            )
            owner._flat_grad = self._grad
        self._grad.array = grad
        self.ranges = []
        for p in parameters:
            owner = p.owner
            if owner is not p:
                p.follow_owner()
                rows = p._index.indices(owner.shape[0])
                offset = starts[id(owner)] + rows[0] * (owner.data.size // owner.shape[0])
            else:
                offset = starts[id(p)]
            self.ranges.append((offset, offset + p.data.size))

    @property
    def grad(self) -> Array:
        """The flat gradient buffer (made on first use, zeros)."""
        return self._grad.allocate()

    @property
    def grad_allocated(self) -> bool:
        """Whether the gradient buffer exists yet (a model only translated never makes it)."""
        return self._grad.array is not None

    def gradients(self) -> Array:
        """The flat gradient, with the zeros of every lazily zeroed parameter written in."""
        grad = self._grad.allocate()
        for owner in self.owners:
            if owner._zero_pending:
                owner._gradient().fill(0)
                owner._zero_pending = False
        return grad


ModuleT = TypeVar("ModuleT", bound="Module")


class Module:
    """Base class: registers Parameters and sub-Modules assigned as attributes, in order.

    Subclasses implement ``forward(...)``, which keeps what its backward needs (``_save``), and
    ``backward(dout)``, which takes that cache (``_take``), accumulates (``+=``) into each of its
    parameters' ``grad`` and returns the gradient of every array input of the forward, in the
    forward's order: one array for a forward of one array (most modules), a tuple for a forward of
    several (cross-attention: (dx_q, dx_kv); DecoderBlock and Decoder: (dx, d_encoder_output)),
    and None where the only input is token ids (InputEmbeddings). Masks and ids get no gradient.
    """

    _parameters: dict[str, Parameter]
    _modules: dict[str, Module]
    _flat: FlatParameters

    def __init__(self, dtype: Any = "float32", rng: Any = None) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        self.dtype = resolve_dtype(dtype)
        self.rng = make_rng(0) if rng is None else rng
        self.training = True
        self._cache: Any = None

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):  # private: a buffer that registered parameters are views of, a cache
            object.__setattr__(self, name, value)
            return
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    # -- forward/backward bookkeeping -------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The module's output; each subclass defines it with its own arguments."""
        raise NotImplementedError(f"{type(self).__name__} has no forward")

    def backward(self, *args: Any, **kwargs: Any) -> Any:
        """The gradients of the forward's array inputs (see the class docstring)."""
        raise NotImplementedError(f"{type(self).__name__} has no backward")

    def _save(self, cache: Any) -> None:
        self._cache = cache

    def _take(self) -> Any:
        """The cache of the last forward, consumed: a second backward without a forward fails."""
        if self._cache is None:
            raise ValueError(
                f"{type(self).__name__}.backward was called before forward (no forward cache to use)"
            )
        cache, self._cache = self._cache, None
        return cache

    @staticmethod
    def _gradient_outputs(parameters: tuple[Parameter | None, ...]) -> tuple[Array | None, ...]:
        """Each parameter's writable_gradient() (claimed), for a backward that writes gradients in place
        (kernels.backward_into); None for a parameter that is None."""
        return tuple(None if p is None else p.writable_gradient() for p in parameters)

    @staticmethod
    def _accumulate_unwritten(
        parameters: tuple[Parameter | None, ...],
        gradients: tuple[Array | None, ...],
        outputs: tuple[Array | None, ...],
    ) -> None:
        """Accumulate each parameter's gradient, save where the backward wrote it into its output."""
        for parameter, gradient, output in zip(parameters, gradients, outputs):
            if parameter is not None and output is None:
                assert gradient is not None, "a backward gave no gradient for one of its parameters"
                parameter.accumulate(gradient)

    def _new_parameter(self, shape: tuple[int, ...], fill: float | None = None) -> Parameter:
        xp = get_array_module()
        data = xp.zeros(shape, dtype=self.dtype) if fill is None else xp.full(shape, fill, dtype=self.dtype)
        return Parameter(data)

    # -- tree walking -------------------------------------------------------------------------

    def modules(self) -> list[Module]:
        """This module and every sub-module, depth first, without building their dotted names."""
        found, pending = [], [self]
        while pending:
            module = pending.pop()
            found.append(module)
            pending.extend(reversed(module._modules.values()))
        return found

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter) for every parameter, in registration order (PyTorch-style names).

        A parameter that several modules share (tied embeddings) is listed once, under its first name.
        """
        seen = set()
        for module_name, module in self.named_modules(prefix):
            for name, parameter in module._parameters.items():
                if id(parameter) not in seen:
                    seen.add(id(parameter))
                    yield (f"{module_name}.{name}" if module_name else name), parameter

    def parameters(self) -> list[Parameter]:
        return [parameter for _, parameter in self.named_parameters()]

    def flatten_parameters(self) -> FlatParameters:
        """Move every parameter into one flat buffer (and every gradient into another); see FlatParameters."""
        object.__setattr__(self, "_flat", FlatParameters(self.parameters()))
        return self._flat

    @property
    def flat(self) -> FlatParameters | None:
        """The flat buffers of flatten_parameters, or None."""
        return getattr(self, "_flat", None)

    def zero_grad(self) -> None:
        for parameter in self.parameters():
            parameter.zero_grad()

    def train(self: ModuleT, mode: bool = True) -> ModuleT:
        """Switch dropout on (``mode=True``) or off, here and in every sub-module."""
        for module in self.modules():
            object.__setattr__(module, "training", mode)  # a flag, nothing to register: skip __setattr__
        return self

    def eval(self: ModuleT) -> ModuleT:
        return self.train(False)

    @contextmanager
    def evaluating(self: ModuleT) -> Iterator[ModuleT]:
        """Dropout off inside the block; the previous mode is restored afterwards."""
        was_training = self.training
        self.eval()
        try:
            yield self
        finally:
            self.train(was_training)

    def set_rng(self, rng: Any) -> None:
        """Share one random generator (dropout masks) across this module and all its children."""
        for module in self.modules():
            module.rng = rng

    # -- state dicts --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """{name: host NumPy copy of the parameter}."""
        return {name: to_numpy(parameter.data).copy() for name, parameter in self.named_parameters()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Copy every entry into its parameter in place; names and shapes are checked first."""
        own = dict(self.named_parameters())
        missing = [name for name in own if name not in state]
        unexpected = [name for name in state if name not in own]
        if missing or unexpected:
            raise ValueError(
                f"state dict does not match the model: missing {missing}, unexpected {unexpected}"
            )
        mismatched = [
            f"{name}: expected {own[name].shape}, got {tuple(state[name].shape)}"
            for name in own
            if tuple(state[name].shape) != own[name].shape
        ]
        if mismatched:
            raise ValueError("state dict has mis-shaped entries: " + "; ".join(mismatched))
        xp = get_array_module()
        for name in own:  # every entry is checked before any is copied: all or nothing
            kind = getattr(getattr(state[name], "dtype", None), "kind", None)
            if kind not in ("f", "i", "u"):
                raise ValueError(
                    f"state dict entry {name} must hold real numbers, "
                    f"got dtype {getattr(state[name], 'dtype', type(state[name]).__name__)}"
                )
            if not bool(xp.isfinite(xp.asarray(state[name])).all()):
                raise ValueError(f"state dict entry {name} holds NaN or infinite values")
        for name, parameter in own.items():
            parameter.data[...] = xp.asarray(state[name], dtype=parameter.data.dtype)


class ModuleList(Module, Generic[ModuleT]):
    """An ordered list of modules, registered under their index ("layers.0", "layers.1", ...)."""

    def __init__(self, modules: list[ModuleT]) -> None:
        super().__init__(modules[0].dtype if modules else "float32", modules[0].rng if modules else None)
        for index, module in enumerate(modules):
            setattr(self, str(index), module)
        self._items = list(modules)

    def __getitem__(self, index: int) -> ModuleT:
        return self._items[index]

    def __iter__(self) -> Iterator[ModuleT]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
