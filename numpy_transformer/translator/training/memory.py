"""The memory a training step needs, estimated from the sizes before anything is built, and the
refusal of a run that would not fit in the memory available."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...backend import get_array_module
from ...machine import available_memory
from ...model import TransformerConfig, parameter_count


def training_memory(
    config: TransformerConfig | Mapping[str, Any],
    batch_size: int,
    src_len: int,
    tgt_len: int,
    threads: int = 1,
) -> int:
    """About the bytes one training step holds, estimated from the sizes before anything is built.

    Weights, gradients and Adam's two moments (4 copies of every parameter), a gradient per extra
    thread's replica, and the forward caches of a batch of the longest pairs: per layer and token
    the projections, attention's probabilities (with dropout) over every key, the feed-forward
    hidden layer (with ReLU and dropout), and the logits with their softmax and gradient.
    """
    config = TransformerConfig.of(config)
    d, d_ff, n, heads = config.d_model, config.d_ff, config.N, config.h
    itemsize = get_array_module().dtype(config.dtype).itemsize
    weights = parameter_count(config) * (4 + 2 * (threads - 1))
    encoder_token = n * (10 * d + 3 * d_ff + 3 * heads * src_len) + 2 * d
    decoder_token = (
        n * (19 * d + 3 * d_ff + 3 * heads * (tgt_len + src_len)) + 2 * d + 3 * config.tgt_vocab_size
    )
    return itemsize * (weights + batch_size * (src_len * encoder_token + tgt_len * decoder_token))


def check_memory(
    config: dict[str, Any], batch_size: int, src_len: int, tgt_len: int, threads: int = 1
) -> None:
    """Refuse, before anything is built, a run whose training_memory exceeds the memory available."""
    needed, available = training_memory(config, batch_size, src_len, tgt_len, threads), available_memory()
    if available is not None and needed > available:
        raise ValueError(
            f"a training step of this model needs about {needed / 2**30:.1f} GiB (d_model "
            f"{config['d_model']}, N {config['N']}, d_ff {config['d_ff']}, batch_size {batch_size}, pairs of "
            f"up to {src_len} source and {tgt_len} target tokens, {threads} thread(s)), but only "
            f"{available / 2**30:.1f} GiB is available: use a smaller --batch-size or model, or fewer "
            "--threads"
        )
