"""Batches: padded source, decoder input and label arrays with their masks, made on the host and
copied to the device in one transfer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy

from ..backend import get_array_module
from ..model import causal_mask, make_src_mask, make_tgt_mask
from .vocabulary import DEFAULT_IDS, PAD_ID, SpecialIds


@dataclass
class Batch:
    """Padded to the longest sequence in the batch; masks built once here.

    src (B, S); tgt_in (B, T) = <bos> y1..y_{n}; tgt_out (B, T) = y1..y_n <eos>.
    """

    src: Any
    tgt_in: Any
    tgt_out: Any
    src_mask: Any
    tgt_mask: Any
    n_tokens: int  # target tokens (non-pad labels), counted on the host
    # the host arrays src, tgt_in and tgt_out were copied from, for the checks a GPU step makes on the
    # host (model.check_ids_on_host); None where the batch was not made on the host
    host: tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray] | None = None


def host_rng(*keys: int) -> numpy.random.Generator:
    """A host (NumPy) generator seeded by a tuple of keys: data sampling never touches the model's
    generator."""
    return numpy.random.default_rng(list(keys))


def host_pad(sequences: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> numpy.ndarray:
    """Right-pad integer sequences with <pad> to the longest: a (B, max length) int64 host array."""
    out = numpy.full((len(sequences), max(len(s) for s in sequences)), pad_id, dtype=numpy.int64)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = sequence
    return out


def pad(sequences: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> Any:
    """host_pad's array on the backend's device, in one copy."""
    return get_array_module().asarray(host_pad(sequences, pad_id))


def target_mask(tgt_in: Any, ids: SpecialIds = DEFAULT_IDS) -> Any:
    """The decoder's mask: padding and the future hidden (make_tgt_mask). A decoder that starts from
    <pad> (Marian's) would have its start token hidden so: there the causal mask alone, as
    transformers has it, which hides the padding too from every real position (padding only follows
    a target's tokens)."""
    if ids.bos == ids.pad:
        return causal_mask(tgt_in.shape[1])
    return make_tgt_mask(tgt_in, ids.pad)


def make_batch(
    src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]], ids: SpecialIds = DEFAULT_IDS
) -> Batch:
    """The padded batch; the three id arrays reach the device side by side in one copy."""
    return batch_of_arrays(
        host_pad(src_ids, ids.pad),
        host_pad([[ids.bos, *t] for t in tgt_ids], ids.pad),
        host_pad([[*t, ids.eos] for t in tgt_ids], ids.pad),
        ids,
    )


def batch_of_arrays(
    src: numpy.ndarray, tgt_in: numpy.ndarray, tgt_out: numpy.ndarray, ids: SpecialIds = DEFAULT_IDS
) -> Batch:
    """The batch of padded host arrays (src (B, S), tgt_in and tgt_out (B, T)), copied to the device
    side by side in one copy, its masks made there."""
    device = get_array_module().asarray(numpy.concatenate([src, tgt_in, tgt_out], axis=1))
    src_len, tgt_len = src.shape[1], tgt_in.shape[1]
    on_device = (
        device[:, :src_len],
        device[:, src_len : src_len + tgt_len],
        device[:, src_len + tgt_len :],
    )
    n_tokens = int((tgt_out != ids.pad).sum())
    masks = make_src_mask(on_device[0], ids.pad), target_mask(on_device[1], ids)
    return Batch(*on_device, *masks, n_tokens, (src, tgt_in, tgt_out))
