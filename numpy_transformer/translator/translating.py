"""Translating with a model: batches of ids greedily or by any search, the n best by beam search, and
scoring given translations (log P(target | source))."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backend import Array, get_array_module, to_numpy
from ..model import Transformer, make_src_mask
from .batches import make_batch, pad
from .decoding import beam_search_n_best, greedy_decode
from .vocabulary import DEFAULT_IDS, SpecialIds


@dataclass(frozen=True)
class Decoding:
    """A search (greedy_decode, sample_decode or beam_search) and the settings it is called with, as
    keywords: the decoding translate's flags ask for (cli.common.asked_decoding)."""

    search: Callable[..., Any] = greedy_decode
    settings: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """The decoding in words, as evaluate reports it beside its scores."""
        name = self.search.__name__.removesuffix("_decode").removesuffix("_search")
        settings = ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in self.settings.items())
        return f"{name} ({settings})" if settings else name


def translate_ids(
    model: Transformer,
    src_ids: Sequence[Sequence[int]],
    max_len: int | None = None,
    ids: SpecialIds = DEFAULT_IDS,
    *,
    strategy: Callable[..., Array] = greedy_decode,
    **decode_options: Any,
) -> list[list[int]]:
    """Greedy (or any strategy's) translation of id sequences, batched; ``ids``: the vocabulary's;
    ``decode_options``: the strategy's settings (``beam_width=4``...)."""
    src = pad(src_ids, ids.pad)
    max_len = max_len or model.tgt_pos.seq_len
    out = strategy(
        model, src, make_src_mask(src, ids.pad), max_len, ids.bos, ids.eos, pad_id=ids.pad, **decode_options
    )
    return [list(map(int, row)) for row in to_numpy(out)]


def translate_n_best(
    model: Transformer,
    src_ids: Sequence[Sequence[int]],
    n_best: int,
    max_len: int | None = None,
    ids: SpecialIds = DEFAULT_IDS,
    **beam_options: Any,
) -> list[list[tuple[list[int], float]]]:
    """The ``n_best`` translations of each source by beam search, best first, with their scores
    (log-probability / length ** length_penalty); ``beam_options``: BeamOptions' settings."""
    src = pad(src_ids, ids.pad)
    max_len = max_len or model.tgt_pos.seq_len
    best, scores = beam_search_n_best(
        model,
        src,
        make_src_mask(src, ids.pad),
        max_len,
        ids.bos,
        ids.eos,
        pad_id=ids.pad,
        n_best=n_best,
        **beam_options,
    )
    return [
        [(list(map(int, row)), float(score)) for row, score in zip(rows, row_scores)]
        for rows, row_scores in zip(to_numpy(best), to_numpy(scores))
    ]


def score_ids(
    model: Transformer,
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    ids: SpecialIds = DEFAULT_IDS,
) -> list[float]:
    """log P(target | source) of each pair, in nats: the sum, over the target's tokens and the <eos>
    that closes it, of log softmax(logits) at that token, the model fed the reference (dropout off)."""
    xp = get_array_module()
    batch = make_batch(src_ids, tgt_ids, ids)
    with model.evaluating():
        logits = model.forward(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, T, V)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))
    picked = xp.take_along_axis(log_probs, batch.tgt_out[..., None], axis=-1)[..., 0]  # (B, T)
    return [float(total) for total in to_numpy(xp.where(batch.tgt_out != ids.pad, picked, 0.0).sum(axis=-1))]
