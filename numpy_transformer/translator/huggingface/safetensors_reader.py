"""A safetensors file read from its header: which tensors it holds, their dtypes, shapes and places
in the file, each tensor's bytes read only when asked (a memory map: nothing is unpickled, nothing
unused is read)."""

from __future__ import annotations

import math
import resource
from pathlib import Path
from typing import Any

import numpy

from ...machine import require
from .directory import PretrainedError

SAFETENSORS_DTYPES: dict[
    str, numpy.dtype[Any]
] = {  # the dtypes a weight may have; BF16 is widened to float32 by hand (NumPy has none)
    "F64": numpy.dtype("<f8"),
    "F32": numpy.dtype("<f4"),
    "F16": numpy.dtype("<f2"),
    "BF16": numpy.dtype("<u2"),
}
ITEM_SIZES = {  # bytes per item of every dtype a file may hold: tensors lie end to end in the data
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "U64": 8,
    "I32": 4,
    "U32": 4,
    "I16": 2,
    "U16": 2,
    "I8": 1,
    "U8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "F8_E4M3FNUZ": 1,
    "F8_E5M2FNUZ": 1,
    "C64": 8,
    "BOOL": 1,
}


class TensorEntry:
    """One tensor of a safetensors file, as its header describes it: read only when asked."""

    def __init__(
        self, path: Path, name: str, dtype: str, shape: tuple[int, ...], start: int, stop: int
    ) -> None:
        self.path, self.name, self.dtype, self.shape = path, name, dtype, shape
        self.start, self.stop = start, stop

    def read(self) -> numpy.ndarray:
        """The tensor as a float array (float32 for BF16 and F16, float64 for F64), read from its bytes alone."""
        if self.dtype not in SAFETENSORS_DTYPES:
            raise PretrainedError(
                f"{self.path}: tensor {self.name!r} has dtype {self.dtype}, expected one of "
                f"{', '.join(SAFETENSORS_DTYPES)} (a weight)"
            )
        dtype = SAFETENSORS_DTYPES[self.dtype]
        if math.prod(self.shape) == 0:
            raw = numpy.empty(self.shape, dtype)
        else:  # a view of the file's bytes: the copy below is the only memory it takes
            raw = numpy.array(
                numpy.memmap(self.path, dtype=dtype, mode="r", offset=self.start, shape=self.shape)
            )
        if self.dtype == "BF16":  # bfloat16 is float32's upper half
            return (raw.astype(numpy.uint32) << 16).view(numpy.float32)
        return raw


def unmappable(path: Path, error: MemoryError) -> str:
    """Why the file could not be mapped into memory (``error``, the system's refusal), and what to
    do: the process's address-space limit (``ulimit -v``) where one is set, else the memory."""
    size = path.stat().st_size / 2**30
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return (
            f"the {size:,.1f} GiB file could not be mapped into memory ({error}): free memory, or import "
            "it on a machine with more"
        )
    return (
        f"the {size:,.1f} GiB file could not be mapped into memory ({error}) within the process's "
        f"address-space limit of {limit / 2**30:,.1f} GiB (ulimit -v): raise the limit above the file's size "
        "and the model's (import maps the file, then builds the model beside it)"
    )


def read_header(path: Path) -> dict[str, TensorEntry]:
    """The tensors a safetensors file holds, from its header alone, as the ``safetensors`` library
    reads it: it refuses a header that is not one, offsets that overlap, leave gaps or pass the end,
    and bytes after the data. Nothing but the header is read."""
    require("reading a safetensors file", "safetensors")
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as file:
            layout = [
                (name, piece.get_dtype(), tuple(piece.get_shape()))
                for name in file.offset_keys()
                for piece in (file.get_slice(name),)
            ]
    except SafetensorError as error:
        raise PretrainedError(f"{path}: corrupt or not a safetensors file ({error})") from None
    except MemoryError as error:  # the library maps the whole file to read its header
        raise PretrainedError(f"{path}: {unmappable(path, error)}") from None
    unsized = next((f"{name!r} ({dtype})" for name, dtype, _ in layout if dtype not in ITEM_SIZES), None)
    if unsized is not None:  # F4, F6: under a byte an item, which no weight of Marian's is
        raise PretrainedError(f"{path}: tensor {unsized} has a dtype this package cannot read")
    sizes = [math.prod(shape) * ITEM_SIZES[dtype] for _, dtype, shape in layout]
    start = path.stat().st_size - sum(sizes)  # the library checked the data fill the file's end
    tensors = {}
    for (name, dtype, shape), size in zip(layout, sizes):
        tensors[name] = TensorEntry(path, name, dtype, shape, start, start + size)
        start += size
    return tensors
