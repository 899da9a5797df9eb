"""The blocks' exercises (the residual connection, the feed-forward, the embedding with positions,
the encoder and decoder blocks, pre- and post-norm, with multi-head or latent attention, the two
stacks, the projection with its loss, the whole encoder-decoder): each declared once, with its
cases, the mistakes those cases recognise and its hints."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy

from ... import functional
from ...backend import Array, get_array_module
from .. import blocks
from .exercise import Case, Exercise, normal, random_params
from .layer_exercises import _repeated_rows, cross_entropy_candidates

Candidates = dict[str, list[tuple[Array, str]]]


# ------------------------------------------------------------------------------------------------
# the residuals' mistakes: a block's dx with one residual (or every one) undone wrongly


class Residual:
    """One residual of a block, for its mistakes: the branch's backward (dout -> dx), the norm's
    cache, the branch's dropout cache, and other backwards of the branch a learner may write
    (``variants``: kind -> the branch's backward with that mistake)."""

    def __init__(
        self, branch: Callable, norm: Any, dropped: Any, variants: dict[str, Callable] | None = None
    ) -> None:
        self.branch, self.norm, self.dropped, self.variants = branch, norm, dropped, variants or {}


RESIDUAL_MISTAKES = {  # a kind of mistake at one residual -> the sentence that names it
    "dropped": "residual_dropped",  # the skip's gradient lost
    "branch": "residual_dropped",  # the branch's gradient lost
    "norm_skipped": "norm_path",  # the norm's backward left out
    "norm_after_sum": "norm_path",  # pre-norm undone as post-norm (the norm after the sum)
    "post_order": "norm_path",  # pre-norm undone as post-norm (the norm's backward first, on both paths)
    "norm_first_skip": "norm_path",  # post-norm undone as pre-norm (the norm on the branch)
    "skip_unnormed": "norm_path",  # post-norm: the norm's backward on the branch's path only
    "dropout_skipped": "dropout_skipped",
    "dropout_unscaled": "dropout_scale",
    "queries_only": "paths",  # a self-attention's x given its queries' gradient only
    "keys_values_only": "paths",
}


def through_residuals(
    dout: Any, residuals: list[Residual], norm_first: bool, mistakes: dict[int, str]
) -> Any:
    """dx back through a block's residuals (in forward order), the last first, with the mistake
    ``mistakes[i]`` (a key of RESIDUAL_MISTAKES) at residual i; the textbook's dx without mistakes."""
    dx = dout
    for i in reversed(range(len(residuals))):
        residual, kind = residuals[i], mistakes.get(i, "right")
        branch = residual.variants.get(kind, residual.branch)

        def norm(d: Any, residual: Residual = residual) -> Any:
            return functional.layer_norm_backward(d, residual.norm)[0]

        def drop(d: Any, residual: Residual = residual, kind: str = kind) -> Any:
            if kind == "dropout_skipped" or residual.dropped is None:
                return d
            return (
                d * residual.dropped.keep
                if kind == "dropout_unscaled"
                else functional.dropout_backward(d, residual.dropped)
            )

        if kind == "branch":
            dx = dx if norm_first else norm(dx)
        elif kind == "norm_skipped":
            dx = dx + branch(drop(dx))
        elif norm_first and kind == "norm_after_sum":
            dx = norm(dx + branch(drop(dx)))
        elif norm_first and kind == "post_order":
            ds = norm(dx)
            dx = ds + branch(drop(ds))
        elif not norm_first and kind == "norm_first_skip":
            dx = dx + norm(branch(drop(dx)))
        elif norm_first:
            dh = norm(branch(drop(dx)))
            dx = dh if kind == "dropped" else dx + dh
        else:
            ds = norm(dx)
            dh = branch(drop(ds))
            dx = dh if kind == "dropped" else dx + dh if kind == "skip_unnormed" else ds + dh
    return dx


def residual_mistakes(dout: Any, residuals: list[Residual], norm_first: bool) -> list[tuple[Array, str]]:
    """A block's dx with each residual's typical mistakes, one residual at a time, and with every
    residual undone in the other norm order, or without its dropout, at once."""
    found = [
        (through_residuals(dout, residuals, norm_first, {i: kind}), key)
        for i in range(len(residuals))
        for kind, key in RESIDUAL_MISTAKES.items()
    ]
    other_order = ("norm_after_sum", "post_order") if norm_first else ("norm_first_skip", "skip_unnormed")
    everywhere = {**dict.fromkeys(other_order, "norm_path"), "dropout_skipped": "dropout_skipped",
                  "dropout_unscaled": "dropout_scale"}  # fmt: skip
    for kind, key in everywhere.items():
        found.append(
            (through_residuals(dout, residuals, norm_first, dict.fromkeys(range(len(residuals)), kind)), key)
        )
    return found


def _self_attention_residual(cache: Any, norm: Any, dropped: Any) -> Residual:
    """The self-attention's residual: x feeds the queries and the keys and values (their gradients add)."""
    whole: Callable[..., tuple[Any, ...]] = (
        functional.multi_head_latent_attention_backward
        if isinstance(cache, functional.LatentAttentionCache)
        else functional.multi_head_attention_backward
    )

    def branch(d: Any) -> Any:
        dx_q, dx_kv = whole(d, cache)[:2]
        return dx_q + dx_kv

    variants = {
        "queries_only": lambda d: whole(d, cache)[0],
        "keys_values_only": lambda d: whole(d, cache)[1],
    }
    return Residual(branch, norm, dropped, variants)


def _cross_attention_residual(cache: Any, norm: Any, dropped: Any) -> Residual:
    if isinstance(cache, functional.LatentAttentionCache):
        return Residual(lambda d: functional.multi_head_latent_attention_backward(d, cache)[0], norm, dropped)
    return Residual(lambda d: functional.multi_head_attention_backward(d, cache)[0], norm, dropped)


def _feed_forward_residual(cache: Any, norm: Any, dropped: Any) -> Residual:
    return Residual(lambda d: blocks.feed_forward_backward(d, cache)[0], norm, dropped)


def encoder_block_residuals(cache: Any) -> list[Residual]:
    return [
        _self_attention_residual(cache.attention, cache.norm_1, cache.dropout_1),
        _feed_forward_residual(cache.feed_forward, cache.norm_2, cache.dropout_2),
    ]


def decoder_block_residuals(cache: Any) -> list[Residual]:
    return [
        _self_attention_residual(cache.self_attention, cache.norm_1, cache.dropout_1),
        _cross_attention_residual(cache.cross_attention, cache.norm_2, cache.dropout_2),
        _feed_forward_residual(cache.feed_forward, cache.norm_3, cache.dropout_3),
    ]


# ------------------------------------------------------------------------------------------------
# the residual connection and the feed-forward block


def _residual_candidates(cache: Any, dout: Any) -> Candidates:
    norm_cache, sublayer, dropped, norm_first = cache
    residual = Residual(lambda d: functional.linear_backward(d, sublayer)[0], norm_cache, dropped)
    return {"x": residual_mistakes(dout, [residual], norm_first)}


def _cases_residual(rng: numpy.random.Generator) -> list[Case]:
    def case(label: str, shape: tuple[int, ...], norm_first: bool, dropout: float = 0.0) -> Case:
        width = shape[-1]
        params = random_params(rng, gamma=(width,), beta=(width,), weight=(width, width), bias=(width,))
        inputs = {"x": normal(rng, *shape), "params": params, "norm_first": norm_first, "dropout": dropout}
        return Case(
            label,
            inputs,
            ("x", *[f"params.{key}" for key in params]),
            seed=int(rng.integers(1 << 30)) if dropout else None,
            candidates=_residual_candidates,
        )

    return [
        case("x (2, 3, 4), pre-norm", (2, 3, 4), True),
        case("x (2, 3, 4), post-norm", (2, 3, 4), False),
        case("x (3, 5), post-norm, dropout 0.3", (3, 5), False, 0.3),
        case("x (1, 1, 4), pre-norm", (1, 1, 4), True),
        case("x (2, 2, 2, 3), pre-norm, dropout 0.3", (2, 2, 2, 3), True, 0.3),
    ]


def _feed_forward_candidates(cache: Any, dout: Any) -> Candidates:
    """dx with the hidden units' dropout left out of the backward, or its scale."""
    if cache.dropout is None:
        return {}
    dhidden = functional.linear_backward(dout, cache.second)[0]
    found = []
    for dropped, key in ((dhidden, "dropout_skipped"), (dhidden * cache.dropout.keep, "dropout_scale")):
        dx = functional.linear_backward(functional.relu_backward(dropped, cache.activation), cache.first)[0]
        found.append((dx, key))
    return {"x": found}


def _cases_feed_forward(rng: numpy.random.Generator) -> list[Case]:
    def case(label: str, shape: tuple[int, ...], hidden: int, dropout: float = 0.0) -> Case:
        width = shape[-1]
        params = random_params(rng, w1=(hidden, width), b1=(hidden,), w2=(width, hidden), b2=(width,))
        return Case(
            label,
            {"x": normal(rng, *shape), "params": params, "dropout": dropout},
            ("x", "params.w1", "params.b1", "params.w2", "params.b2"),
            seed=int(rng.integers(1 << 30)) if dropout else None,
            candidates=_feed_forward_candidates,
        )

    return [
        case("x (2, 3, 4), d_ff 6", (2, 3, 4), 6),
        case("x (5, 4), d_ff 6, dropout 0.3", (5, 4), 6, 0.3),
        case("x (1, 1, 4), d_ff 2", (1, 1, 4), 2),
        case("x (2, 1, 2, 4), d_ff 5, dropout 0.3", (2, 1, 2, 4), 5, 0.3),
    ]


# ------------------------------------------------------------------------------------------------
# the embedding with positions


def _embedding_with_positions_candidates(cache: Any, dout: Any) -> Candidates:
    """dtable without the dropout's backward, or its scale; with the positional table added; with
    repeated ids overwritten."""
    xp = get_array_module()
    embedding, dropped = cache
    through = functional.dropout_backward(dout, dropped)
    table = functional.sinusoidal_table(dout.shape[1], dout.shape[2], numpy.float64)
    found = [(functional.embedding_backward(through + xp.asarray(table), embedding), "positional_added")]
    overwritten = xp.zeros(embedding.table_shape)
    overwritten[embedding.ids.reshape(-1)] = through.reshape(-1, embedding.table_shape[1]) * embedding.scale
    found.append((overwritten, "repeated_ids"))
    if dropped is not None:
        found.append((functional.embedding_backward(dout, embedding), "dropout_skipped"))
        found.append((functional.embedding_backward(dout * dropped.keep, embedding), "dropout_scale"))
    return {"params.table": found}


def _cases_embedding_with_positions(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()
    cases = []
    for label, ids, vocab, width, dropout in (
        ("ids (2, 4) with repeats, table (5, 6), dropout 0.2", [[1, 3, 1, 0], [3, 3, 2, 4]], 5, 6, 0.2),
        ("ids (1, 3), table (4, 4)", [[2, 0, 2]], 4, 4, 0.0),
        ("ids (2, 1), table (3, 2), dropout 0.5", [[1], [1]], 3, 2, 0.5),
    ):
        token_ids = xp.asarray(ids)
        cases.append(
            Case(
                label,
                {"ids": token_ids, "params": {"table": normal(rng, vocab, width)}, "dropout": dropout},
                ("params.table",),
                seed=int(rng.integers(1 << 30)) if dropout else None,
                factors={
                    "params.table": [
                        (1 / math.sqrt(width), "embedding_scale"),
                        (math.sqrt(width), "embedding_scale_twice"),
                    ]
                },
                regions={"params.table": [(_repeated_rows(token_ids, vocab, width), "repeated_ids")]},
                candidates=_embedding_with_positions_candidates,
            )
        )
    return cases


# ------------------------------------------------------------------------------------------------
# the encoder and decoder blocks


def _padded(batch: int, length: int, padded_row: int) -> Any:
    """A (B, 1, 1, S) key mask, its last key padding in row ``padded_row``."""
    mask = numpy.ones((batch, 1, 1, length), dtype=bool)
    mask[padded_row, ..., length - 1 :] = False
    return get_array_module().asarray(mask)


def _block_candidates(residuals: Callable[[Any], list[Residual]]) -> Callable[[Any, Any], Candidates]:
    def candidates(cache: Any, dout: Any) -> Candidates:
        return {"x": residual_mistakes(dout, residuals(cache), cache.norm_first)}

    return candidates


BLOCK_SETTINGS = (  # (label, batch, length, memory length, width, heads, attention, norm_first, dropout, masked)
    ("x (2, 3, 8), 2 heads, pre-norm, a padded key", 2, 3, 4, 8, 2, "mha", True, 0.0, True),
    ("x (2, 3, 8), 2 heads, post-norm, dropout 0.2", 2, 3, 4, 8, 2, "mha", False, 0.2, True),
    ("x (2, 3, 8), latent attention, 2 heads, pre-norm, dropout 0.2", 2, 3, 2, 8, 2, "mla", True, 0.2, True),
    ("x (1, 2, 4), latent attention, 1 head, post-norm, no mask", 1, 2, 3, 4, 1, "mla", False, 0.0, False),
    ("x (1, 1, 4), 1 head, pre-norm, no mask", 1, 1, 1, 4, 1, "mha", True, 0.0, False),
)


def _cases_encoder_block(rng: numpy.random.Generator) -> list[Case]:
    cases = []
    for label, b, s, _, width, heads, attention, norm_first, dropout, masked in BLOCK_SETTINGS:
        params = blocks.block_params(lambda *shape: normal(rng, *shape) * 0.5, width, 2 * width, attention)
        inputs = {"x": normal(rng, b, s, width), "params": params, "mask": _padded(b, s, b - 1) if masked else None,
                  "n_heads": heads, "norm_first": norm_first, "dropout": dropout}  # fmt: skip
        cases.append(
            Case(
                label,
                inputs,
                ("x", *[f"params.{key}" for key in params]),
                seed=int(rng.integers(1 << 30)) if dropout else None,
                candidates=_block_candidates(encoder_block_residuals),
                max_entries=24,
            )
        )
    return cases


def _causal(length: int) -> Any:
    return get_array_module().asarray(numpy.tril(numpy.ones((length, length), dtype=bool))[None, None])


def _cases_decoder_block(rng: numpy.random.Generator) -> list[Case]:
    cases = []
    for label, b, t, s, width, heads, attention, norm_first, dropout, masked in BLOCK_SETTINGS:
        label = label.replace(f"x ({b}, {t}, {width})", f"x ({b}, {t}, {width}), memory ({b}, {s}, {width})")
        params = blocks.block_params(
            lambda *shape: normal(rng, *shape) * 0.5, width, 2 * width, attention, decoder=True
        )
        inputs = {
            "x": normal(rng, b, t, width),
            "memory": normal(rng, b, s, width),
            "params": params,
            "src_mask": _padded(b, s, 0) if masked else None,
            "tgt_mask": _causal(t) if masked else None,
            "n_heads": heads,
            "norm_first": norm_first,
            "dropout": dropout,
        }
        cases.append(
            Case(
                label.replace("a padded key", "causal, a padded source"),
                inputs,
                ("x", "memory", *[f"params.{key}" for key in params]),
                seed=int(rng.integers(1 << 30)) if dropout else None,
                candidates=_block_candidates(decoder_block_residuals),
                max_entries=24,
            )
        )
    return cases


# ------------------------------------------------------------------------------------------------
# the stacks


def _encoder_stack_candidates(cache: Any, dout: Any) -> Candidates:
    """dx without the final norm's backward, or with the layers undone in the forward's order."""
    normed = functional.layer_norm_backward(dout, cache.norm)[0]
    found = []
    for start, order, key in ((dout, "backward", "final_norm_skipped"), (normed, "forward", "layer_order")):
        dx = start
        layers = cache.layers if order == "forward" else cache.layers[::-1]
        for layer in layers:
            dx = blocks.encoder_block_backward(dx, layer)[0]
        found.append((dx, key))
    return {"x": found}


def _decoder_stack_candidates(cache: Any, dout: Any) -> Candidates:
    """dx and dmemory without the final norm's backward, or with the layers in the forward's order;
    dmemory from the first or the last layer only."""
    normed = functional.layer_norm_backward(dout, cache.norm)[0]
    found: Candidates = {"x": [], "memory": []}
    for start, order, key in ((dout, "backward", "final_norm_skipped"), (normed, "forward", "layer_order")):
        dx, dmemory = start, 0.0
        for layer in cache.layers if order == "forward" else cache.layers[::-1]:
            dx, dmemory_i, _ = blocks.decoder_block_backward(dx, layer)
            dmemory = dmemory + dmemory_i
        found["x"].append((dx, key))
        found["memory"].append((dmemory, key))
    dx, kept = normed, []
    for layer in cache.layers[::-1]:
        dx, dmemory_i, _ = blocks.decoder_block_backward(dx, layer)
        kept.append(dmemory_i)
    found["memory"] += [(kept[0], "memory_one_layer"), (kept[-1], "memory_one_layer")]
    return found


def _stack_params(rng: numpy.random.Generator, width: int, layers: int, attention: str, decoder: bool) -> Any:
    stem = "dec" if decoder else "enc"
    params: dict[str, Array] = {}
    for i in range(layers):
        params |= blocks.block_params(
            lambda *shape: normal(rng, *shape) * 0.5, width, 2 * width, attention, decoder, f"{stem}{i}_"
        )
    params |= random_params(rng, **{f"{stem}_norm_gamma": (width,), f"{stem}_norm_beta": (width,)})
    return params


STACK_SETTINGS = (  # (label, batch, length, memory length, width, layers, heads, attention, norm_first, dropout)
    ("x (2, 3, 8), 2 layers, 2 heads, pre-norm, dropout 0.1", 2, 3, 4, 8, 2, 2, "mha", True, 0.1),
    ("x (1, 2, 4), 2 layers, latent attention, post-norm", 1, 2, 3, 4, 2, 1, "mla", False, 0.0),
    ("x (1, 2, 4), 1 layer, pre-norm", 1, 2, 2, 4, 1, 2, "mha", True, 0.0),
    ("x (1, 2, 4), 3 layers, pre-norm", 1, 2, 3, 4, 3, 1, "mha", True, 0.0),  # a sum over layers, not a pair
)


def _cases_encoder_stack(rng: numpy.random.Generator) -> list[Case]:
    cases = []
    for label, b, s, _, width, layers, heads, attention, norm_first, dropout in STACK_SETTINGS:
        params = _stack_params(rng, width, layers, attention, decoder=False)
        inputs = {"x": normal(rng, b, s, width), "params": params, "mask": _padded(b, s, b - 1),
                  "n_layers": layers, "n_heads": heads, "norm_first": norm_first, "dropout": dropout}  # fmt: skip
        cases.append(
            Case(
                label,
                inputs,
                ("x", *[f"params.{key}" for key in params]),
                seed=int(rng.integers(1 << 30)) if dropout else None,
                candidates=_encoder_stack_candidates,
                max_entries=12 if layers < 3 else 4,
            )
        )
    return cases


def _cases_decoder_stack(rng: numpy.random.Generator) -> list[Case]:
    cases = []
    for label, b, t, s, width, layers, heads, attention, norm_first, dropout in STACK_SETTINGS:
        params = _stack_params(rng, width, layers, attention, decoder=True)
        inputs = {"x": normal(rng, b, t, width), "memory": normal(rng, b, s, width), "params": params,
                  "src_mask": _padded(b, s, 0), "tgt_mask": _causal(t), "n_layers": layers, "n_heads": heads,
                  "norm_first": norm_first, "dropout": dropout}  # fmt: skip
        cases.append(
            Case(
                label.replace(f"x ({b}, {t}, {width})", f"x ({b}, {t}, {width}), memory ({b}, {s}, {width})"),
                inputs,
                ("x", "memory", *[f"params.{key}" for key in params]),
                seed=int(rng.integers(1 << 30)) if dropout else None,
                factors={"memory": [(1 / layers, "memory_averaged")]} if layers > 1 else {},
                candidates=_decoder_stack_candidates,
                max_entries=12 if layers < 3 else 4,
            )
        )
    return cases


# ------------------------------------------------------------------------------------------------
# the projection with the loss, and the whole encoder-decoder


def _projection_loss_candidates(dloss: float) -> Callable[[Any, Any], Candidates]:
    """dx, dweight and dbias through each of the loss's known mistakes."""

    def candidates(cache: Any, dout: Any) -> Candidates:
        found: Candidates = {"x": [], "params.weight": [], "params.bias": []}
        for dlogits, key in cross_entropy_candidates(cache.loss, dloss)["logits"]:
            dx, dweight, dbias = functional.linear_backward(dlogits, cache.projection)
            found["x"].append((dx, key))
            found["params.weight"].append((dweight, key))
            found["params.bias"].append((dbias, key))
        return found

    return candidates


def _cases_projection_loss(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()
    cases = []
    for label, targets, vocab, width, pad, smoothing, dloss in (
        ("x (2, 3, 4), targets (2, 3) with padding, V 5, smoothing 0.1", [[2, 4, 0], [1, 0, 0]], 5, 4, 0, 0.1, 1.3),
        ("x (1, 2, 3), no padding, V 4, no smoothing", [[3, 1]], 4, 3, 0, 0.0, 0.7),
        ("x (2, 1, 2), V 3, smoothing 0.2", [[2], [1]], 3, 2, 0, 0.2, 2.0),
    ):  # fmt: skip
        shape = numpy.asarray(targets).shape
        n_valid = int((numpy.asarray(targets) != pad).sum())
        twice = [(dloss, "upstream_twice"), (1 / n_valid, "token_count_twice")]  # a constant of its own again
        params = random_params(rng, weight=(vocab, width), bias=(vocab,))
        inputs = {"x": normal(rng, *shape, width), "targets": xp.asarray(targets), "params": params,
                  "pad_id": pad, "label_smoothing": smoothing}  # fmt: skip
        cases.append(
            Case(
                label,
                inputs,
                ("x", "params.weight", "params.bias"),
                dloss=dloss,
                factors=dict.fromkeys(("x", "params.weight", "params.bias"), twice),
                candidates=_projection_loss_candidates(dloss),
            )
        )
    return cases


def _whole_candidates(dloss: float) -> Callable[[Any, Any], Candidates]:
    """tgt_table with one of its two gradients only (the projection's or the target embedding's)."""

    def candidates(cache: Any, dout: Any) -> Candidates:
        dy, output = blocks.projection_loss_backward(dloss, cache.output)
        dy = blocks.decoder_stack_backward(dy, cache.decoder)[0]
        dembedding = blocks.embedding_with_positions_backward(dy, cache.tgt_embedding)["table"]
        return {"params.tgt_table": [(output["weight"], "tied_not_added"), (dembedding, "tied_not_added")]}

    return candidates


def _cases_encoder_decoder(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()
    cases = []
    for label, src, tgt_in, tgt_out, vocab, width, layers, heads, smoothing, dloss, (kind, norm_first, p) in (
        (
            "src (2, 4) padded, tgt (2, 4) padded, D 8, 2 layers, 2 heads, pre-norm, dropout 0.1, smoothing 0.1",
            [[1, 2, 3, 0], [4, 5, 6, 2]],
            [[1, 2, 3, 4], [1, 4, 0, 0]],
            [[2, 3, 5, 1], [4, 5, 0, 0]],
            (7, 6),
            8,
            2,
            2,
            0.1,
            1.0,
            ("mha", True, 0.1),
        ),
        (
            "src (1, 2), tgt (1, 2), D 4, 1 layer, 1 head, latent attention, post-norm",
            [[3, 3]],
            [[1, 2]],
            [[2, 2]],
            (4, 3),
            4,
            1,
            1,
            0.0,
            0.5,
            ("mla", False, 0.0),
        ),
        (  # a sum over the layers, not a pair of them
            "src (1, 3), tgt (1, 3), D 4, 3 layers, 1 head, pre-norm, smoothing 0.1",
            [[1, 2, 3]],
            [[1, 2, 3]],
            [[2, 3, 1]],
            (5, 4),
            4,
            3,
            1,
            0.1,
            1.5,
            ("mha", True, 0.0),
        ),
    ):
        params = blocks.init_params(rng, vocab[0], vocab[1], width, 2 * width, layers, attention=kind)
        inputs = {
            "src": xp.asarray(src),
            "tgt_in": xp.asarray(tgt_in),
            "tgt_out": xp.asarray(tgt_out),
            "params": params,
            "n_layers": layers,
            "n_heads": heads,
            "pad_id": 0,
            "label_smoothing": smoothing,
            "norm_first": norm_first,
            "dropout": p,
        }
        cases.append(
            Case(
                label,
                inputs,
                tuple(f"params.{key}" for key in params),
                seed=int(rng.integers(1 << 30)) if p else None,
                dloss=dloss,
                candidates=_whole_candidates(dloss),
                max_entries=12 if layers < 3 else 2,
            )
        )
    return cases


ATTENTION_KEYS = """w_qkv (3D, D) and w_o (D, D) where {attention} is a
            MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
            where it is a LatentAttentionCache (L = D / 4)"""


BLOCK_EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        "residual_backward",
        "residual_forward",
        ("dx", "dparams"),
        "(dout, cache)",
        """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
            pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

            dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
            branch's DropoutCache (None when p = 0).
            Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
            (D, D), bias (D,).""",
        params=True,
        cases=_cases_residual,
        hints=(
            "x reaches y along two paths, the skip and the branch: where the paths join, their gradients add.",
            "Pre-norm: the norm is on the branch only. Post-norm: the norm is after the sum, so first go back "
            "through it, and both paths take its gradient. The branch's dropout mask is on the branch only.",
            "pre: dx = dout + layer_norm_backward(linear_backward(dropout_backward(dout))); post: ds = "
            "layer_norm_backward(dout), dx = ds + linear_backward(dropout_backward(ds)); dparams from the backwards.",
        ),
    ),
    Exercise(
        "feed_forward_backward",
        "feed_forward_forward",
        ("dx", "dparams"),
        "(dout, cache)",
        """Gradient of the feed-forward block y = dropout(relu(x W1^T + b1)) W2^T + b2.

            dout: (..., D); cache: FeedForwardCache(first, activation, dropout, second), dropout the
            hidden units' DropoutCache (None when p = 0).
            Returns (dx (..., D), dparams): a dict with the keys w1, b1, w2, b2.""",
        params=True,
        cases=_cases_feed_forward,
        hints=(
            "Four steps forward (linear, relu, dropout, linear): four steps back, in reverse order.",
            "dh, dw2, db2 = linear_backward(dout, cache.second); dh = dropout_backward(dh, cache.dropout); "
            "dh = relu_backward(dh, cache.activation); dx, dw1, db1 = linear_backward(dh, cache.first).",
        ),
    ),
    Exercise(
        "embedding_with_positions_backward",
        "embedding_with_positions_forward",
        ("dparams",),
        "(dout, cache)",
        """Gradient of the input embedding y = dropout(E[ids] * sqrt(D) + PE[:T]) with respect to its table.

            dout: (B, T, D); cache: EmbeddingWithPositionsCache(embedding, dropout), dropout a
            DropoutCache (None when p = 0).
            Returns dparams: a dict with the key table, (V, D).""",
        params=True,
        cases=_cases_embedding_with_positions,
        hints=(
            "Three steps forward (the lookup scaled by sqrt(D), the positions added, dropout), undone in "
            "reverse; the positions are a constant, so the gradient passes them unchanged.",
            "dropout_backward first, then your embedding_backward (the scale sqrt(D) and the repeated ids are "
            "its business, once); return {'table': ...}.",
        ),
    ),
    Exercise(
        "encoder_block_backward",
        "encoder_block_forward",
        ("dx", "dparams"),
        "(dout, cache)",
        f"""Gradient of an encoder block: self-attention then feed-forward, each inside a residual
            connection with its own norm and its branch through dropout; pre-norm x = x +
            dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

            dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
            dropout_2, norm_first).
            Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
            w1, b1, w2, b2 and the attention's: {ATTENTION_KEYS.format(attention="cache.attention")}.""",
        params=True,
        cases=_cases_encoder_block,
        hints=(
            "Read the forward bottom-up: the feed-forward residual first, then the attention residual; where "
            "a residual's norm sits (before the branch, or after the sum) decides when its backward runs.",
            "Pre-norm: dx = dout + norm's backward of the branch's backward of dropout_backward(dout). Post-norm: "
            "ds = the norm's backward of dout first, then dx = ds + the branch's backward of dropout_backward(ds). "
            "The self-attention's x feeds q, k and v (or the latent): its self-attention backward adds them.",
        ),
    ),
    Exercise(
        "decoder_block_backward",
        "decoder_block_forward",
        ("dx", "dmemory", "dparams"),
        "(dout, cache)",
        f"""Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
            output memory, feed-forward, each inside a residual connection with its own norm and its
            branch through dropout, pre-norm or post-norm (cache.norm_first).

            dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
            cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
            Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
            (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): {
            ATTENTION_KEYS.format(attention="cache.self_attention (cache.cross_attention)")
        }.""",
        params=True,
        cases=_cases_decoder_block,
        hints=(
            "Three residuals, undone in reverse: feed-forward, cross-attention, self-attention. Where does "
            "the memory enter the forward?",
            "The cross-attention's backward gives dx_q (towards x) and dx_kv: dx_kv is dmemory. Each residual "
            "adds the gradient that arrived to the branch's (post-norm: after the norm's backward).",
        ),
    ),
    Exercise(
        "encoder_stack_backward",
        "encoder_stack_forward",
        ("dx", "dparams"),
        "(dout, cache)",
        """Gradient of the encoder: n_layers encoder blocks, then the final layer norm.

            dout: (B, S, D); cache: EncoderStackCache(layers (a list of EncoderBlockCache), norm).
            Returns (dx (B, S, D), dparams): a dict with the keys enc{i}_* (layer i's
            encoder_block_backward keys) and enc_norm_gamma, enc_norm_beta.""",
        params=True,
        cases=_cases_encoder_stack,
        hints=(
            "Undone last first: the final norm came last in the forward, so its backward comes first; then "
            "the layers, from the last to the first.",
            "The last layer is handed the norm's dx, each layer below it the dx the layer above returned. Name "
            "layer i's gradients with the prefix enc{i}_.",
        ),
    ),
    Exercise(
        "decoder_stack_backward",
        "decoder_stack_forward",
        ("dx", "dmemory", "dparams"),
        "(dout, cache)",
        """Gradient of the decoder: n_layers decoder blocks over the same memory, then the final layer norm.

            dout: (B, T, D); cache: DecoderStackCache(layers (a list of DecoderBlockCache), norm).
            Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys dec{i}_* (layer i's
            decoder_block_backward keys) and dec_norm_gamma, dec_norm_beta.""",
        params=True,
        cases=_cases_decoder_stack,
        hints=(
            "The memory is an input of every layer, not of the first one only: its gradient is the sum of "
            "every layer's dmemory.",
            "The final norm's backward first, then the layers from the last to the first, each handed the dx "
            "the layer above returned; add up every layer's dmemory. Name layer i's gradients with the prefix "
            "dec{i}_.",
        ),
    ),
    Exercise(
        "projection_loss_backward",
        "projection_loss_forward",
        ("dx", "dparams"),
        "(dloss, cache)",
        """Gradient of loss = cross_entropy(x W^T + b, targets), the mean label-smoothed cross-entropy
            over the non-padding targets.

            dloss: a float; cache: ProjectionLossCache(projection, loss).
            Returns (dx (B, T, D), dparams): a dict with the keys weight (V, D), bias (V,).""",
        params=True,
        cases=_cases_projection_loss,
        hints=(
            "Two steps: the loss of the logits, the logits of x. Which of your layer backwards undo each?",
            "dlogits = cross_entropy_backward(dloss, cache.loss) (it keeps the smoothing, the padding and the "
            "mean), then linear_backward(dlogits, cache.projection).",
        ),
    ),
    Exercise(
        "encoder_decoder_backward",
        "encoder_decoder_forward",
        ("dparams",),
        "(dloss, cache)",
        """Gradient of the whole Transformer's loss with respect to every parameter.

            dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
            output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
            DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
            Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
            enc_norm_*, dec{i}_*, dec_norm_*).""",
        params=True,
        cases=_cases_encoder_decoder,
        hints=(
            "It assembles the rungs above, and the forward uses two tensors more than once: the encoder "
            "output's gradient is what the decoder stack returns for the memory, and tgt_table (the target "
            "embedding and the projection) takes both its gradients, added.",
            "Go back from the loss: the projection with its loss, the decoder stack, the target embedding; "
            "then the encoder stack (handed the decoder stack's dmemory) and the source embedding.",
            "The stacks' dparams already carry the enc{i}_ and dec{i}_ names; proj_bias is the projection's bias.",
        ),
    ),
)
