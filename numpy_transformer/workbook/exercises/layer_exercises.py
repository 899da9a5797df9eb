"""The layers' exercises, easy to hard: each declared once, with its cases, the mistakes those
cases recognise and its hints."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy

from ... import functional
from ...backend import Array, get_array_module, to_numpy
from .exercise import Case, Exercise, away_from_zero, normal


def _positional_candidates(
    table: Array, start: int
) -> Callable[[Any, Any], dict[str, list[tuple[Array, str]]]]:
    """dx zeroed, or with the table's rows the forward added added again."""

    def candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
        rows = table[start : start + dout.shape[1]]
        return {
            "x": [(get_array_module().zeros_like(dout), "positional_zero"), (dout + rows, "positional_added")]
        }

    return candidates


def _cases_positional_encoding(rng: numpy.random.Generator) -> list[Case]:
    table = functional.sinusoidal_table(16, 6, numpy.float64)
    return [
        Case(
            "x (2, 3, 6), start 0",
            {"x": normal(rng, 2, 3, 6), "table": table},
            ("x",),
            candidates=_positional_candidates(table, 0),
        ),
        Case(
            "x (1, 1, 6), start 5",
            {"x": normal(rng, 1, 1, 6), "table": table, "start": 5},
            ("x",),
            candidates=_positional_candidates(table, 5),
        ),
    ]


def _relu_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    xp = get_array_module()
    return {
        "x": [
            (dout, "relu_unmasked"),
            (dout * (dout > 0), "relu_mask"),
            (xp.where(cache, 0.0, dout), "relu_inverted"),
        ]
    }


def _cases_relu(rng: numpy.random.Generator) -> list[Case]:
    return [
        Case("x (3, 4)", {"x": away_from_zero(rng, 3, 4)}, ("x",), candidates=_relu_candidates),
        Case("x (2, 1, 5)", {"x": away_from_zero(rng, 2, 1, 5)}, ("x",), candidates=_relu_candidates),
    ]


def _dropout_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    if cache is None:
        return {}
    return {
        "x": [
            (dout, "dropout_mask"),
            (dout / cache.keep_prob, "dropout_mask"),
            (dout * cache.keep * cache.keep_prob, "dropout_multiplied"),
        ]
    }


def _cases_dropout(rng: numpy.random.Generator) -> list[Case]:
    factors = {"x": [(1 - 0.25, "dropout_scale")]}
    return [
        Case(
            "x (3, 5), p 0.25, training",
            {"x": normal(rng, 3, 5), "p": 0.25, "training": True},
            ("x",),
            seed=11,
            factors=factors,
            candidates=_dropout_candidates,
        ),
        Case(
            "x (2, 1, 4), p 0.5, training",
            {"x": normal(rng, 2, 1, 4), "p": 0.5, "training": True},
            ("x",),
            seed=12,
            factors={"x": [(0.5, "dropout_scale")]},
            candidates=_dropout_candidates,
        ),
        Case(
            "x (3, 4), p 0.25, evaluation",
            {"x": normal(rng, 3, 4), "p": 0.25, "training": False},
            ("x",),
            seed=13,
        ),
        Case(
            "x (1, 1), p 0, training", {"x": normal(rng, 1, 1), "p": 0.0, "training": True}, ("x",), seed=14
        ),
    ]


def _cases_linear(rng: numpy.random.Generator) -> list[Case]:
    return [
        Case(
            "x (2, 3, 4), weight (5, 4), bias",
            {"x": normal(rng, 2, 3, 4), "weight": normal(rng, 5, 4), "bias": normal(rng, 5)},
            ("x", "weight", "bias"),
        ),
        Case(
            "x (4, 3), weight (2, 3), no bias",
            {"x": normal(rng, 4, 3), "weight": normal(rng, 2, 3)},
            ("x", "weight", ""),
        ),
        Case(
            "x (2, 2, 3, 4), weight (3, 4), bias",
            {"x": normal(rng, 2, 2, 3, 4), "weight": normal(rng, 3, 4), "bias": normal(rng, 3)},
            ("x", "weight", "bias"),
        ),
        Case(
            "x (4, 3), weight (2, 3), bias",
            {"x": normal(rng, 4, 3), "weight": normal(rng, 2, 3), "bias": normal(rng, 2)},
            ("x", "weight", "bias"),
        ),
        Case(
            "x (1, 1, 3), weight (6, 3), bias",
            {"x": normal(rng, 1, 1, 3), "weight": normal(rng, 6, 3), "bias": normal(rng, 6)},
            ("x", "weight", "bias"),
        ),
    ]


def _repeated_rows(ids: Any, vocab: int, width: int) -> Array:
    counts = numpy.bincount(numpy.asarray(to_numpy(ids)).reshape(-1), minlength=vocab)
    return numpy.repeat((counts > 1)[:, None], width, axis=1)


def _cases_embedding(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()
    cases = []
    for label, ids, vocab, width in (
        ("ids (2, 4) with repeats, table (5, 6)", [[1, 3, 1, 0], [3, 3, 2, 4]], 5, 6),
        ("ids (1, 1), table (3, 4)", [[2]], 3, 4),
        ("ids (1, 5), one sentence with repeats, table (4, 3)", [[2, 0, 2, 2, 1]], 4, 3),
        ("ids (2, 3) all one token, table (4, 2)", [[1, 1, 1], [1, 1, 1]], 4, 2),
    ):
        token_ids = xp.asarray(ids)
        cases.append(
            Case(
                label,
                {"ids": token_ids, "table": normal(rng, vocab, width)},
                ("table",),
                factors={"table": [(1 / math.sqrt(width), "embedding_scale")]},
                regions={"table": [(_repeated_rows(token_ids, vocab, width), "repeated_ids")]},
            )
        )
    return cases


def _softmax_variants(dout: Any, y: Any) -> list[tuple[Array, str]]:
    """softmax_backward with one known mistake at a time: the row's term left out, only the
    Jacobian's diagonal, the row's sum unweighted by y, the sum along another axis."""
    found = [
        (y * dout, "softmax_row_sum"),
        (y * (1 - y) * dout, "softmax_diagonal"),
        (y * (dout - dout.sum(axis=-1, keepdims=True)), "softmax_unweighted"),
    ]
    for axis in range(y.ndim - 1):  # the row's sum taken along another axis than the last
        found.append((y * (dout - (dout * y).sum(axis=axis, keepdims=True)), "softmax_axis"))
    return found


def _softmax_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    return {"x": _softmax_variants(dout, cache)}


def _cases_softmax(rng: numpy.random.Generator) -> list[Case]:
    return [
        Case("x (3, 5)", {"x": normal(rng, 3, 5)}, ("x",), candidates=_softmax_candidates),
        Case("x (2, 1, 4)", {"x": normal(rng, 2, 1, 4)}, ("x",), candidates=_softmax_candidates),
        Case("x (4, 1), one column", {"x": normal(rng, 4, 1)}, ("x",), candidates=_softmax_candidates),
    ]


def cross_entropy_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    """dlogits with each of the loss's known mistakes: label smoothing left out, padding counted
    (in the gradient, or in the mean), the sum for the mean, dloss not multiplied in, the gradient
    with respect to the probabilities (the softmax left out), probs - one_hot alone (no smoothing,
    no padding left out, no mean), smoothing spread as eps / (V - 1) over the other classes."""
    xp = get_array_module()
    probs, targets, valid, n_valid, smoothing, shape = cache
    rows = xp.arange(probs.shape[0])
    one_hot = xp.zeros_like(probs)
    one_hot[rows, targets] = 1.0
    smoothed = (1 - smoothing) * one_hot + smoothing / probs.shape[-1]
    spread = (1 - smoothing) * one_hot + smoothing / max(probs.shape[-1] - 1, 1) * (
        1 - one_hot
    )  # eps / (V - 1)
    right = (probs - smoothed) * valid[:, None] * (dout / n_valid)
    return {
        "logits": [
            (((probs - one_hot) * (valid[:, None] * (dout / n_valid))).reshape(shape), "label_smoothing"),
            (((probs - smoothed) * (dout / n_valid)).reshape(shape), "padding_leak"),
            ((right * n_valid).reshape(shape), "token_count"),
            ((right * n_valid / probs.shape[0]).reshape(shape), "token_count_pad"),
            ((right / dout).reshape(shape), "upstream"),
            ((-smoothed / probs * valid[:, None] * (dout / n_valid)).reshape(shape), "ce_probs"),
            (((probs - one_hot) * dout).reshape(shape), "ce_plain"),  # none of the three: probs - one_hot
            (((probs - spread) * valid[:, None] * (dout / n_valid)).reshape(shape), "smoothing_convention"),
        ]
    }


def _cases_cross_entropy(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()
    cases = []
    for label, targets, vocab, pad, smoothing, dloss in (
        ("logits (2, 3, 5), padding targets, smoothing 0.1", [[2, 4, 0], [1, 0, 0]], 5, 0, 0.1, 1.3),
        ("logits (4, 3), no padding, no smoothing", [0, 2, 1, 1], 3, None, 0.0, 0.7),
        ("logits (1, 1, 4), one token, smoothing 0.2", [[3]], 4, 0, 0.2, 2.0),
    ):
        target_ids = xp.asarray(targets)
        flat = numpy.asarray(targets).reshape(-1)
        n_valid = int((flat != pad).sum()) if pad is not None else flat.size
        factors = [(float(n_valid), "token_count"), (1 / dloss, "upstream")]
        if n_valid != flat.size:
            factors.append((n_valid / flat.size, "token_count_pad"))
        padded = numpy.repeat((flat == pad)[:, None], vocab, axis=1).reshape((*numpy.shape(targets), vocab))
        cases.append(
            Case(
                label,
                {
                    "logits": normal(rng, *numpy.shape(targets), vocab),
                    "targets": target_ids,
                    "pad_id": pad,
                    "label_smoothing": smoothing,
                },
                ("logits",),
                dloss=dloss,
                factors={"logits": factors},
                regions={"logits": [(padded, "padding_leak")]},
                candidates=cross_entropy_candidates,
            )
        )
    return cases


def _layer_norm_candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    xhat, rstd, gamma = cache
    g = dout * gamma
    mean_g = g.mean(axis=-1, keepdims=True)
    mean_g_xhat = (g * xhat).mean(axis=-1, keepdims=True)
    sums = g.sum(axis=-1, keepdims=True), (g * xhat).sum(axis=-1, keepdims=True)
    no_gamma = dout - dout.mean(axis=-1, keepdims=True) - xhat * (dout * xhat).mean(axis=-1, keepdims=True)
    return {
        "x": [
            (rstd * (g - xhat * mean_g_xhat), "ln_mean"),
            (rstd * (g - mean_g), "ln_var"),
            (rstd * g, "ln_both"),
            (g - mean_g - xhat * mean_g_xhat, "ln_rstd"),
            (rstd * (g - sums[0] - xhat * sums[1]), "ln_sum"),
            (rstd * no_gamma, "ln_gamma"),
        ],
        "gamma": [(dout.reshape(-1, dout.shape[-1]).sum(axis=0), "ln_dgamma")],
    }


def _cases_layer_norm(rng: numpy.random.Generator) -> list[Case]:
    def case(label: str, shape: tuple[int, ...]) -> Case:
        width = shape[-1]
        return Case(
            label,
            {"x": normal(rng, *shape), "gamma": 1 + 0.5 * normal(rng, width), "beta": normal(rng, width)},
            ("x", "gamma", "beta"),
            candidates=_layer_norm_candidates,
        )

    return [
        case("x (2, 3, 6)", (2, 3, 6)),
        case("x (5, 3)", (5, 3)),
        case("x (1, 1, 4)", (1, 1, 4)),
        case("x (2, 2, 2, 5)", (2, 2, 2, 5)),
    ]


def _attention_variants(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
    """The textbook's attention backward with one known mistake at a time: (dq, dk, dv) for each."""
    xp = get_array_module()
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    found: dict[str, list[tuple[Array, str]]] = {"q": [], "k": [], "v": []}

    def add(key: str, dprobs: Any, masked: str = "zero", dscores: Any = None) -> None:
        dscores = functional.softmax_backward(dprobs, probs) if dscores is None else dscores
        if mask is not None and masked == "zero":
            dscores = xp.where(mask, dscores, 0.0)
        elif mask is not None and masked == "inverted":  # zeroed where a query may see the key
            dscores = xp.where(mask, 0.0, dscores)
        found["q"].append(((dscores @ k) * scale, key))
        found["k"].append(((dscores.swapaxes(-1, -2) @ q) * scale, key))
        found["v"].append((dropped.swapaxes(-1, -2) @ dout, key))

    ddropped = dout @ v.swapaxes(-1, -2)
    dprobs = functional.dropout_backward(ddropped, dropout_cache)
    if mask is not None:
        add("mask_leak", dprobs, masked="kept")
        add("mask_inverted", dprobs, masked="inverted")
    for dscores, key in _softmax_variants(dprobs, probs):  # the softmax's backward with its mistakes
        add(key, dprobs, dscores=dscores)
    if dropout_cache is not None:
        add("dropout_scale", ddropped * dropout_cache.keep)
        add("dropout_mask", ddropped)
        found["v"].append((probs.swapaxes(-1, -2) @ dout, "dropout_dv"))
    return found


def _cases_attention(rng: numpy.random.Generator) -> list[Case]:
    xp = get_array_module()

    def case(label: str, b: int, h: int, t: int, s: int, width: int, mask: Any, **extra: Any) -> Case:
        scale_factors = [(math.sqrt(width), "scale_forgotten"), (1 / math.sqrt(width), "scale_twice")]
        seed = extra.pop("seed", None)
        return Case(
            label,
            {
                "q": normal(rng, b, h, t, width),
                "k": normal(rng, b, h, s, width),
                "v": normal(rng, b, h, s, width),
                "mask": mask,
                **extra,
            },
            ("q", "k", "v"),
            seed=seed,
            factors={"q": scale_factors, "k": scale_factors},
            candidates=_attention_variants,
        )

    partly = numpy.ones((2, 1, 3, 5), dtype=bool)
    partly[0, 0, 0, 3:] = False
    partly[1, 0, 2, 1:] = False
    partly[1, 0, 1, :] = False  # a query that may see no key at all
    causal = numpy.tril(numpy.ones((4, 4), dtype=bool))[None, None]
    return [
        case(
            "q (2, 2, 3, 4), k, v (2, 2, 5, 4), rows partly and fully masked",
            2,
            2,
            3,
            5,
            4,
            xp.asarray(partly),
        ),
        case(
            "q, k, v (1, 2, 4, 3), causal mask, dropout 0.25",
            1,
            2,
            4,
            4,
            3,
            xp.asarray(causal),
            dropout_p=0.25,
            training=True,
            seed=21,
        ),
        case("q (1, 1, 1, 2), k, v (1, 1, 1, 2), no mask", 1, 1, 1, 1, 2, None),
        case(
            "q (2, 1, 2, 4), k, v (2, 1, 3, 4), no mask, dropout 0.5",
            2,
            1,
            2,
            3,
            4,
            None,
            dropout_p=0.5,
            training=True,
            seed=22,
        ),
    ]


def _split_by_reshape(x: Array, n_heads: int) -> Array:
    """(B, T, D) -> (B, H, T, K) by a reshape alone: the head axis never moved (a learner's split)."""
    batch, length, width = x.shape
    return x.reshape(batch, n_heads, length, width // n_heads)


def _merge_by_reshape(x: Array) -> Array:
    """(B, H, T, K) -> (B, T, D) by a reshape alone (a learner's merge)."""
    batch, n_heads, length, head_width = x.shape
    return x.reshape(batch, length, n_heads * head_width)


def _multi_head_parts(
    cache: Any,
    dout: Any,
    latent: bool,
    split: Callable[[Array, int], Array] = functional.split_heads,
    merge: Callable[[Array], Array] = functional.merge_heads,
) -> dict[str, Any]:
    """The textbook's attention backward, step by step (with the heads split and merged by ``split``
    and ``merge``): each input path's gradient (x_q, and x_kv along the keys' and the values' paths)
    and each stacked parameter's parts, in the forward's order."""
    dheads = functional.linear_backward(dout, cache.output)[0]
    heads = functional.attention_backward(split(dheads, cache.heads.n_heads), cache.heads.attention)
    dq, dk, dv = (merge(grad) for grad in heads)
    dx_q, dw_q, db_q = functional.linear_backward(dq, cache.q)
    if latent:
        dlatent_k, dw_kd, _ = functional.linear_backward(dk, cache.k)
        dlatent_v, dw_vd, _ = functional.linear_backward(dv, cache.v)
        dx_k = functional.linear_backward(dlatent_k, cache.latent)[0]
        dx_v = functional.linear_backward(dlatent_v, cache.latent)[0]
        dw_c = functional.linear_backward(dlatent_k + dlatent_v, cache.latent)[1]
        dw_c_k = functional.linear_backward(dlatent_k, cache.latent)[1]
        dw_c_v = functional.linear_backward(dlatent_v, cache.latent)[1]
        stacked = {"w_q_compress": [dw_q, dw_c], "w_kv_decompress": [dw_kd, dw_vd]}
        one_path = {"w_q_compress": [[dw_q, dw_c_k], [dw_q, dw_c_v]]}  # W_c given one path's gradient
    else:
        dx_k, dw_k, db_k = functional.linear_backward(dk, cache.k)
        dx_v, dw_v, db_v = functional.linear_backward(dv, cache.v)
        stacked = {"w_qkv": [dw_q, dw_k, dw_v]}
        if db_q is not None:
            stacked["b_qkv"] = [db_q, db_k, db_v]
        one_path = {}
    return {"paths": (dx_q, dx_k, dx_v), "stacked": stacked, "one_path": one_path}


def _path_candidates(kind: str) -> Callable[[Any, Any], dict[str, list[tuple[Array, str]]]]:
    """Candidates of an attention's known mistakes: a tensor feeding several paths given only some
    of their gradients; a stacked parameter's parts stacked in another order; the heads split and
    merged by a reshape alone."""
    latent, self_attention = kind.startswith("latent"), kind.endswith("self")

    def candidates(cache: Any, dout: Any) -> dict[str, list[tuple[Array, str]]]:
        xp = get_array_module()
        right = _multi_head_parts(cache, dout, latent)
        dx_q, dx_k, dx_v = right["paths"]
        found: dict[str, list[tuple[Array, str]]]
        if self_attention:
            partial = [dx_q, dx_k, dx_v, dx_q + dx_k, dx_q + dx_v, dx_k + dx_v]
            found = {"x": [(grad, "paths") for grad in partial]}
        else:
            found = {"x_kv": [(dx_k, "paths"), (dx_v, "paths")]}
        for name, parts in right["stacked"].items():
            orders = [
                order for order in itertools.permutations(range(len(parts))) if list(order) != sorted(order)
            ]
            found[name] = [(xp.concatenate([parts[i] for i in order]), "stack_order") for order in orders]
        for name, variants in right["one_path"].items():
            found[name] += [(xp.concatenate(parts), "paths") for parts in variants]
        for split in (functional.split_heads, _split_by_reshape):  # the merge alone, or both, by reshape
            wrong = _multi_head_parts(cache, dout, latent, split, _merge_by_reshape)
            wq, wk, wv = wrong["paths"]
            inputs = {"x": wq + wk + wv} if self_attention else {"x_q": wq, "x_kv": wk + wv}
            for name, grad in inputs.items():
                found.setdefault(name, []).append((grad, "heads_reshape"))
            for name, parts in wrong["stacked"].items():
                found[name].append((xp.concatenate(parts), "heads_reshape"))
        return found

    return candidates


def _cases_multi_head(rng: numpy.random.Generator, latent: bool, self_attention: bool) -> list[Case]:
    xp = get_array_module()
    cases: list[Case] = []
    kind = ("latent" if latent else "mha") + ("-self" if self_attention else "")
    masked = numpy.ones((2, 1, 3, 4), dtype=bool)
    masked[0, 0, 1, :] = False
    masked[1, 0, :, 3] = False
    for label, b, t, s, width, heads, mask, extra in (
        ("B 2, T 3, S 4, D 8, 2 heads, a row fully masked", 2, 3, 4, 8, 2, masked, {}),
        (
            "B 1, T 1, S 1, D 4, 1 head, dropout 0.25",
            1,
            1,
            1,
            4,
            1,
            None,
            {"dropout_p": 0.25, "training": True},
        ),
        (
            "B 2, T 3, S 3, D 8, 4 heads, causal, dropout 0.5",
            2,
            3,
            3,
            8,
            4,
            numpy.tril(numpy.ones((3, 3), dtype=bool))[None, None],
            {"dropout_p": 0.5, "training": True},
        ),
    ):
        if self_attention and s != t:
            s = t
            mask = None if mask is None else mask[..., :t]
        small = width // 4
        weights = (
            {
                "w_q_compress": 0.5 * normal(rng, width + small, width),
                "w_kv_decompress": 0.5 * normal(rng, 2 * width, small),
            }
            if latent
            else {"w_qkv": 0.5 * normal(rng, 3 * width, width)}
        )
        inputs = (
            {"x": normal(rng, b, t, width)}
            if self_attention
            else {"x_q": normal(rng, b, t, width), "x_kv": normal(rng, b, s, width)}
        )
        inputs |= {
            **weights,
            "w_o": 0.5 * normal(rng, width, width),
            "n_heads": heads,
            "mask": None if mask is None else xp.asarray(mask),
            **extra,
        }
        names = (("x",) if self_attention else ("x_q", "x_kv")) + tuple(weights) + ("w_o",)
        if not latent:  # the projections' optional biases: on in the first case, None in the others
            biased = not cases
            if biased:
                inputs |= {"b_qkv": normal(rng, 3 * width), "b_o": normal(rng, width)}
            names += ("b_qkv", "b_o") if biased else ("", "")
        cases.append(
            Case(
                label.replace("S 4", "S 3") if self_attention else label,
                inputs,
                names,
                seed=31 if extra else None,
                candidates=_path_candidates(kind),
            )
        )
    return cases


LAYER_EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        "positional_encoding_backward",
        "positional_encoding_forward",
        ("dx",),
        "(dout, cache)",
        """Gradient of y = x + PE[start : start + T] (the table is a constant).

            dout: (B, T, D) the gradient reaching y; cache: None.
            Returns dx: (B, T, D).""",
        cases=_cases_positional_encoding,
        hints=(
            "The table is a constant: what does adding a constant do to a gradient?",
            "y = x + c, so dy/dx is the identity: dx is dout, unchanged (no sum, no weight: there is none).",
        ),
    ),
    Exercise(
        "relu_backward",
        "relu_forward",
        ("dx",),
        "(dout, cache)",
        """Gradient of y = max(x, 0).

            dout: any shape; cache: the boolean mask x > 0 of the same shape.
            Returns dx: the shape of dout.""",
        cases=_cases_relu,
        hints=(
            "The slope of max(x, 0) is 1 where x > 0 and 0 elsewhere; the cache is where x > 0.",
            "dx = dout where the cache is true, 0 elsewhere: dout * cache.",
        ),
    ),
    Exercise(
        "dropout_backward",
        "dropout_forward",
        ("dx",),
        "(dout, cache)",
        """Gradient of inverted dropout y = x * m / (1 - p).

            dout: any shape; cache: None (evaluation or p = 0: y = x) or a DropoutCache(keep, keep_prob),
            keep the boolean mask m of dout's shape, keep_prob = 1 - p.
            Returns dx: the shape of dout.""",
        cases=_cases_dropout,
        hints=(
            "With the mask fixed, y is x times a constant per entry: keep / keep_prob.",
            "None as the cache means y = x. Otherwise dx = dout * keep / keep_prob.",
        ),
    ),
    Exercise(
        "linear_backward",
        "linear_forward",
        ("dx", "dweight", "dbias"),
        "(dout, cache)",
        """Gradient of y = x W^T + b, W stored (out, in).

            dout: (..., out); cache: LinearCache(x (..., in), weight (out, in), has_bias).
            Returns (dx (..., in), dweight (out, in), dbias (out,) or None when has_bias is false).""",
        cases=_cases_linear,
        hints=(
            "Write y = x W^T + b for one row first; every row uses the same W and b, so their gradients add "
            "over the rows.",
            "Flatten x to (N, in) and dout to (N, out): dx = dout W, dW = dout_rows^T x_rows, db = the sum of "
            "dout's rows. dx keeps x's shape (any rank: 2-D, 3-D, 4-D).",
        ),
    ),
    Exercise(
        "embedding_backward",
        "embedding_forward",
        ("dtable",),
        "(dout, cache)",
        """Gradient of y = E[ids] * sqrt(D) with respect to the table E.

            dout: (B, T, D); cache: EmbeddingCache(ids (B, T) integers, table_shape (V, D), scale sqrt(D)).
            Returns dtable: (V, D), zero for tokens that do not occur.""",
        cases=_cases_embedding,
        hints=(
            "y[b, t] = E[ids[b, t]] * scale: each output row came from one table row.",
            "Start from zeros of the table's shape and add dout[b, t] * scale into row ids[b, t]; a token that "
            "occurs twice gets both (xp.add.at, not assignment).",
        ),
    ),
    Exercise(
        "softmax_backward",
        "softmax_forward",
        ("dx",),
        "(dout, cache)",
        """Gradient of y = softmax(x) along the last axis.

            dout: (..., n); cache: y itself, (..., n).
            Returns dx: (..., n).""",
        cases=_cases_softmax,
        hints=(
            "Every output of a row depends on every input of that row (they sum to 1).",
            "The Jacobian of one row is diag(y) - y y^T; apply it to dout without building it.",
            "dx = y * (dout - sum(dout * y, over the row, keepdims)).",
        ),
    ),
    Exercise(
        "cross_entropy_backward",
        "cross_entropy_forward",
        ("dlogits",),
        "(dloss, cache)",
        """Gradient of the mean label-smoothed cross-entropy over the non-padding tokens.

            dloss: a float, the gradient reaching the loss; cache: CrossEntropyCache(probs (N, V) =
            softmax of the logits, targets (N,) with padding replaced by 0, valid (N,) true where the
            target is not padding, n_valid, label_smoothing eps, shape of the logits (..., V)).
            Returns dlogits: the shape of the logits.""",
        cases=_cases_cross_entropy,
        hints=(
            "Softmax and cross-entropy together have a simple gradient with respect to the logits.",
            "Per token: probs - q, q the smoothed target (1 - eps) one_hot + eps / V; padding rows get 0.",
            "dlogits = (probs - q) * valid[:, None] * dloss / n_valid, reshaped to the logits' shape.",
        ),
    ),
    Exercise(
        "layer_norm_backward",
        "layer_norm_forward",
        ("dx", "dgamma", "dbeta"),
        "(dout, cache)",
        """Gradient of y = gamma * xhat + beta, xhat = (x - mean(x)) / sqrt(var(x) + eps) per row.

            dout: (..., D); cache: LayerNormCache(xhat (..., D), rstd = 1 / sigma (..., 1), gamma (D,)).
            Returns (dx (..., D), dgamma (D,), dbeta (D,)).""",
        cases=_cases_layer_norm,
        hints=(
            "dgamma and dbeta are the sums over rows of dout * xhat and dout. For dx, x reaches y three ways: "
            "directly, through the mean and through the variance.",
            "With g = dout * gamma (the gradient reaching xhat): the mean's path subtracts the row mean of g, "
            "the variance's path subtracts xhat times the row mean of g * xhat.",
            "dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), the means over the last axis, keepdims.",
        ),
    ),
    Exercise(
        "attention_backward",
        "attention_forward",
        ("dq", "dk", "dv"),
        "(dout, cache)",
        """Gradient of scaled dot-product attention y = dropout(P) v, P = softmax(q k^T * scale).

            dout: (B, H, T, K); cache: AttentionCache(q (B, H, T, K), k, v (B, H, S, K), mask
            (broadcastable to (B, H, T, S), false where a query may not see a key) or None, probs P
            (B, H, T, S), dropped = dropout(P), dropout (a DropoutCache or None), scale).
            Returns (dq (B, H, T, K), dk (B, H, S, K), dv (B, H, S, K)).""",
        cases=_cases_attention,
        hints=(
            "Run the forward backwards: out = dropped @ v, dropped = dropout(P), P = softmax(S), S = q k^T * "
            "scale, masked scores constants; a query row may be masked entirely.",
            "dv = dropped^T dout; ddropped = dout v^T; dP = your dropout_backward; dS = your softmax_backward, "
            "0 where masked.",
            "dq = dS k * scale, dk = dS^T q * scale (swapaxes(-1, -2) for the transposes).",
        ),
    ),
    Exercise(
        "multi_head_attention_backward",
        "multi_head_attention_forward",
        ("dx_q", "dx_kv", "dw_qkv", "dw_o", "db_qkv", "db_o"),
        "(dout, cache)",
        """Gradient of cross-attention y = MultiHead(x_q W_q^T + b_q, x_kv W_k^T + b_k, x_kv W_v^T + b_v)
            W_o^T + b_o (the biases are optional: b_qkv = [b_q; b_k; b_v] (3D,), b_o (D,)).

            dout: (B, T, D); cache: MultiHeadAttentionCache(q, k, v, heads, output): q, k, v, output a
            LinearCache each, heads a MultiHeadCache(attention, n_heads), attention an AttentionCache.
            Returns (dx_q (B, T, D), dx_kv (B, S, D), dw_qkv (3D, D) = [dW_q; dW_k; dW_v], dw_o (D, D),
            db_qkv (3D,), db_o (D,)); the two bias gradients are None when the forward had no biases.""",
        cases=lambda rng: _cases_multi_head(rng, False, False),
        hints=(
            "Reverse the forward: the output projection, the heads (split/merge are rearrangements), then the "
            "three input projections; your linear_backward (each bias's gradient, or None) and "
            "attention_backward do the work.",
            "x_kv feeds both K and V: dx_kv is the sum of the two linear_backwards' dx. Stack dW_q, dW_k, dW_v "
            "(xp.concatenate) and the biases the same way when they are not None.",
        ),
    ),
    Exercise(
        "multi_head_self_attention_backward",
        "multi_head_self_attention_forward",
        ("dx", "dw_qkv", "dw_o", "db_qkv", "db_o"),
        "(dout, cache)",
        """Gradient of self-attention: cross-attention of x with itself.

            dout: (B, T, D); cache: a MultiHeadAttentionCache as above.
            Returns (dx (B, T, D), dw_qkv (3D, D), dw_o (D, D), db_qkv (3D,) or None, db_o (D,) or None).""",
        cases=lambda rng: _cases_multi_head(rng, False, True),
        hints=(
            "It is cross-attention with x_q = x_kv = x.",
            "Call your multi_head_attention_backward and add dx_q and dx_kv.",
        ),
    ),
    Exercise(
        "multi_head_latent_attention_backward",
        "multi_head_latent_attention_forward",
        ("dx_q", "dx_kv", "dw_q_compress", "dw_kv_decompress", "dw_o"),
        "(dout, cache)",
        """Gradient of Multi-Head Latent Attention: Q = x_q W_q^T, C = x_kv W_c^T (B, S, L),
            K = C W_kd^T, V = C W_vd^T, y = MultiHead(Q, K, V) W_o^T.

            dout: (B, T, D); cache: LatentAttentionCache(q, latent, k, v, heads, output): a LinearCache
            each but heads, a MultiHeadCache(attention, n_heads).
            Returns (dx_q (B, T, D), dx_kv (B, S, D), dw_q_compress (D + L, D) = [dW_q; dW_c],
            dw_kv_decompress (2D, L) = [dW_kd; dW_vd], dw_o (D, D)).""",
        cases=lambda rng: _cases_multi_head(rng, True, False),
        hints=(
            "Reverse the forward: output, heads, then K and V from the latent C, then C and Q from the inputs.",
            "C feeds both K and V: dC is the sum of their linear_backwards' dx; then C's own linear_backward.",
        ),
    ),
    Exercise(
        "multi_head_latent_self_attention_backward",
        "multi_head_latent_self_attention_forward",
        ("dx", "dw_q_compress", "dw_kv_decompress", "dw_o"),
        "(dout, cache)",
        """Gradient of latent self-attention: the queries and the latent both from x.

            dout: (B, T, D); cache: a LatentAttentionCache as above.
            Returns (dx (B, T, D), dw_q_compress, dw_kv_decompress, dw_o).""",
        cases=lambda rng: _cases_multi_head(rng, True, True),
        hints=(
            "It is latent cross-attention with x_q = x_kv = x.",
            "Call your multi_head_latent_attention_backward and add dx_q and dx_kv.",
        ),
    ),
)
