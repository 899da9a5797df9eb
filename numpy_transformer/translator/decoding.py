"""Autoregressive decoding: greedy, sampling and beam search, with or without a key/value cache.

Every strategy encodes the source once, starts every sequence from ``<bos>`` and stops a
sequence at ``<eos>`` or after ``max_len`` tokens. Results are (B, L) id arrays: the tokens after
``<bos>``, the ``<eos>`` included, and ``eos_id`` filling the places after a sequence ended.

Without a cache (``use_cache=False``) each step re-runs the decoder over the whole prefix, as
the from-scratch design does: O(T^2) work for T tokens. With the cache
(:mod:`numpy_transformer.translator.decoder_cache`) each new token costs O(T).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import wraps
from typing import Any

from ..backend import Array, backend_name, get_array_module, make_rng
from ..kernels import ops
from ..layers import check_id_array
from ..machine import blas_threads
from ..model import Transformer, TransformerConfig
from .decoder_cache import DecoderCache, UncachedDecoder
from .vocabulary import PAD_ID

# ----------------------------------------------------------------------------------------------
# argument checks


def check_decode_arguments(
    model: Transformer, src: Array, src_mask: Array | None, max_len: int, bos_id: int, eos_id: int
) -> None:
    """Clear errors, naming the argument and value, before any decoding work (the ids, their lengths
    and the mask as the model's encode checks them)."""
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be an integer >= 1, got {max_len!r}")
    vocab = model.tgt_embed.vocab_size
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
            raise ValueError(f"{name} must be a token id in [0, {vocab}), got {value!r}")
    check_id_array(src, "src")
    if 0 in src.shape:
        raise ValueError(
            f"src must hold at least one sequence of at least one token, got shape {tuple(src.shape)}"
        )
    model.check_inputs(src, src_mask, None, None)
    check_model_limits(model, max_len=max_len)


def check_model_limits(
    model: Transformer, max_len: int | None = None, beam_width: int | None = None, flags: bool = False
) -> None:
    """Refuse a ``max_len`` beyond the target positional table or a ``beam_width`` beyond the target
    vocabulary, by their Python names or, with ``flags``, the command line's (--max-len, --beam-width)."""
    if max_len is not None and max_len > model.tgt_pos.seq_len:
        name = "--max-len" if flags else "max_len"
        raise ValueError(
            f"{name} {max_len} exceeds the target positional table of this model, {model.tgt_pos.seq_len} positions"
        )
    if beam_width is not None and beam_width > model.tgt_embed.vocab_size:
        name = "--beam-width" if flags else "beam_width"
        raise ValueError(
            f"{name} {beam_width} exceeds the target vocabulary of {model.tgt_embed.vocab_size} tokens"
        )


def _start(
    model: Transformer,
    src: Array,
    src_mask: Array | None,
    max_len: int,
    use_cache: bool,
    absorbed: bool,
    repeat: int = 1,
    row_major_logits: bool = False,
) -> Any:
    """Encode once and return a stepper (cached or not) for ``src`` rows each repeated ``repeat`` times;
    ``row_major_logits``: the cached stepper's logits laid out row by row (C order), as beam search wants."""
    xp = get_array_module()
    if absorbed and model.config.attention != "mla":
        raise ValueError("absorbed=True needs a model built with attention='mla'")
    if src_mask is not None and bool(src_mask.all()):
        src_mask = None  # it hides nothing: attention skips the masking at every layer and step
    encoder_output = model.encode(src, src_mask, checked=True)  # by check_decode_arguments
    if use_cache:  # the cross-attention arrays once a source, attended by its rows together
        return DecoderCache(model, encoder_output, src_mask, max_len, absorbed, row_major_logits, repeat)
    if repeat > 1:
        encoder_output = xp.repeat(encoder_output, repeat, axis=0)
        src_mask = xp.repeat(src_mask, repeat, axis=0) if src_mask is not None else None
    return UncachedDecoder(model, encoder_output, src_mask)


# A decoding call whose batch rows times decoder weights (about what one step reads) stay below this
# runs BLAS on one thread: there a second thread buys next to nothing, while waking OpenBLAS's idle
# worker after a pause delays the call's first product (benchmarks/README.md has the figures).
ONE_BLAS_THREAD_MAX = 1_000_000


def decoder_weights(config: TransformerConfig) -> int:
    """The weights of the decoder layers' matrices and the output projection: about what one step
    reads (a cached step skips cross-attention's key and value matrices; see DecoderCache.step_weights)."""
    d = config.d_model
    return config.N * (8 * d * d + 2 * d * config.d_ff) + config.tgt_vocab_size * d


def decoding_blas_threads(model: Transformer, rows: int) -> AbstractContextManager:
    """The BLAS threads for decoding ``rows`` sequences: one when the work is small, else unchanged."""
    return blas_threads(1) if rows * decoder_weights(model.config) < ONE_BLAS_THREAD_MAX else nullcontext()


def _decoding_call(function: Callable) -> Callable:
    """Check the arguments every strategy shares, then decode with dropout off (the model's mode
    is restored afterwards) and, for small work, BLAS on one thread."""

    @wraps(function)
    def wrapper(
        model: Transformer,
        src: Array,
        src_mask: Array | None,
        max_len: int,
        bos_id: int,
        eos_id: int,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        check_decode_arguments(model, src, src_mask, max_len, bos_id, eos_id)
        with model.evaluating(), decoding_blas_threads(model, src.shape[0]):
            return function(model, src, src_mask, max_len, bos_id, eos_id, *args, **kwargs)

    return wrapper


# The candidate searches deal a row's scores into groups of this many: one pass takes every group's
# maximum, and only the groups whose maximum reaches the k-th largest of them are searched further.
CANDIDATE_CHUNK = 64


def top_candidates(scores: Array, k: int, chunk: int = CANDIDATE_CHUNK) -> Array:
    """The indices (N, k) of each row's k largest ``scores`` (N, M), largest first, equal scores in
    index order: exactly ``argsort(-scores, kind="stable")[:, :k]``, without sorting the row
    (best_continuations of one beam whose score is 0)."""
    beam_scores = get_array_module().zeros((scores.shape[0], 1))
    return best_continuations(scores, beam_scores, k, chunk)[0]


def _log_probs(values: Array, normaliser: tuple[Array, Array] | None, rows: Array | None = None) -> Array:
    """``values`` as log-probabilities: themselves, or (values - shift) - log_sum with the (N, 1) arrays
    ``normaliser`` = (shift, log_sum) of _log_softmax_parts, broadcast (or, given ``rows``, taken at
    those rows, for values gathered from them)."""
    if normaliser is None:
        return values
    shift, log_sum = normaliser if rows is None else (part[rows, 0] for part in normaliser)
    return (values - shift) - log_sum


def best_continuations(
    scores: Array,
    beam_scores: Array,
    k: int,
    chunk: int = CANDIDATE_CHUNK,
    normaliser: tuple[Array, Array] | None = None,
) -> tuple[Array, Array]:
    """Each item's k best continuations of its W beams, and their totals: with log_probs the ``scores``
    (B * W, V), or ``(scores - shift) - log_sum`` given ``normaliser`` = (shift, log_sum), both (B * W, 1)
    (beam search passes raw logits and their log-softmax's two numbers, so the log-probabilities are
    never made), and
    ``totals = (beam_scores.reshape(B * W, 1) + log_probs).reshape(B, W * V)`` (beam_scores (B, W): an
    item's beams are consecutive rows), exactly ``best = argsort(-totals, kind="stable")[:, :k]``
    (indices w * V + v, largest first, equal totals in index order) and ``totals`` at ``best``, both
    (B, k), without making ``totals`` or sorting it.

    A row's tokens are dealt into groups: with G = V // chunk, token v < G * chunk into group v % G
    (a strided group: one pass over the row takes every group's maximum), the tail past them into a
    group of its own. A group's best total is its beam's score plus its maximum's log-probability
    (the log-softmax keeps the order, rounding included). The k-th largest group best, t, is reached
    by at least k continuations (one in each of k groups), so the k best are all >= t and lie in the
    groups whose best is >= t: only those, about k an item, are gathered, and of them only the ones
    reaching the item's k-th largest total are ranked, by total and then index. Scores holding NaN,
    or beam scores holding +inf, are sorted whole.
    """
    xp = get_array_module()
    batch, width = beam_scores.shape
    rows, vocab = scores.shape
    groups = vocab // chunk
    per_row = groups + (vocab > groups * chunk)  # the tail's group, where there is a tail
    offsets = beam_scores.reshape(rows, 1)
    # on a GPU the ragged gathers below would wait for the host: it sorts; and so where a beam score is
    # +inf (its -inf tokens' totals are NaN, behind a group best of +inf)
    searched = groups > 0 and per_row * width >= k and backend_name() == "numpy"
    searched = searched and not xp.isposinf(offsets).any()
    if searched:
        maxima = scores[:, : groups * chunk].reshape(rows, chunk, groups).max(axis=1)  # NaN if any
        if per_row > groups:
            maxima = xp.concatenate([maxima, scores[:, groups * chunk :].max(axis=1, keepdims=True)], axis=1)
        group_best = (offsets + _log_probs(maxima, normaliser)).reshape(batch, width * per_row)
        searched = not xp.isnan(group_best).any()  # a NaN score makes its group's maximum NaN
    if not searched:
        totals = (offsets + _log_probs(scores, normaliser)).reshape(batch, width * vocab)
        best = xp.argsort(-totals, axis=-1, kind="stable")[:, :k]
        return best, xp.take_along_axis(totals, best, axis=-1)
    threshold = xp.partition(group_best, width * per_row - k, axis=-1)[:, width * per_row - k, None]
    item, position = xp.nonzero(group_best >= threshold)  # row-major: every item's groups together
    row, group = item * width + position // per_row, position % per_row
    member = xp.arange(chunk)
    token = xp.where(
        (group < groups)[:, None], group[:, None] + groups * member, groups * chunk + member
    ).reshape(-1)
    row = xp.repeat(row, chunk)
    real = token < vocab  # the tail's group is short: its last places hold no token
    token = xp.minimum(token, vocab - 1)
    totals = xp.where(real, offsets[row, 0] + _log_probs(scores[row, token], normaliser, row), -xp.inf)
    index = xp.where(real, row % width * vocab + token, width * vocab)  # past every real one: ranked last
    item = row // width
    # each item's k-th largest total, from its candidates laid out in a padded (B, most) table
    counts = xp.bincount(item, minlength=batch)
    padded = xp.full((batch, int(counts.max())), -xp.inf)
    padded[item, xp.arange(item.size) - (xp.cumsum(counts) - counts)[item]] = totals
    kth = xp.partition(padded, padded.shape[1] - k, axis=-1)[:, padded.shape[1] - k]
    reaching = xp.flatnonzero(totals >= kth[item])  # at least k an item, in item order
    order = reaching[xp.lexsort((index[reaching], -totals[reaching], item[reaching]))]
    counts = xp.bincount(item[reaching], minlength=batch)
    pick = order[(xp.cumsum(counts) - counts)[:, None] + xp.arange(k)]
    return index[pick], totals[pick]


def block_repeated_ngrams(scores: Array, history: Array, n: int, copy: bool = True) -> Array:
    """``scores`` (N, V) with -inf for every token that would repeat an n-gram of its row's ``history``
    (N, L): a token t is blocked when the row's last n - 1 tokens followed by t occur in it already.

    Fixed shapes, no transfer to the host: every window of n - 1 tokens is compared with the row's
    suffix, and -inf is added at the token after each matching window (in place with ``copy=False``).
    """
    xp = get_array_module()
    rows, length = history.shape
    if n < 1 or length < n:  # no n-gram has been generated yet
        return scores
    if n == 1:
        blocked_tokens, matches = history, xp.ones(history.shape, dtype=bool)
    else:
        windows = length - n + 1  # windows of n - 1 tokens that have a token after them
        suffix = history[:, length - n + 1 :]  # (N, n - 1)
        matches = xp.ones((rows, windows), dtype=bool)
        for offset in range(n - 1):
            matches &= history[:, offset : offset + windows] == suffix[:, offset : offset + 1]
        blocked_tokens = history[:, n - 1 :]  # (N, windows): the token after each window
    blocked = scores.copy() if copy else scores
    row_index = xp.broadcast_to(xp.arange(rows)[:, None], blocked_tokens.shape)
    # -inf added where a window matches, 0 elsewhere: repeated (row, token) pairs accumulate safely,
    # and the work is (N, L), not a (N, V) table
    penalty = xp.where(matches, -xp.inf, 0.0).astype(scores.dtype)
    xp.add.at(blocked, (row_index, blocked_tokens), penalty)
    return blocked


def never_emitted(vocab: int, bos_id: int, eos_id: int, pad_id: int | None) -> tuple[int, ...]:
    """The ids a translation never holds: <bos> and <pad> (``pad_id`` None: none), never <eos>."""
    if pad_id is not None and (
        isinstance(pad_id, bool) or not isinstance(pad_id, int) or not 0 <= pad_id < vocab
    ):
        raise ValueError(f"pad_id must be None or a token id in [0, {vocab}), got {pad_id!r}")
    never = {bos_id} if pad_id is None else {bos_id, pad_id}
    return tuple(sorted(never - {eos_id}))


def block_disallowed(
    scores: Array,
    history: Array | None,
    no_repeat_ngram: int,
    never: tuple[int, ...],
    eos_id: int,
    copy: bool = True,
) -> Array:
    """``scores`` (N, V) with -inf for every token that may not come next: the ``never`` ids and,
    with ``no_repeat_ngram``, a token that would repeat an n-gram of ``history`` (N, L). <eos> stays
    allowed, so a sentence can always end: with n = 1 every other token can be used up. With
    ``copy=False`` ``scores`` itself is changed and returned (the beam searches' own arrays)."""
    xp = get_array_module()
    eos_scores = scores[:, eos_id].copy()
    blocked = scores if not copy else scores.copy()  # copy: the caller keeps its scores (return_logits)
    if history is not None:
        blocked = block_repeated_ngrams(blocked, history, no_repeat_ngram, copy=False)
    blocked[:, list(never)] = -xp.inf
    blocked[:, eos_id] = eos_scores
    return blocked


def _generate(
    stepper: Any,
    batch: int,
    max_len: int,
    bos_id: int,
    eos_id: int,
    choose: Callable[[Array], Array],
    no_repeat_ngram: int = 0,
    never: tuple[int, ...] = (),
    keep_logits: bool = False,
) -> tuple[Array, Array | None]:
    """The loop shared by greedy and sampling: (ids (B, L), logits (B, L, V) if ``keep_logits`` else
    None); the ``never`` ids and, with ``no_repeat_ngram`` n, a token that would repeat an n-gram of
    the tokens generated so far are never chosen (block_disallowed)."""
    xp = get_array_module()
    last = xp.full(batch, bos_id, dtype=xp.int64)
    finished = xp.zeros(batch, dtype=bool)
    tokens: list[Array] = []
    all_logits: list[Array] = []
    for _ in range(max_len):
        logits = stepper.step(last)
        if keep_logits:  # (B, V) a step: at a vocabulary of 58,101 and 40 steps, 9 MB a sentence
            all_logits.append(logits)
        history = xp.stack(tokens, axis=1) if no_repeat_ngram and tokens else None
        logits = block_disallowed(logits, history, no_repeat_ngram, never, eos_id, copy=keep_logits)
        last = xp.where(finished, eos_id, choose(logits))
        tokens.append(last)
        finished |= last == eos_id
        if bool(finished.all()):
            break
    return xp.stack(tokens, axis=1), xp.stack(all_logits, axis=1) if keep_logits else None


def _most_likely(logits: Array) -> Array:
    return logits.argmax(axis=-1)


@_decoding_call
def greedy_decode(
    model: Transformer,
    src: Array,
    src_mask: Array | None,
    max_len: int,
    bos_id: int,
    eos_id: int,
    use_cache: bool = True,
    absorbed: bool = False,
    return_logits: bool = False,
    no_repeat_ngram: int = 0,
    pad_id: int | None = PAD_ID,
) -> Array | tuple[Array, Array]:
    """Pick the most likely token at every step. src (B, S) -> ids (B, L), L <= max_len.

    ``absorbed`` (MLA models) attends over the cached latent without decompressing it.
    With ``return_logits`` also returns every step's logits (B, L, V); ``no_repeat_ngram`` n > 0
    never repeats an n-gram (block_repeated_ngrams). ``bos_id`` and ``pad_id`` are never emitted.
    """
    check_no_repeat_ngram(no_repeat_ngram)
    never = never_emitted(model.tgt_embed.vocab_size, bos_id, eos_id, pad_id)
    stepper = _start(model, src, src_mask, max_len, use_cache, absorbed)
    ids, logits = _generate(
        stepper, src.shape[0], max_len, bos_id, eos_id, _most_likely, no_repeat_ngram, never, return_logits
    )
    return (ids, logits) if return_logits else ids


def filter_logits(
    logits: Array, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> Array:
    """Probabilities (N, V) after temperature, then top-k, then nucleus (top-p) filtering."""
    xp = get_array_module()
    # the row's best logit at 0 and the scale bounded: a temperature of 1e-300 leaves the best
    # token alone (greedy's choice) and 1e300 an even spread (a masked -inf stays -inf, never
    # -inf * 0), never an overflow to NaN
    scale = 1 / min(max(temperature, 1 / TEMPERATURE_BOUND), TEMPERATURE_BOUND)
    scaled = (logits - logits.max(axis=-1, keepdims=True)) * scale
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = -xp.partition(-scaled, top_k - 1, axis=-1)[:, top_k - 1 : top_k]
        scaled = xp.where(scaled < kth, -xp.inf, scaled)
    probs, _ = ops.softmax_forward(scaled)
    if top_p is not None and top_p < 1.0:
        # the nucleus is searched among the few most likely tokens (top_k of them, else
        # NUCLEUS_CANDIDATES), sorted alone; the whole row is sorted only where their mass falls short
        vocab = probs.shape[-1]
        order = top_candidates(probs, min(vocab, top_k or NUCLEUS_CANDIDATES))
        sorted_probs = xp.take_along_axis(probs, order, axis=-1)
        mass = xp.cumsum(sorted_probs, axis=-1)
        if order.shape[-1] < vocab and (backend_name() != "numpy" or not bool((mass[:, -1] >= top_p).all())):
            order = top_candidates(probs, vocab)
            sorted_probs = xp.take_along_axis(probs, order, axis=-1)
            mass = xp.cumsum(sorted_probs, axis=-1)
        # keep the smallest prefix whose mass reaches top_p (the first token is always kept);
        # every token past the candidates has a prefix mass of at least their whole mass: dropped
        kept_sorted = (mass - sorted_probs) < top_p
        kept = xp.zeros(probs.shape, dtype=bool)
        rows = xp.broadcast_to(xp.arange(probs.shape[0])[:, None], order.shape)
        kept[rows, order] = kept_sorted  # scattered by index, no mask: no wait for the host on a GPU
        probs = xp.where(kept, probs, 0.0)
        probs /= probs.sum(axis=-1, keepdims=True)
    return probs


# the temperature is taken within [1 / this, this]: below, any two logits that differ (in float32)
# are e^1e23 apart, the best token certain; above, every finite logit scales to 0 in float32
TEMPERATURE_BOUND = 1e30
# the tokens top-p filtering sorts first when no top_k bounds them (almost always enough: the
# nucleus of a trained model's distribution is a few dozen tokens at most)
NUCLEUS_CANDIDATES = 256


def check_no_repeat_ngram(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"no_repeat_ngram must be an integer >= 0 (0: off), got {n!r}")


def check_sampling_arguments(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")


@_decoding_call
def sample_decode(
    model: Transformer,
    src: Array,
    src_mask: Array | None,
    max_len: int,
    bos_id: int,
    eos_id: int,
    use_cache: bool = True,
    absorbed: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    return_logits: bool = False,
    no_repeat_ngram: int = 0,
    pad_id: int | None = PAD_ID,
) -> Array | tuple[Array, Array]:
    """Sample each token from the (filtered) softmax. The draws come from the model's generator,
    or from a fresh one seeded with ``seed`` (same seed, same output)."""
    check_sampling_arguments(temperature, top_k, top_p)
    check_no_repeat_ngram(no_repeat_ngram)
    never = never_emitted(model.tgt_embed.vocab_size, bos_id, eos_id, pad_id)
    xp = get_array_module()
    rng = model.rng if seed is None else make_rng(seed)

    def choose(logits: Array) -> Array:
        probs = filter_logits(logits, temperature, top_k, top_p)
        uniform = rng.random((probs.shape[0], 1), dtype=probs.dtype)
        # inverse CDF: the first index whose cumulative probability exceeds the uniform draw
        index = (xp.cumsum(probs, axis=-1) <= uniform * probs.sum(axis=-1, keepdims=True)).sum(axis=-1)
        return xp.minimum(index, probs.shape[-1] - 1)

    stepper = _start(model, src, src_mask, max_len, use_cache, absorbed)
    ids, logits = _generate(
        stepper, src.shape[0], max_len, bos_id, eos_id, choose, no_repeat_ngram, never, return_logits
    )
    return (ids, logits) if return_logits else ids


def _log_softmax_parts(logits: Array) -> tuple[Array, Array]:
    """The two (N, 1) numbers of each row's log-softmax: log_probs = (logits - shift) - log_sum, shift
    the row's maximum. The beam searches' one pass over the vocabulary: the (N, V) log-probabilities
    are never made (best_continuations computes those of its candidates, rounded the same way)."""
    xp = get_array_module()
    shift = logits.max(axis=-1, keepdims=True)
    exp = logits - shift
    xp.exp(exp, out=exp)
    return shift, xp.log(exp.sum(axis=-1, keepdims=True))


def beam_search_steps(
    step: Callable[[Array], Array],
    reorder: Callable[[Array], None],
    batch: int,
    beam_width: int,
    max_len: int,
    bos_id: int,
    eos_id: int,
    length_penalty: float = 1.0,
    early_stopping: bool = True,
    no_repeat_ngram: int = 0,
    never: tuple[int, ...] = (),
    n_best: int = 1,
) -> tuple[Array, Array]:
    """Beam search over any next-token model given as ``step(last tokens (B*W,)) -> logits (B*W, V)``;
    ``step`` hands its logits over (the search writes into them). The ``never`` ids are never
    emitted, nor with ``no_repeat_ngram`` a repeated n-gram.

    Beams of one batch item are consecutive rows. A beam that emitted <eos> is finished: it only
    continues with <eos> at no cost. Candidates are ranked by summed log-probability; the final
    choice divides it by length ** length_penalty. With ``early_stopping`` an item stops once its
    ``n_best`` best beams have finished. Returns the ``n_best`` best of each item, best first:
    (ids (B, n_best, L), normalised scores (B, n_best)).
    """
    xp = get_array_module()
    width = beam_width
    rows = batch * width
    scores = xp.zeros((batch, width))
    scores[:, 1:] = -xp.inf  # all beams start identical: keep one copy alive at first
    last = xp.full(rows, bos_id, dtype=xp.int64)
    finished = xp.zeros(rows, dtype=bool)
    lengths = xp.zeros(rows, dtype=xp.int64)
    history = xp.zeros((rows, 0), dtype=xp.int64)
    eos_only = None  # the row a finished beam continues with, made once the vocabulary is known
    for _ in range(max_len):
        logits = step(last)
        shift, log_sum = _log_softmax_parts(logits)  # blocking below changes no probability of the rest
        logits = block_disallowed(logits, history, no_repeat_ngram, never, eos_id, copy=False)
        vocab = logits.shape[-1]
        if eos_only is None:
            eos_only = xp.full(vocab, -xp.inf, dtype=logits.dtype)
            eos_only[eos_id] = 0.0
        # a finished beam: <eos> at no cost (its logits eos_only and its two numbers 0: log-probabilities
        # equal to its logits)
        xp.copyto(logits, eos_only, where=finished[:, None])
        normaliser = (xp.where(finished[:, None], 0.0, shift), xp.where(finished[:, None], 0.0, log_sum))
        # descending, ties to the lower index (as a stable sort): width 1 equals greedy's argmax
        best, scores = best_continuations(logits, scores, width, normaliser=normaliser)
        source_rows = (best // vocab + xp.arange(batch)[:, None] * width).reshape(rows)
        last = (best % vocab).reshape(rows)
        reorder(source_rows)
        was_finished = finished[source_rows]
        history = xp.concatenate([history[source_rows], last[:, None]], axis=1)
        lengths = lengths[source_rows] + (~was_finished)
        finished = was_finished | (last == eos_id)
        normalised = scores / xp.maximum(lengths.reshape(batch, width), 1) ** length_penalty
        # stable: of equal scores the lower beam first, so n_best 1 is the argmax
        top = xp.argsort(-normalised, axis=-1, kind="stable")[:, :n_best]
        top_finished = xp.take_along_axis(finished.reshape(batch, width), top, axis=-1)
        if bool(finished.all() | (early_stopping & top_finished.all())):  # one transfer from the device
            break
    normalised = scores / xp.maximum(lengths.reshape(batch, width), 1) ** length_penalty
    top = xp.argsort(-normalised, axis=-1, kind="stable")[:, :n_best]  # (B, n_best)
    chosen_rows = (xp.arange(batch)[:, None] * width + top).reshape(-1)
    ids = history[chosen_rows].reshape(batch, n_best, -1)
    return ids, xp.take_along_axis(normalised, top, axis=-1)


# beam_search's styles: this package's, where a finished beam keeps its place, or transformers' generate()
BEAM_STYLES = ("default", "transformers")
HF_NEG = -1.0e9  # transformers' score for an empty slot or a continuation it sets aside


def pooled_beam_search_steps(
    step: Callable[[Array], Array],
    reorder: Callable[[Array], None],
    batch: int,
    beam_width: int,
    max_len: int,
    bos_id: int,
    eos_id: int,
    length_penalty: float = 1.0,
    early_stopping: bool | str = False,
    no_repeat_ngram: int = 0,
    never: tuple[int, ...] = (),
    n_best: int = 1,
) -> tuple[Array, Array]:
    """Beam search as transformers' ``generate(num_beams=W, length_penalty=..., max_length=max_len + 1,
    early_stopping=...)`` does it, over the same ``step``/``reorder`` model as beam_search_steps.

    Each step ranks the 2W best continuations of an item's W running beams. Those among the first W
    that end (in <eos>, or by reaching ``max_len`` tokens) enter a pool of at most W finished
    hypotheses, scored log P / length ** length_penalty (length: the tokens generated, <eos>
    included); the W best that do not end run on. An item is done when its pool is full and its
    best running beam, scored at its current length (at ``max_len`` with early_stopping "never" and
    a positive penalty), cannot beat the pool's worst; with early_stopping True, when its pool is
    full. Returns the pool's ``n_best`` best: (ids (B, n_best, L), scores (B, n_best)).
    """
    xp = get_array_module()
    width, candidates = beam_width, 2 * beam_width
    rows = batch * width
    first = xp.arange(batch)[:, None]
    running = xp.full((batch, width), HF_NEG)
    running[:, 0] = 0.0  # all beams start identical: one copy alive at first
    history = xp.zeros((rows, 0), dtype=xp.int64)
    pool = xp.full((batch, width, max_len), eos_id, dtype=xp.int64)
    pool_scores = xp.full((batch, width), HF_NEG)
    pool_finished = xp.zeros((batch, width), dtype=bool)
    pool_lengths = xp.zeros((batch, width), dtype=xp.int64)
    improvable = xp.ones(batch, dtype=bool)
    last = xp.full(rows, bos_id, dtype=xp.int64)
    for t in range(max_len):
        logits = step(last)
        normaliser = _log_softmax_parts(logits)
        logits = block_disallowed(logits, history, no_repeat_ngram, never, eos_id, copy=False)
        vocab = logits.shape[-1]
        best, scores = best_continuations(logits, running, candidates, normaliser=normaliser)  # (B, 2W)
        sources = (best // vocab + first * width).reshape(-1)  # (B * 2W,) rows of history
        tokens = (best % vocab).reshape(-1)
        extended = xp.concatenate([history[sources], tokens[:, None]], axis=1).reshape(
            batch, candidates, t + 1
        )
        ends = (tokens == eos_id).reshape(batch, candidates) | (t + 1 >= max_len)
        # the W best that run on (an ending one set aside, as transformers does)
        keep = xp.argsort(-(scores + ends * HF_NEG), axis=-1, kind="stable")[:, :width]
        running = xp.take_along_axis(scores + ends * HF_NEG, keep, axis=-1)
        kept_rows = xp.take_along_axis(sources.reshape(batch, candidates), keep, axis=-1).reshape(-1)
        last = xp.take_along_axis(tokens.reshape(batch, candidates), keep, axis=-1).reshape(-1)
        reorder(kept_rows)
        history = xp.concatenate([history[kept_rows], last[:, None]], axis=1)
        # the ones among the first W that ended, into the pool if they beat what it holds
        entered = ends & (xp.arange(candidates) < width)
        normalised = scores / (t + 1) ** length_penalty
        normalised = normalised + (~entered | ~improvable[:, None]) * HF_NEG
        if early_stopping is True:
            normalised = normalised + pool_finished.all(axis=-1, keepdims=True) * HF_NEG
        padded = xp.full((batch, candidates, max_len), eos_id, dtype=xp.int64)
        padded[:, :, : t + 1] = extended
        merged_scores = xp.concatenate([pool_scores, normalised], axis=1)
        chosen = xp.argsort(-merged_scores, axis=-1, kind="stable")[:, :width]
        pool = xp.concatenate([pool, padded], axis=1)[first, chosen]
        pool_scores = xp.take_along_axis(merged_scores, chosen, axis=-1)
        pool_finished = xp.take_along_axis(xp.concatenate([pool_finished, entered], axis=1), chosen, axis=-1)
        lengths = xp.concatenate([pool_lengths, xp.full((batch, candidates), t + 1)], axis=1)
        pool_lengths = xp.take_along_axis(lengths, chosen, axis=-1)
        # can a running beam still beat the pool's worst? (transformers' heuristic, per item)
        length = max_len if early_stopping == "never" and length_penalty > 0 else t + 1
        best_possible = running[:, 0] / length**length_penalty
        worst = xp.where(pool_finished.all(axis=-1), pool_scores.min(axis=-1), HF_NEG)
        improvable &= best_possible > worst
        done = ~improvable.any() | ends.all()
        if early_stopping is True:
            done |= pool_finished.all()
        if bool(done):  # one transfer from the device
            break
    return pool[:, :n_best, : max(int(pool_lengths[:, :n_best].max()), 1)], pool_scores[:, :n_best]


@dataclass(frozen=True)
class BeamOptions:
    """Beam search's settings, declared once: beam_search and beam_search_n_best take them as keywords.

    ``style`` "default": a finished beam keeps its place (beam_search_steps), ``early_stopping``
    True or False (default True); "transformers": as transformers' generate() (pooled_beam_search_steps),
    ``early_stopping`` True, False or "never" (default False, generate()'s). ``pad_id`` (and ``<bos>``)
    is never emitted, nor with ``no_repeat_ngram`` a repeated n-gram. ``use_cache`` and ``absorbed``
    as greedy_decode takes them.
    """

    use_cache: bool = True
    absorbed: bool = False
    beam_width: int = 4
    length_penalty: float = 1.0
    early_stopping: bool | str | None = None
    no_repeat_ngram: int = 0
    pad_id: int | None = PAD_ID
    style: str = "default"

    def __post_init__(self) -> None:
        if self.style not in BEAM_STYLES:
            raise ValueError(f"style must be one of {BEAM_STYLES}, got {self.style!r}")
        never_stop = self.style == "transformers" and self.early_stopping == "never"
        if not (self.early_stopping is None or isinstance(self.early_stopping, bool) or never_stop):
            allowed = "True, False or 'never'" if self.style == "transformers" else "True or False"
            raise ValueError(
                f"early_stopping must be {allowed} for style {self.style!r}, got {self.early_stopping!r}"
            )
        check_no_repeat_ngram(self.no_repeat_ngram)
        width = self.beam_width
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(f"beam_width must be an integer >= 1, got {width!r}")


def beam_search(
    model: Transformer,
    src: Array,
    src_mask: Array | None,
    max_len: int,
    bos_id: int,
    eos_id: int,
    **options: Any,
) -> Array:
    """Beam search; with ``beam_width=1`` it returns exactly the greedy result. src (B, S) -> ids (B, L).
    ``options``: BeamOptions' settings (``beam_width=4, length_penalty=1.0, style="default"``...);
    beam_search_n_best's best."""
    ids, _ = beam_search_n_best(model, src, src_mask, max_len, bos_id, eos_id, n_best=1, **options)
    return ids[:, 0]


def check_n_best(n_best: Any, beam_width: int, names: tuple[str, str] = ("n_best", "beam_width")) -> None:
    """Refuse an ``n_best`` that is not an integer in [1, beam_width] (a beam keeps that many), by
    ``names`` (the command line's flags where it asks)."""
    if isinstance(n_best, bool) or not isinstance(n_best, int) or not 1 <= n_best <= beam_width:
        raise ValueError(
            f"{names[0]} must be an integer in [1, {names[1]}={beam_width}] (a beam keeps that many), got {n_best!r}"
        )


@_decoding_call
def beam_search_n_best(
    model: Transformer,
    src: Array,
    src_mask: Array | None,
    max_len: int,
    bos_id: int,
    eos_id: int,
    n_best: int = 1,
    **options: Any,
) -> tuple[Array, Array]:
    """The ``n_best`` (at most ``beam_width``) best translations of each source, best first, and their
    scores, the log-probability divided by length ** length_penalty: ids (B, n_best, L), (B, n_best).
    ``options``: BeamOptions' settings.
    """
    search = BeamOptions(**options)
    beam_width, early_stopping = search.beam_width, search.early_stopping
    never = never_emitted(model.tgt_embed.vocab_size, bos_id, eos_id, search.pad_id)
    check_model_limits(model, beam_width=beam_width)
    check_n_best(n_best, beam_width)
    stepper = _start(
        model,
        src,
        src_mask,
        max_len,
        search.use_cache,
        search.absorbed,
        repeat=beam_width,
        row_major_logits=True,
    )
    common = (
        stepper.step,
        # beams never leave their item, whose rows all hold copies of one encoder output
        lambda rows: stepper.reorder(rows, same_source=True),
        src.shape[0],
        beam_width,
        max_len,
        bos_id,
        eos_id,
        search.length_penalty,
    )
    if search.style == "transformers":
        stop = False if early_stopping is None else early_stopping  # generate()'s default
        return pooled_beam_search_steps(*common, stop, search.no_repeat_ngram, never, n_best)
    return beam_search_steps(*common, early_stopping is not False, search.no_repeat_ngram, never, n_best)
