"""The blocks' exercises (the residual connection, the feed-forward, the encoder and decoder
blocks, the whole encoder-decoder): each declared once, with its cases, the mistakes those cases
recognise and its hints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy

from .. import functional
from ..backend import Array, get_array_module
from . import blocks
from .exercise import Case, Exercise, normal, random_params


def _residual_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    norm_cache, sublayer, norm_first = cache
    if norm_first:
        dnormed = functional.linear_backward(dout, sublayer)[0]
        branch = functional.layer_norm_backward(dnormed, norm_cache)[0]
        return {
            "x": [
                (branch, "residual_dropped"),
                (dout, "residual_dropped"),
                (dout + dnormed, "norm_path"),
                (functional.layer_norm_backward(dout + dnormed, norm_cache)[0], "norm_path"),
            ]
        }
    dsum = functional.layer_norm_backward(dout, norm_cache)[0]
    return {
        "x": [
            (functional.linear_backward(dsum, sublayer)[0], "residual_dropped"),
            (dsum, "residual_dropped"),
            (dout + functional.linear_backward(dsum, sublayer)[0], "norm_path"),
            (dsum + functional.linear_backward(dout, sublayer)[0], "norm_path"),
            (dout + functional.linear_backward(dout, sublayer)[0], "norm_path"),
        ]
    }


def _cases_residual(rng: numpy.random.Generator) -> list[Case]:
    def case(label: str, shape: tuple[int, ...], norm_first: bool) -> Case:
        width = shape[-1]
        params = random_params(rng, gamma=(width,), beta=(width,), weight=(width, width), bias=(width,))
        return Case(
            label,
            {"x": normal(rng, *shape), "params": params, "norm_first": norm_first},
            ("x", *[f"params.{key}" for key in params]),
            candidates=_residual_candidates,
        )

    return [
        case("x (2, 3, 4), pre-norm", (2, 3, 4), True),
        case("x (2, 3, 4), post-norm", (2, 3, 4), False),
        case("x (3, 5), post-norm", (3, 5), False),
        case("x (1, 1, 4), pre-norm", (1, 1, 4), True),
        case("x (2, 2, 2, 3), pre-norm", (2, 2, 2, 3), True),
    ]


def _cases_feed_forward(rng: numpy.random.Generator) -> list[Case]:
    def case(label: str, shape: tuple[int, ...], hidden: int) -> Case:
        width = shape[-1]
        params = random_params(rng, w1=(hidden, width), b1=(hidden,), w2=(width, hidden), b2=(width,))
        return Case(label, {"x": normal(rng, *shape), "params": params}, ("x", "params.w1", "params.b1",
                    "params.w2", "params.b2"))  # fmt: skip

    return [
        case("x (2, 3, 4), d_ff 6", (2, 3, 4), 6),
        case("x (5, 4), d_ff 3", (5, 4), 3),
        case("x (1, 1, 4), d_ff 2", (1, 1, 4), 2),
        case("x (2, 1, 2, 4), d_ff 5", (2, 1, 2, 4), 5),
    ]


def _block_params(rng: numpy.random.Generator, width: int, hidden: int, decoder: bool) -> dict[str, Array]:
    d, h = width, hidden
    shapes: dict[str, tuple[int, ...]] = {"ln1_gamma": (d,), "ln1_beta": (d,)}
    if decoder:
        shapes |= {"self_w_qkv": (3 * d, d), "self_w_o": (d, d), "ln2_gamma": (d,), "ln2_beta": (d,)}
        shapes |= {"cross_w_qkv": (3 * d, d), "cross_w_o": (d, d), "ln3_gamma": (d,), "ln3_beta": (d,)}
    else:
        shapes |= {"w_qkv": (3 * d, d), "w_o": (d, d), "ln2_gamma": (d,), "ln2_beta": (d,)}
    shapes |= {"w1": (h, d), "b1": (h,), "w2": (d, h), "b2": (d,)}
    return random_params(rng, **shapes)


def _through_residuals(
    dout: Any, residuals: list[tuple[Callable, Any]], mistake: tuple[int, str] | None
) -> Any:
    """dx back through pre-norm residuals ``(branch backward, norm cache)``, last first, with one
    ``mistake`` at residual i: "dropped" (the skip's gradient lost), "branch" (the branch's lost),
    "norm_skipped" (the norm's backward left out of the branch) or "norm_after_sum" (the norm's
    backward after the sum)."""
    dx = dout
    for i, (branch_backward, norm_cache) in reversed(list(enumerate(residuals))):
        kind = mistake[1] if mistake is not None and mistake[0] == i else "right"
        if kind == "branch":
            continue
        dbranch = branch_backward(dx)
        if kind == "norm_skipped":
            dx = dx + dbranch
        elif kind == "norm_after_sum":
            dx = functional.layer_norm_backward(dx + dbranch, norm_cache)[0]
        else:
            dh = functional.layer_norm_backward(dbranch, norm_cache)[0]
            dx = dh if kind == "dropped" else dx + dh
    return dx


def _residual_mistakes(dout: Any, residuals: list[tuple[Callable, Any]]) -> list[tuple[Array, str]]:
    """A block's dx with each residual's typical mistake, one residual at a time."""
    sentence = {"dropped": "residual_dropped", "branch": "residual_dropped", "norm_skipped": "norm_path",
                "norm_after_sum": "norm_path"}  # fmt: skip
    return [
        (_through_residuals(dout, residuals, (i, kind)), key)
        for i in range(len(residuals))
        for kind, key in sentence.items()
    ]


def _encoder_block_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    """dx with one residual's skip dropped, or its norm's backward on the wrong path."""
    residuals = [
        (lambda d: functional.multi_head_self_attention_backward(d, cache.attention)[0], cache.norm_1),
        (lambda d: blocks.feed_forward_backward(d, cache.feed_forward)[0], cache.norm_2),
    ]
    return {"x": _residual_mistakes(dout, residuals)}


def _decoder_block_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    residuals = [
        (lambda d: functional.multi_head_self_attention_backward(d, cache.self_attention)[0], cache.norm_1),
        (lambda d: functional.multi_head_attention_backward(d, cache.cross_attention)[0], cache.norm_2),
        (lambda d: blocks.feed_forward_backward(d, cache.feed_forward)[0], cache.norm_3),
    ]
    return {"x": _residual_mistakes(dout, residuals)}


def _cases_encoder_block(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()
    padded = numpy.ones((2, 1, 1, 3), dtype=bool)
    padded[1, ..., 2:] = False
    cases = []
    for label, b, s, width, heads, mask in (
        ("x (2, 3, 8), 2 heads, a padded key", 2, 3, 8, 2, xp.asarray(padded)),
        ("x (1, 1, 4), 1 head, no mask", 1, 1, 4, 1, None),
    ):
        params = _block_params(rng, width, 2 * width, decoder=False)
        cases.append(
            Case(
                label,
                {"x": normal(rng, b, s, width), "params": params, "mask": mask, "n_heads": heads},
                ("x", *[f"params.{key}" for key in params]),
                candidates=_encoder_block_candidates,
                max_entries=24,
            )
        )
    return cases


def _cases_decoder_block(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()
    src = numpy.ones((2, 1, 1, 4), dtype=bool)
    src[0, ..., 3:] = False
    causal = numpy.tril(numpy.ones((3, 3), dtype=bool))[None, None]
    cases = []
    for label, b, t, s, width, heads, src_mask, tgt_mask in (
        ("x (2, 3, 8), memory (2, 4, 8), 2 heads, causal, a padded source", 2, 3, 4, 8, 2, src, causal),
        ("x (1, 1, 4), memory (1, 1, 4), 1 head, no masks", 1, 1, 1, 4, 1, None, None),
    ):
        params = _block_params(rng, width, 2 * width, decoder=True)
        inputs = {
            "x": normal(rng, b, t, width),
            "memory": normal(rng, b, s, width),
            "params": params,
            "src_mask": None if src_mask is None else xp.asarray(src_mask),
            "tgt_mask": None if tgt_mask is None else xp.asarray(tgt_mask),
            "n_heads": heads,
        }
        cases.append(
            Case(
                label,
                inputs,
                ("x", "memory", *[f"params.{key}" for key in params]),
                candidates=_decoder_block_candidates,
                max_entries=24,
            )
        )
    return cases


def _whole_variant(cache: Any, dloss: float, memory: str = "all", tied: str = "both") -> dict[str, Array]:
    """The textbook's encoder_decoder_backward with one block-level mistake: the memory's gradient
    from the first or the last decoder layer only, or the tied table's from one use only."""
    grads: dict[str, Any] = {}
    dlogits = functional.cross_entropy_backward(dloss, cache.loss)
    dy, dprojection, _ = functional.linear_backward(dlogits, cache.projection)
    dy = functional.layer_norm_backward(dy, cache.decoder_norm)[0]
    kept: list[Any] = []
    for i in reversed(range(cache.n_layers)):
        dy, dmemory_i, _ = blocks.decoder_block_backward(dy, cache.decoder[i])
        kept.append(dmemory_i)
    dmemory = {"all": sum(kept), "last": kept[0], "first": kept[-1]}[memory]
    dembedding = functional.embedding_backward(dy, cache.tgt_embedding)
    grads["tgt_table"] = {
        "both": dprojection + dembedding,
        "projection": dprojection,
        "embedding": dembedding,
    }[tied]
    dx, grads["enc_norm_gamma"], grads["enc_norm_beta"] = functional.layer_norm_backward(
        dmemory, cache.encoder_norm
    )
    for i in reversed(range(cache.n_layers)):
        dx, block = blocks.encoder_block_backward(dx, cache.encoder[i])
        grads.update({f"enc{i}_{key}": value for key, value in block.items()})
    grads["src_table"] = functional.embedding_backward(dx, cache.src_embedding)
    return grads


def _whole_candidates(dloss: float) -> Callable[[Any, Any], dict[str, list[tuple[Array, str]]]]:
    def candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
        found: dict[str, list[tuple[Array, str]]] = {}
        for memory in ("first", "last"):
            for key, value in _whole_variant(cache, dloss, memory=memory).items():
                if key != "tgt_table":
                    found.setdefault(f"params.{key}", []).append((value, "memory_one_layer"))
        for tied in ("projection", "embedding"):
            found.setdefault("params.tgt_table", []).append(
                (_whole_variant(cache, dloss, tied=tied)["tgt_table"], "tied_not_added")
            )
        return found

    return candidates


def _cases_encoder_decoder(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()
    cases = []
    for label, src, tgt_in, tgt_out, vocab, width, layers, heads, smoothing, dloss in (
        (
            "src (2, 4) padded, tgt (2, 3), D 8, 2 layers, 2 heads, smoothing 0.1",
            [[1, 2, 3, 0], [4, 5, 6, 2]],
            [[1, 2, 3], [1, 4, 0]],
            [[2, 3, 5], [4, 5, 0]],
            (7, 6),
            8,
            2,
            2,
            0.1,
            1.0,
        ),
        (
            "src (1, 2), tgt (1, 2), D 4, 1 layer, 1 head",
            [[3, 3]],
            [[1, 2]],
            [[2, 2]],
            (4, 3),
            4,
            1,
            1,
            0.0,
            0.5,
        ),
    ):
        params = blocks.init_params(rng, vocab[0], vocab[1], width, 2 * width, layers)
        inputs = {
            "src": xp.asarray(src),
            "tgt_in": xp.asarray(tgt_in),
            "tgt_out": xp.asarray(tgt_out),
            "params": params,
            "n_layers": layers,
            "n_heads": heads,
            "pad_id": 0,
            "label_smoothing": smoothing,
        }
        cases.append(
            Case(
                label,
                inputs,
                tuple(f"params.{key}" for key in params),
                dloss=dloss,
                candidates=_whole_candidates(dloss),
                max_entries=12,
            )
        )
    return cases


BLOCK_EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        "residual_backward",
        "residual_forward",
        ("dx", "dparams"),
        "(dout, cache)",
        """Gradient of a residual connection around a linear sublayer f, pre-norm y = x + f(norm(x))
            or post-norm y = norm(x + f(x)).

            dout: (..., D); cache: ResidualCache(norm, sublayer, norm_first).
            Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
            (D, D), bias (D,).""",
        params=True,
        cases=_cases_residual,
        hints=(
            "x reaches y along two paths, the skip and the branch: what happens to gradients where paths join?",
            "They add. Pre-norm: the norm is on the branch only. Post-norm: the norm is after the sum, so "
            "first go back through it.",
            "pre: dx = dout + layer_norm_backward(linear_backward(dout)); post: ds = layer_norm_backward(dout), "
            "dx = ds + linear_backward(ds); dparams from the two backwards.",
        ),
    ),
    Exercise(
        "feed_forward_backward",
        "feed_forward_forward",
        ("dx", "dparams"),
        "(dout, cache)",
        """Gradient of the feed-forward block y = relu(x W1^T + b1) W2^T + b2.

            dout: (..., D); cache: FeedForwardCache(first, activation, second).
            Returns (dx (..., D), dparams): a dict with the keys w1, b1, w2, b2.""",
        params=True,
        cases=_cases_feed_forward,
        hints=(
            "Three steps forward (linear, relu, linear): three steps back, in reverse order.",
            "dh, dw2, db2 = linear_backward(dout, cache.second); dh = relu_backward(dh, cache.activation); "
            "dx, dw1, db1 = linear_backward(dh, cache.first).",
        ),
    ),
    Exercise(
        "encoder_block_backward",
        "encoder_block_forward",
        ("dx", "dparams"),
        "(dout, cache)",
        """Gradient of a pre-norm encoder block: x = x + SelfAttention(norm_1(x)), y = x +
            FeedForward(norm_2(x)).

            dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, norm_2, feed_forward).
            Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, w_qkv, w_o,
            ln2_gamma, ln2_beta, w1, b1, w2, b2.""",
        params=True,
        cases=_cases_encoder_block,
        hints=(
            "Read the forward bottom-up: the feed-forward residual first, then the attention residual; your "
            "feed_forward_backward and multi_head_self_attention_backward do the branches.",
            "At each residual dx = the gradient that arrived + what comes back through the branch (its norm "
            "included); the self-attention's x feeds q, k and v: your multi_head_self_attention_backward adds them.",
        ),
    ),
    Exercise(
        "decoder_block_backward",
        "decoder_block_forward",
        ("dx", "dmemory", "dparams"),
        "(dout, cache)",
        """Gradient of a pre-norm decoder block: causal self-attention, cross-attention over the
            encoder's output memory, feed-forward, each inside a residual connection.

            dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, norm_2, cross_attention,
            norm_3, feed_forward).
            Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta,
            self_w_qkv, self_w_o, ln2_gamma, ln2_beta, cross_w_qkv, cross_w_o, ln3_gamma, ln3_beta, w1,
            b1, w2, b2.""",
        params=True,
        cases=_cases_decoder_block,
        hints=(
            "Three residuals, undone in reverse: feed-forward, cross-attention, self-attention. Where does "
            "the memory enter the forward?",
            "The cross-attention's multi_head_attention_backward gives dx_q (towards x) and dx_kv: dx_kv is "
            "dmemory. Each residual adds the gradient that arrived to the branch's.",
        ),
    ),
    Exercise(
        "encoder_decoder_backward",
        "encoder_decoder_forward",
        ("dparams",),
        "(dloss, cache)",
        """Gradient of the whole Transformer's loss with respect to every parameter.

            dloss: a float; cache: EncoderDecoderCache(src_embedding, tgt_embedding, encoder (a list of
            EncoderBlockCache), encoder_norm, decoder (a list of DecoderBlockCache), decoder_norm,
            projection, loss, n_layers).
            Returns dparams: a dict with every key of params (src_table, tgt_table, enc{i}_*, dec{i}_*,
            enc_norm_*, dec_norm_*).""",
        params=True,
        cases=_cases_encoder_decoder,
        hints=(
            "Go back from the loss: cross-entropy, the projection (linear_backward with tgt_table), the final "
            "norm, the decoder blocks in reverse, the target embedding; then the encoder. Which tensors does "
            "the forward use more than once?",
            "The memory is used by every decoder layer: add up their dmemory before going into the encoder's "
            "final norm. tgt_table is used twice: add the projection's and the embedding's gradients.",
            "Positional encoding passes gradients unchanged. Name each block's gradients with its prefix "
            "(enc{i}_, dec{i}_) as params does.",
        ),
    ),
)
