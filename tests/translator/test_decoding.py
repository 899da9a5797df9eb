"""Decoding: cached equals uncached, beam search, sampling, cache sizes, bad input."""

from contextlib import contextmanager

import numpy as np
import pytest

import numpy_transformer as nt
from numpy_transformer.translator import decoding
from numpy_transformer.translator.decoder_cache import DecoderCache
from numpy_transformer.translator.decoding import (
    beam_search,
    beam_search_n_best,
    beam_search_steps,
    filter_logits,
    greedy_decode,
    sample_decode,
)
from numpy_transformer.translator.vocabulary import BOS_ID, EOS_ID

BOS, EOS = 1, 2
pytestmark = pytest.mark.usefixtures("kernels")  # every test on the fast kernels and on the textbook


def model_for(kind, norm_first=True, seed=1):
    return nt.build_transformer(
        11,
        13,
        9,
        12,
        d_model=16,
        N=2,
        h=4,
        d_ff=24,
        attention=kind,
        norm_first=norm_first,
        dtype="float64",
        seed=seed,
    )


def padded_source():
    src = np.array([[3, 4, 5, 6, 0, 0], [1, 2, 3, 4, 5, 6], [7, 8, 0, 0, 0, 0]])
    return src, nt.make_src_mask(src, 0)


MODES = [("mha", False), ("mla", False), ("mla", True)]


@pytest.mark.parametrize("kind, absorbed", MODES)
@pytest.mark.parametrize("norm_first", [True, False])
def test_cached_greedy_equals_uncached(kind, absorbed, norm_first):
    model = model_for(kind, norm_first)
    src, mask = padded_source()
    ids, logits = greedy_decode(model, src, mask, 10, BOS, EOS, use_cache=False, return_logits=True)
    cached_ids, cached_logits = greedy_decode(
        model, src, mask, 10, BOS, EOS, absorbed=absorbed, return_logits=True
    )
    np.testing.assert_array_equal(ids, cached_ids)
    np.testing.assert_allclose(cached_logits, logits, rtol=0, atol=1e-10)


def test_sequences_end_at_different_steps():
    """Force <eos> at a different step per row by biasing the projection, then check the fill."""
    model = model_for("mha")
    src, mask = padded_source()
    ids = greedy_decode(model, src, mask, 10, BOS, EOS)
    model.projection_layer.proj.bias.data[EOS] = 5.0
    ended = greedy_decode(model, src, mask, 10, BOS, EOS)
    assert ended.shape[1] < ids.shape[1] or (ended == EOS).any()
    for row in ended:
        first = list(row).index(EOS) if EOS in row else len(row)
        assert all(token == EOS for token in row[first:])
    np.testing.assert_array_equal(ended, greedy_decode(model, src, mask, 10, BOS, EOS, use_cache=False))


@pytest.mark.parametrize("kind, absorbed", MODES)
def test_cached_sampling_and_beam_equal_uncached(kind, absorbed):
    model = model_for(kind)
    src, mask = padded_source()
    options = {"temperature": 0.8, "top_k": 6, "top_p": 0.9, "seed": 5}
    sampled, logits = sample_decode(
        model, src, mask, 10, BOS, EOS, use_cache=False, return_logits=True, **options
    )
    cached, cached_logits = sample_decode(
        model, src, mask, 10, BOS, EOS, absorbed=absorbed, return_logits=True, **options
    )
    np.testing.assert_array_equal(sampled, cached)
    np.testing.assert_allclose(cached_logits, logits, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(
        beam_search(model, src, mask, 10, BOS, EOS, use_cache=False, beam_width=3),
        beam_search(model, src, mask, 10, BOS, EOS, absorbed=absorbed, beam_width=3),
    )


@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_beam_width_one_is_greedy(kind):
    model = model_for(kind, seed=4)
    src, mask = padded_source()
    np.testing.assert_array_equal(
        beam_search(model, src, mask, 10, BOS, EOS, beam_width=1),
        greedy_decode(model, src, mask, 10, BOS, EOS),
    )


def test_beam_search_finds_a_sequence_greedy_misses():
    """Tokens: 0 <bos>, 1 <eos>, 2 'a', 3 'b'. After <bos>: a 0.6, b 0.4. After 'a' the model is unsure
    (a, b, <eos> ~ 1/3 each); after 'b' it is sure of <eos> (0.99). Greedy: a ... (p <= 0.6/3 = 0.2);
    best: b <eos> (p = 0.396)."""
    table = np.log(
        np.array(
            [
                [1e-9, 1e-9, 0.6, 0.4],  # after <bos>
                [1e-9, 1.0, 1e-9, 1e-9],  # after <eos> (never used: finished beams are frozen)
                [1e-9, 0.34, 0.33, 0.33],  # after a
                [1e-9, 0.99, 0.005, 0.005],  # after b
            ]
        )
    )

    def step(last):
        return table[last]

    ids, _ = beam_search_steps(step, lambda rows: None, 1, 2, 3, 0, 1, length_penalty=0.0)
    assert ids[0, 0].tolist()[:2] == [3, 1]
    greedy, _ = beam_search_steps(step, lambda rows: None, 1, 1, 3, 0, 1, length_penalty=0.0)
    assert greedy[0, 0].tolist()[0] == 2


def test_sampling_is_seeded_and_filters_work():
    model = model_for("mha")
    src, mask = padded_source()
    a = sample_decode(model, src, mask, 10, BOS, EOS, seed=9)
    b = sample_decode(model, src, mask, 10, BOS, EOS, seed=9)
    np.testing.assert_array_equal(a, b)
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    np.testing.assert_allclose(filter_logits(logits, top_k=2), [[0.625, 0.375, 0, 0]])
    np.testing.assert_allclose(filter_logits(logits, top_p=0.75), [[0.625, 0.375, 0, 0]])
    np.testing.assert_allclose(filter_logits(logits, top_p=0.85), [[0.5, 0.3, 0.15, 0]] / np.float64(0.95))
    sharp = filter_logits(logits, temperature=0.1)
    assert sharp[0, 0] > 0.99
    greedy = greedy_decode(model, src, mask, 10, BOS, EOS)
    np.testing.assert_array_equal(sample_decode(model, src, mask, 10, BOS, EOS, top_k=1, seed=0), greedy)


@pytest.mark.parametrize(
    "kind, absorbed, width", [("mha", False, 2 * 16), ("mla", False, 4), ("mla", True, 4)]
)
def test_cache_size_is_the_analytic_count(kind, absorbed, width):
    model = model_for(kind)
    src, mask = padded_source()
    memory = model.eval().encode(src, mask)
    cache = DecoderCache(model, memory, mask, 10, absorbed)
    tokens = np.full(3, BOS)
    for step in range(1, 6):
        cache.step(tokens)
        assert (
            cache.self_attention_nbytes == 2 * 3 * step * width * 8
        )  # layers x rows x tokens x width x bytes
    assert cache.cross_attention_nbytes == 2 * 3 * 6 * width * 8
    assert cache.nbytes == cache.self_attention_nbytes + cache.cross_attention_nbytes


@pytest.mark.parametrize("kind, absorbed", MODES)
@pytest.mark.parametrize("rows", [[2, 0, 0], [0, 1, 2], [1, 2, 0], [2, 1]])
def test_a_reordered_cache_steps_as_a_cache_of_the_reordered_rows(kind, absorbed, rows):
    """Reordering keeps rows ``rows`` of everything stored (a permutation, repeats, fewer rows): the
    next step's logits equal those of the rows taken from an unreordered copy's step."""
    model = model_for(kind).eval()
    src, mask = padded_source()
    memory = model.encode(src, mask)
    cache, reference = (DecoderCache(model, memory, mask, 10, absorbed) for _ in range(2))
    for tokens in ([BOS, BOS, BOS], [4, 5, 6], [7, 3, 8]):
        cache.step(np.array(tokens))
        reference.step(np.array(tokens))
    stored = [layer.self_caches[0].store.copy() for layer in cache.layers]
    rows = np.array(rows)
    cache.reorder(rows)  # rows of other sources: the cross-attention arrays move too
    for layer, before in zip(cache.layers, stored):
        np.testing.assert_array_equal(layer.self_caches[0].store, before[rows])
    np.testing.assert_allclose(
        cache.step(np.full(len(rows), 9)), reference.step(np.full(3, 9))[rows], rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize("kind, absorbed", MODES)
def test_beams_of_one_source_attend_over_it_as_rows_of_their_own_would(kind, absorbed):
    """A cache of 3 beams a source (its cross-attention arrays once a source, the beams attending as
    three query positions) steps and reorders as a cache of the encoder output repeated per beam."""
    model = model_for(kind).eval()
    src, mask = padded_source()
    memory = model.encode(src, mask)
    grouped = DecoderCache(model, memory, mask, 10, absorbed, beams=3)
    repeated = DecoderCache(model, np.repeat(memory, 3, axis=0), np.repeat(mask, 3, axis=0), 10, absorbed)
    assert grouped.cross_attention_nbytes * 3 == repeated.cross_attention_nbytes
    within_sources = np.array([2, 2, 0, 3, 4, 5, 8, 6, 6])  # each row takes a row of its own source
    rng = np.random.default_rng(0)
    for _ in range(4):
        tokens = rng.integers(3, 13, 9)
        np.testing.assert_allclose(grouped.step(tokens), repeated.step(tokens), rtol=1e-12, atol=1e-12)
        grouped.reorder(within_sources, same_source=True)
        repeated.reorder(within_sources, same_source=True)
    with pytest.raises(ValueError, match="reorders them within their source only"):
        grouped.reorder(within_sources)


def test_a_decoding_cache_is_freed_without_the_cycle_collector():
    """No reference cycle keeps a finished call's caches (and the arrays they hold) alive until the
    cyclic garbage collector happens to run."""
    import gc
    import weakref

    model = model_for("mha").eval()
    src, mask = padded_source()
    cache = DecoderCache(model, model.encode(src, mask), mask, 10, False)
    cache.step(np.full(3, BOS))
    layer = weakref.ref(cache.layers[0])
    gc.disable()
    try:
        del cache
        assert layer() is None
    finally:
        gc.enable()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_len": 0}, "max_len must be an integer >= 1, got 0"),
        ({"max_len": 50}, "max_len 50 exceeds the target positional table of this model, 12 positions"),
        ({"bos_id": 13}, r"bos_id must be a token id in \[0, 13\), got 13"),
        ({"eos_id": -1}, "eos_id must be a token id"),
    ],
)
def test_bad_decode_arguments(kwargs, message):
    model = model_for("mha")
    src, mask = padded_source()
    args = {"max_len": 5, "bos_id": BOS, "eos_id": EOS, **kwargs}
    with pytest.raises(ValueError, match=message):
        greedy_decode(model, src, mask, **args)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": 0}, "temperature must be > 0, got 0"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\], got 1.5"),
        ({"top_p": 0}, "top_p must be in"),
        ({"top_k": 0}, "top_k must be an integer >= 1, got 0"),
    ],
)
def test_bad_sampling_arguments(kwargs, message):
    model = model_for("mha")
    src, mask = padded_source()
    with pytest.raises(ValueError, match=message):
        sample_decode(model, src, mask, 5, BOS, EOS, **kwargs)


def test_bad_beam_and_source():
    model = model_for("mha")
    src, mask = padded_source()
    with pytest.raises(ValueError, match="beam_width must be an integer >= 1, got 0"):
        beam_search(model, src, mask, 5, BOS, EOS, beam_width=0)
    long_src = np.ones((1, 10), dtype=int)
    with pytest.raises(ValueError, match="src has length 10, longer than the positional table's seq_len=9"):
        greedy_decode(model, long_src, None, 5, BOS, EOS)
    with pytest.raises(ValueError, match="absorbed=True needs a model built with attention='mla'"):
        greedy_decode(model, src, mask, 5, BOS, EOS, absorbed=True)


def test_decoder_weights_counts_the_decoder_and_projection_matrices():
    model = model_for("mha")
    matrices = [
        p.data.size
        for name, p in model.named_parameters()
        if p.data.ndim == 2 and (name.startswith("decoder.layers") or name.startswith("projection_layer"))
    ]
    assert decoding.decoder_weights(model.config) == sum(matrices)


@pytest.mark.parametrize("rows, one_thread", [(1, True), (3, True), (200, False)])
def test_small_decoding_calls_hold_blas_to_one_thread(monkeypatch, rows, one_thread):
    model = model_for("mha")
    assert (rows * decoding.decoder_weights(model.config) < decoding.ONE_BLAS_THREAD_MAX) == one_thread
    counts = []

    @contextmanager
    def record(count):
        counts.append(count)
        yield True

    monkeypatch.setattr(decoding, "blas_threads", record)
    src = np.full((rows, 3), 5)
    greedy_decode(model, src, None, 2, BOS, EOS)
    assert counts == ([1] if one_thread else [])


def test_a_mask_that_hides_nothing_decodes_as_no_mask():
    model = model_for("mla")
    src, mask = padded_source()
    full = np.ones_like(mask)
    for absorbed in (False, True):
        ids, logits = greedy_decode(model, src, full, 6, BOS, EOS, absorbed=absorbed, return_logits=True)
        unmasked = greedy_decode(model, src, None, 6, BOS, EOS, absorbed=absorbed, return_logits=True)
        np.testing.assert_array_equal(ids, unmasked[0])
        np.testing.assert_array_equal(logits, unmasked[1])
        # a mask that does hide keys still changes the result
        assert not np.array_equal(
            greedy_decode(model, src, mask, 6, BOS, EOS, absorbed=absorbed, return_logits=True)[1], logits
        )


@pytest.mark.parametrize(
    "kind, absorbed, per_layer",
    [
        ("mha", False, 6 * 16 * 16 + 2 * 16 * 24),  # W_qkv, W_o, cross W_q, W_o; W_1, W_2
        (
            "mla",
            False,
            2 * (16 * 20 + 16 * 16 + 4 * 32) - 16 * 4 + 2 * 16 * 24,
        ),  # W_q|W_c (cross: W_q), decompress, W_o
        (
            "mla",
            True,
            2 * (4 * 4 * 16 + 16 * 16) + 16 * 4 + 2 * 16 * 24,
        ),  # W_in (H*L [+ L], D), W_ov (H*L, D)
    ],
)
def test_step_weights_are_what_a_step_multiplies_by(kind, absorbed, per_layer):
    model = model_for(kind)
    src, mask = padded_source()
    cache = DecoderCache(model, model.eval().encode(src, mask), mask, 10, absorbed)
    assert cache.step_weight_nbytes == (2 * per_layer + 13 * 16) * 8  # layers, projection (V, D), float64
    if not absorbed:  # views of the model's own weights, never copies
        weights = cache.layers[0].step_weights()
        assert all(any(np.shares_memory(weight, p.data) for p in model.parameters()) for weight in weights)


def test_block_repeated_ngrams_blocks_exactly_the_completions_of_a_seen_ngram():
    from numpy_transformer.translator.decoding import block_repeated_ngrams

    history = np.array([[5, 6, 7, 5, 6], [1, 2, 3, 4, 1]])
    scores = np.zeros((2, 9))
    blocked = np.isinf(block_repeated_ngrams(scores, history, 3))
    assert blocked[0].nonzero()[0].tolist() == [7]  # "5 6" was followed by 7
    assert blocked[1].nonzero()[0].tolist() == []  # "4 1" never occurred before
    assert np.isinf(block_repeated_ngrams(scores, history, 2))[1].nonzero()[0].tolist() == [2]  # "1" -> 2
    assert np.isinf(block_repeated_ngrams(scores, history, 1))[0].nonzero()[0].tolist() == [5, 6, 7]
    assert not np.isinf(block_repeated_ngrams(scores, history[:, :2], 3)).any()


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_no_output_repeats_an_ngram(strategy):
    from numpy_transformer.translator.decoding import beam_search, greedy_decode

    model = nt.build_transformer(12, 12, 8, 30, d_model=16, N=1, h=2, d_ff=16, seed=4).eval()
    model.projection_layer.proj.bias.data[2] = -1e4  # never <eos>: decode all 24 tokens
    src = np.array([[3, 4, 5, 6], [7, 8, 9, 0]])
    mask = nt.make_src_mask(src, 0)
    decode = greedy_decode if strategy == "greedy" else lambda *a, **k: beam_search(*a, beam_width=3, **k)
    plain = decode(model, src, mask, 24, 1, 2)
    assert any(
        len({tuple(row[i : i + 2]) for i in range(len(row) - 1)}) < len(row) - 1 for row in plain.tolist()
    )
    for row in decode(model, src, mask, 24, 1, 2, no_repeat_ngram=2).tolist():
        bigrams = [tuple(row[i : i + 2]) for i in range(len(row) - 1)]
        assert len(set(bigrams)) == len(bigrams), row


def test_evaluate_decodes_as_it_is_told():
    from numpy_transformer.translator.config import TrainConfig
    from numpy_transformer.translator.decoding import beam_search
    from numpy_transformer.translator.evaluation import evaluate
    from numpy_transformer.translator.training import Trainer

    trainer = Trainer.create(
        TrainConfig(task="copy", steps=3, batch_size=8), {"d_model": 16, "N": 1, "h": 2, "d_ff": 16}
    )
    for _ in range(3):
        trainer.train_step()
    pairs = trainer.task.dev[:6]
    greedy = evaluate(trainer.model, trainer.task, pairs)
    assert evaluate(trainer.model, trainer.task, pairs, strategy=beam_search, beam_width=1) == greedy
    wide = evaluate(
        trainer.model,
        trainer.task,
        pairs,
        strategy=beam_search,
        beam_width=3,
        length_penalty=0.6,
        no_repeat_ngram=2,
    )
    assert wide["loss"] == greedy["loss"] and 0 <= wide["bleu"] <= 100


def test_evaluate_batches_by_length_and_keeps_the_pairs_order():
    """Batches are made of sources of about one length; every translation still lands beside its own
    pair: the same as translating each pair alone."""
    from numpy_transformer.translator.config import TrainConfig
    from numpy_transformer.translator.evaluation import evaluate
    from numpy_transformer.translator.training import Trainer

    trainer = Trainer.create(
        TrainConfig(task="copy", steps=3, batch_size=8), {"d_model": 16, "N": 1, "h": 2, "d_ff": 16}
    )
    for _ in range(3):
        trainer.train_step()
    pairs = sorted(trainer.task.dev[:9], key=lambda pair: -len(pair[0]) * (1 if len(pair[0]) % 2 else -1))
    assert len({len(source) for source, _ in pairs}) > 2  # lengths to sort
    batched = evaluate(trainer.model, trainer.task, pairs, batch_size=4, examples=len(pairs))
    alone = [evaluate(trainer.model, trainer.task, [pair], examples=1)["examples"][0] for pair in pairs]
    assert batched["examples"] == alone


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_no_repeat_unigrams_never_emit_specials_and_still_end(strategy):
    """With n = 1 every token may appear once: 9 tokens in a 12-token vocabulary run out before
    max_len. What is left must be <eos> (least likely here, but allowed), never <pad> or <bos>."""
    model = nt.build_transformer(12, 12, 8, 30, d_model=16, N=1, h=2, d_ff=16, seed=4).eval()
    bias = model.projection_layer.proj.bias.data
    bias[EOS] = -1e4  # the model's last choice
    bias[0] = bias[BOS] = 50.0  # <pad> and <bos> its first ones
    src = np.array([[3, 4, 5, 6], [7, 8, 9, 0]])
    mask = nt.make_src_mask(src, 0)
    decode = {
        "greedy": greedy_decode,
        "beam": lambda *a, **k: beam_search(*a, beam_width=3, **k),
        "sample": lambda *a, **k: sample_decode(*a, seed=0, **k),
    }[strategy]
    for row in decode(model, src, mask, 24, BOS, EOS, no_repeat_ngram=1).tolist():
        sentence = row[: row.index(EOS)] if EOS in row else row
        assert EOS in row and len(sentence) <= 9, row  # it ended, at the latest when the tokens ran out
        assert 0 not in sentence and BOS not in sentence, row
        assert len(set(sentence)) == len(sentence), row
    for row in decode(model, src, mask, 5, BOS, EOS).tolist():  # without the option too
        assert 0 not in row and BOS not in row, row


def test_the_padding_id_is_named_or_none():
    model = model_for("mha")
    src, mask = padded_source()
    model.projection_layer.proj.bias.data[5] = 1e3  # token 5 would be chosen at every step
    assert 5 not in greedy_decode(model, src, mask, 4, BOS, EOS, pad_id=5).tolist()[0]
    assert greedy_decode(model, src, mask, 4, BOS, EOS, pad_id=None).tolist()[0] == [5] * 4
    for bad in (-1, 13, "0", True):
        with pytest.raises(
            ValueError, match=f"pad_id must be None or a token id in \\[0, 13\\), got {bad!r}"
        ):
            greedy_decode(model, src, mask, 4, BOS, EOS, pad_id=bad)


def test_n_best_lists_the_beams_best_first_and_its_first_is_beam_search():
    model = model_for("mha")
    src, mask = padded_source()
    ids, scores = beam_search_n_best(model, src, mask, 12, BOS_ID, EOS_ID, beam_width=4, n_best=3)
    assert ids.shape[:2] == (src.shape[0], 3) and scores.shape == (src.shape[0], 3)
    assert (np.diff(scores, axis=1) <= 0).all()  # best first
    single = beam_search(model, src, mask, 12, BOS_ID, EOS_ID, beam_width=4)
    assert ids[:, 0, : single.shape[1]].tolist() == single.tolist()
    for row in range(src.shape[0]):  # the three hypotheses of a source differ
        texts = {tuple(t[: list(t).index(EOS_ID)] if EOS_ID in t else t) for t in ids[row].tolist()}
        assert len(texts) == 3
    with pytest.raises(
        ValueError,
        match=r"n_best must be an integer in \[1, beam_width=4\] \(a beam keeps that many\), got 5",
    ):
        beam_search_n_best(model, src, mask, 12, BOS_ID, EOS_ID, beam_width=4, n_best=5)


def test_a_reference_scores_its_log_probability_token_by_token():
    """score_ids against the sum computed by hand, one decoder step at a time through the cache."""
    from numpy_transformer.translator.decoding import _start
    from numpy_transformer.translator.translating import score_ids

    model = model_for("mla")
    sources, references = [[5, 6, 7], [8, 9]], [[4, 10, 6], [7]]
    scores = score_ids(model, sources, references)
    for source, reference, score in zip(sources, references, scores):
        src = np.array([source])
        stepper = _start(model.eval(), src, None, 8, use_cache=True, absorbed=False)
        total, last = 0.0, BOS_ID
        for token in [*reference, EOS_ID]:
            logits = stepper.step(np.array([last]))[0]
            total += logits[token] - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
            last = token
        assert score == pytest.approx(total, rel=1e-9, abs=1e-9)


def test_top_candidates_equal_a_full_stable_sort_with_ties():
    """The chunk search picks the same candidates, in the same order, as argsort(-x, kind="stable"),
    also where equal scores straddle the k-th place, a whole chunk is -inf, or a row holds NaN."""
    from numpy_transformer.translator.decoding import top_candidates

    rng = np.random.default_rng(0)
    for trial in range(300):
        rows, size = rng.integers(1, 6), rng.integers(1, 60)
        # few distinct values, so most rows tie across the boundary; -inf as blocked tokens are
        scores = rng.choice([-np.inf, -3.0, -1.5, -1.0, -0.0, 0.0, 2.0], size=(rows, size))
        if trial % 3 == 0:
            scores = rng.normal(size=(rows, size)).round(1)  # ties among many values
        if trial % 5 == 0:
            scores[:, rng.integers(0, size, size // 2 + 1)] = -np.inf
        if trial % 7 == 0:
            scores[rng.integers(0, rows), rng.integers(0, size)] = np.nan  # argsort puts NaN last
        for k in {1, 2, 4, 8, int(size) - 1, int(size), int(size) + 3} - {0}:
            expected = np.argsort(-scores, axis=-1, kind="stable")[:, :k]
            np.testing.assert_array_equal(decoding.top_candidates(scores, k), expected)
            for chunk in (1, 3, 4, 7):  # small chunks, so rows of a few dozen go through the chunk search
                np.testing.assert_array_equal(decoding.top_candidates(scores, k, chunk), expected)
    assert top_candidates(np.zeros((2, 5)), 3).tolist() == [[0, 1, 2], [0, 1, 2]]


@pytest.mark.filterwarnings("ignore:invalid value encountered in add:RuntimeWarning")  # +inf + -inf
def test_best_continuations_equal_sorting_every_beams_totals():
    """An item's k best continuations of its beams (beam score + log-probability, float64 from
    float32), found chunk by chunk, equal the stable full sort of the totals, values included:
    with -inf and +inf beams, -inf tokens, ties across beams and chunks, NaN, and a short tail."""
    rng = np.random.default_rng(1)
    for trial in range(300):
        batch, width, vocab = rng.integers(1, 4), rng.integers(1, 5), rng.integers(1, 70)
        log_probs = rng.choice([-np.inf, -3.0, -1.5, -1.0, -0.5], size=(batch * width, vocab))
        if trial % 2:
            log_probs = rng.normal(size=(batch * width, vocab)).round(1)
        log_probs = log_probs.astype(np.float32)
        beam_scores = rng.choice([0.0, -1.0, -2.5, -np.inf, -1e9], size=(batch, width))
        if trial % 7 == 0:  # +inf beside a -inf token: a NaN total
            beam_scores[rng.integers(0, batch), rng.integers(0, width)] = np.inf
        if trial % 11 == 0:
            log_probs[rng.integers(0, batch * width), rng.integers(0, vocab)] = np.nan
        totals = (beam_scores.reshape(-1, 1) + log_probs).reshape(batch, width * vocab)
        for k in {1, 2, 2 * int(width), int(width * vocab)}:
            expected = np.argsort(-totals, axis=-1, kind="stable")[:, :k]
            for chunk in (1, 3, 8, decoding.CANDIDATE_CHUNK):
                best, values = decoding.best_continuations(log_probs, beam_scores, k, chunk)
                np.testing.assert_array_equal(best, expected)
                np.testing.assert_array_equal(values, np.take_along_axis(totals, expected, axis=-1))


def test_best_continuations_of_logits_equal_those_of_their_log_softmax():
    """Given raw logits and their log-softmax's two numbers, the candidates and totals are those of
    the log-probabilities made whole, (logits - shift) - log_sum, to the last bit: with blocked
    (-inf) tokens, a row that ended (its numbers 0), ties and a vocabulary of real size."""
    rng = np.random.default_rng(2)
    for trial in range(60):
        batch, width = rng.integers(1, 5), rng.integers(1, 5)
        vocab = int(rng.choice([5, 70, 1000, 5003]))
        logits = (rng.normal(size=(batch * width, vocab)) * 4).astype(np.float32)
        if trial % 2:
            logits = logits.round(0)  # ties
        shift, log_sum = decoding._log_softmax_parts(logits)
        logits[:, rng.integers(0, vocab, 3)] = -np.inf  # blocked after the numbers were taken
        ended = rng.random(batch * width) < 0.3
        logits[ended], logits[ended, 0] = -np.inf, 0.0
        shift[ended], log_sum[ended] = 0.0, 0.0
        log_probs = (logits - shift) - log_sum
        beam_scores = rng.choice([0.0, -1.0, -2.5, -np.inf], size=(batch, width))
        for k in {1, 2 * int(width)}:
            for chunk in (3, decoding.CANDIDATE_CHUNK):
                expected = decoding.best_continuations(log_probs, beam_scores, k, chunk)
                found = decoding.best_continuations(logits, beam_scores, k, chunk, (shift, log_sum))
                for a, b in zip(found, expected):
                    np.testing.assert_array_equal(a, b)


def _full_sort_filter(logits, top_p):
    """filter_logits' nucleus as it was: a whole-row sort (stable here, so ties are settled by index)."""
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    order = np.argsort(-probs, axis=-1, kind="stable")
    sorted_probs = np.take_along_axis(probs, order, axis=-1)
    drop_sorted = (np.cumsum(sorted_probs, axis=-1) - sorted_probs) >= top_p
    drop = np.take_along_axis(drop_sorted, np.argsort(order, axis=-1), axis=-1)
    probs = np.where(drop, 0.0, probs)
    return probs / probs.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("spread", [0.3, 3.0, 12.0])  # flat (the nucleus past the first candidates) to sharp
def test_top_p_keeps_the_nucleus_a_full_sort_keeps(spread):
    rng = np.random.default_rng(1)
    logits = (rng.normal(size=(4, 1000)) * spread).round(2)  # rounded: ties
    for top_p in (0.1, 0.5, 0.9, 0.999):
        np.testing.assert_allclose(
            filter_logits(logits, top_p=top_p), _full_sort_filter(logits, top_p), rtol=1e-12, atol=0
        )


def test_block_repeated_ngrams_leaves_its_input_unless_told():
    from numpy_transformer.translator.decoding import block_repeated_ngrams

    history, scores = np.array([[5, 6, 5, 6, 5]]), np.zeros((1, 9))
    blocked = block_repeated_ngrams(scores, history, 2)
    assert np.isinf(blocked[0, 6]) and not np.isinf(scores).any()
    assert block_repeated_ngrams(scores, history, 2, copy=False) is scores and np.isinf(scores[0, 6])
