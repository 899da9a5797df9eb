"""Plausible wrong training rungs (the schedules, clipping, the Adam and AdamW step), each written as a
learner would write it, with the cause `learn check` should name: a key of
numpy_transformer.workbook.SENTENCES. Written beside the grader, not by a learner working cold."""

from __future__ import annotations

from typing import NamedTuple

TRAINING_HEADER = """
import math

import numpy as np

from numpy_transformer.backend import get_array_module
"""


class TrainingMistake(NamedTuple):
    function: str
    expected: str
    source: str
    also: tuple[str, ...] = ()  # a second mistake made beside the first, named too


# a learner's right versions, the base every mistake below changes
CORRECT = {
    "noam_learning_rate": """
def noam_learning_rate(step, d_model, warmup):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
""",
    "warmup_cosine_learning_rate": """
def warmup_cosine_learning_rate(step, peak, warmup, total, min_lr):
    if step <= warmup:
        return peak * step / warmup
    progress = min((step - warmup) / (total - warmup), 1.0)
    return min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * progress))
""",
    "clip_by_global_norm": """
def clip_by_global_norm(grads, max_norm):
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
    scale = max_norm / norm if norm > max_norm else 1.0
    return [g * scale for g in grads], norm
""",
    "adam_step": """
def adam_step(param, grad, m, v, t, lr, beta1, beta2, eps):
    xp = get_array_module()
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    m_hat = m / (1 - beta1 ** t)
    v_hat = v / (1 - beta2 ** t)
    return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v
""",
    "adamw_step": """
def adamw_step(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    xp = get_array_module()
    param = param * (1 - lr * weight_decay)
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    m_hat = m / (1 - beta1 ** t)
    v_hat = v / (1 - beta2 ** t)
    return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v
""",
}


def changed(
    function: str, expected: str, *replacements: tuple[str, str], also: tuple[str, ...] = ()
) -> TrainingMistake:
    """The learner's right ``function`` with each (old, new) replaced once: one mistake (two where
    ``also`` names the second)."""
    source = CORRECT[function]
    for old, new in replacements:
        assert old in source, (function, old)
        source = source.replace(old, new, 1)
    return TrainingMistake(function, expected, source, also)


TRAINING_MISTAKES = [
    # the paper's schedule
    changed("noam_learning_rate", "schedule_off_by_one", ("return", "step = step + 1\n    return")),
    changed("noam_learning_rate", "schedule_off_by_one", ("return", "step = max(step - 1, 1)\n    return")),
    changed("noam_learning_rate", "noam_warmup_power", ("warmup ** -1.5", "warmup ** -0.5")),
    changed("noam_learning_rate", "noam_scale_missing", ("d_model ** -0.5 * ", "")),
    changed("noam_learning_rate", "noam_scale_inverted", ("d_model ** -0.5", "math.sqrt(d_model)")),
    changed("noam_learning_rate", "noam_max", ("min(", "max(")),
    changed("noam_learning_rate", "noam_warmup_power", ("step * warmup ** -1.5", "step / warmup ** 0.5")),
    # warm-up and cosine
    changed(
        "warmup_cosine_learning_rate", "schedule_off_by_one", ("if step", "step = step - 1\n    if step")
    ),
    changed("warmup_cosine_learning_rate", "schedule_off_by_one", ("if step", "step += 1\n    if step")),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_progress",
        ("min((step - warmup) / (total - warmup), 1.0)", "min(step / total, 1.0)"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_half",
        (
            "0.5 * (peak - min_lr) * (1 + math.cos(math.pi * progress))",
            "(peak - min_lr) * math.cos(math.pi * progress)",
        ),
    ),
    changed("warmup_cosine_learning_rate", "cosine_half", ("0.5 * (peak", "(peak")),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_floor",
        ("return min_lr + 0.5 * (peak - min_lr)", "return 0.5 * peak"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_clamp",
        ("min((step - warmup) / (total - warmup), 1.0)", "(step - warmup) / (total - warmup)"),
    ),
    # clipping
    changed(
        "clip_by_global_norm",
        "clip_per_tensor",
        (
            "scale = max_norm / norm if norm > max_norm else 1.0\n    return [g * scale for g in grads], norm",
            "clipped = []\n    for g in grads:\n        n = math.sqrt(float((g * g).sum()))\n"
            "        clipped.append(g * (max_norm / n) if n > max_norm else g)\n    return clipped, norm",
        ),
    ),
    changed(
        "clip_by_global_norm",
        "clip_by_value",
        ("[g * scale for g in grads]", "[np.clip(g, -max_norm, max_norm) for g in grads]"),
    ),
    changed(
        "clip_by_global_norm",
        "clip_squared",
        ("math.sqrt(sum(float((g * g).sum()) for g in grads))", "sum(float((g * g).sum()) for g in grads)"),
    ),
    changed(
        "clip_by_global_norm",
        "clip_rms",
        (
            "math.sqrt(sum(float((g * g).sum()) for g in grads))",
            "math.sqrt(sum(float((g * g).sum()) for g in grads) / sum(g.size for g in grads))",
        ),
    ),
    changed("clip_by_global_norm", "clip_inverted", ("max_norm / norm if", "norm / max_norm if")),
    changed(
        "clip_by_global_norm",
        "clip_always",
        ("max_norm / norm if norm > max_norm else 1.0", "max_norm / norm"),
    ),
    changed(
        "clip_by_global_norm",
        "clip_norm_after",
        ("return [g * scale for g in grads], norm", "return [g * scale for g in grads], min(norm, max_norm)"),
    ),
    changed(
        "clip_by_global_norm",
        "writes_input",
        (
            "return [g * scale for g in grads], norm",
            "for g in grads:\n        g *= scale\n    return grads, norm",
        ),
    ),
    changed(  # cold: the very list handed in, where nothing is clipped
        "clip_by_global_norm",
        "returns_input",
        ("scale = max_norm", "if norm <= max_norm:\n        return grads, norm\n    scale = max_norm"),
    ),
    changed(
        "clip_by_global_norm",
        "returns_input",
        ("scale = max_norm", "if norm <= max_norm:\n        return list(grads), norm\n    scale = max_norm"),
    ),
    # cold: the sum of the arrays' own norms
    changed(
        "clip_by_global_norm",
        "clip_norm_sum",
        (
            "math.sqrt(sum(float((g * g).sum()) for g in grads))",
            "sum(math.sqrt(float((g * g).sum())) for g in grads)",
        ),
    ),
    # cold: the warm-up alone off by one; the cosine to 0 with min_lr after total
    changed(
        "warmup_cosine_learning_rate",
        "warmup_off_by_one",
        ("peak * step / warmup", "peak * (step - 1) / warmup"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_floor",
        ("    progress = min(", "    if step >= total:\n        return min_lr\n    progress = min("),
        ("return min_lr + 0.5 * (peak - min_lr)", "return 0.5 * peak"),
    ),
    # the schedules' mistakes named from their numbers: which part is wrong, and what it does instead
    changed("noam_learning_rate", "schedule_factor", ("return d_model", "return 2 * d_model")),
    changed(
        "warmup_cosine_learning_rate",
        "schedule_factor",
        ("    if step <= warmup:", "    peak, min_lr = peak / 10, min_lr / 10\n    if step <= warmup:"),
    ),
    changed("noam_learning_rate", "noam_decay_power", ("step ** -0.5", "step ** -1.0")),
    changed("noam_learning_rate", "noam_no_decay", ("min(step ** -0.5", "min(math.sqrt(step)")),
    changed("noam_learning_rate", "noam_decay", ("step ** -0.5", "1 / math.log(step + 1)")),
    changed("noam_learning_rate", "noam_warmup_squared", ("step * warmup ** -1.5", "step / warmup ** 2")),
    changed("noam_learning_rate", "noam_line", ("step * warmup ** -1.5", "(step / warmup) ** 1.5")),
    changed(
        "warmup_cosine_learning_rate",
        "warmup_span",
        ("peak * step / warmup", "peak * (step + 1) / (warmup + 1)"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "warmup_whole_steps",
        ("peak * step / warmup", "peak * int(step / warmup)"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_quarter",
        (
            "0.5 * (peak - min_lr) * (1 + math.cos(math.pi * progress))",
            "(peak - min_lr) * math.cos(math.pi * progress / 2)",
        ),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_span",
        (
            "progress = min((step - warmup) / (total - warmup), 1.0)",
            "progress = (step - warmup) / (total - warmup + 1)\n    progress = min(progress, 1.0)",
        ),
    ),
    changed("warmup_cosine_learning_rate", "cosine_ends", ("0.5 * (peak - min_lr)", "0.5 * (peak + min_lr)")),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_floor",
        (
            "progress = min((step - warmup) / (total - warmup), 1.0)",
            "progress = (step - warmup) / (total - warmup)",
        ),
        ("return min_lr + 0.5 * (peak - min_lr)", "return 0.5 * peak"),
        also=("cosine_clamp",),
    ),
    # clipping's
    changed(
        "clip_by_global_norm",
        "clip_spectral",
        (
            "math.sqrt(sum(float((g * g).sum()) for g in grads))",
            "math.sqrt(sum(float(np.linalg.norm(g, 2)) ** 2 for g in grads))",
        ),
    ),
    changed("clip_by_global_norm", "clip_epsilon", ("max_norm / norm if", "max_norm / (norm + 1e-6) if")),
    changed(
        "clip_by_global_norm",
        "clip_rms",
        (
            "math.sqrt(sum(float((g * g).sum()) for g in grads))",
            "math.sqrt(sum(float((g * g).sum()) for g in grads) / sum(g.size for g in grads))",
        ),
        ("return [g * scale for g in grads], norm", "return [g * scale for g in grads], min(norm, max_norm)"),
        also=("clip_norm_after",),
    ),
    # the optimiser's
    changed(
        "adam_step",
        "eps_uncorrected",
        (
            "    m_hat = m / (1 - beta1 ** t)\n    v_hat = v / (1 - beta2 ** t)\n",
            "    step = lr * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)\n",
        ),
        ("param - lr * m_hat / (xp.sqrt(v_hat) + eps)", "param - step * m / (xp.sqrt(v) + eps)"),
    ),
    changed("adam_step", "v_of_m", ("(1 - beta2) * grad * grad", "(1 - beta2) * m * m")),
    changed(
        "adam_step",
        "first_step_moments",
        (
            "    m = beta1",
            "    if t == 1:\n        step = lr * grad / (xp.abs(grad) + eps)\n"
            "        return param - step, grad.copy(), grad * grad\n    m = beta1",
        ),
    ),
    changed(
        "adam_step",
        "rung_dtype",
        (
            "return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v",
            "return (param - lr * m_hat / (xp.sqrt(v_hat) + eps)).astype(np.float32), m, v",
        ),
    ),
    changed(
        "adamw_step",
        "decay_twice",
        (
            "    param = param * (1 - lr",
            "    grad = grad + weight_decay * param\n    param = param * (1 - lr",
        ),
    ),
    changed(
        "adamw_step",
        "decay_paper_step_size",
        (
            "param = param * (1 - lr * weight_decay)",
            "param = param * (1 - lr * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t) * weight_decay)",
        ),
    ),
    changed(
        "adamw_step", "decay_rate", ("param * (1 - lr * weight_decay)", "param * (1 - lr * weight_decay / 2)")
    ),
    # Adam
    changed("adam_step", "no_bias_correction", ("m / (1 - beta1 ** t)", "m"), ("v / (1 - beta2 ** t)", "v")),
    changed("adam_step", "bias_one_moment", ("v / (1 - beta2 ** t)", "v")),
    changed("adam_step", "bias_one_moment", ("m / (1 - beta1 ** t)", "m")),
    changed(
        "adam_step",
        "bias_swapped",
        ("m / (1 - beta1 ** t)", "m / (1 - beta2 ** t)"),
        ("v / (1 - beta2 ** t)", "v / (1 - beta1 ** t)"),
    ),
    changed("adam_step", "t_from_zero", ("m_hat =", "t = t - 1\n    m_hat =")),
    changed("adam_step", "t_ahead", ("m_hat =", "t += 1\n    m_hat =")),
    changed("adam_step", "eps_inside", ("(xp.sqrt(v_hat) + eps)", "xp.sqrt(v_hat + eps)")),
    changed("adam_step", "no_sqrt", ("(xp.sqrt(v_hat) + eps)", "(v_hat + eps)")),
    changed("adam_step", "corrected_state", ("eps), m, v", "eps), m_hat, v_hat")),
    changed("adam_step", "v_unsquared", ("(1 - beta2) * grad * grad", "(1 - beta2) * grad")),
    changed(
        "adam_step",
        "moment_weight",
        ("(1 - beta1) * grad", "grad"),
        ("(1 - beta2) * grad * grad", "grad * grad"),
    ),
    changed(
        "adam_step",
        "betas_swapped",
        ("beta1 * m + (1 - beta1)", "beta2 * m + (1 - beta2)"),
        ("beta2 * v + (1 - beta2)", "beta1 * v + (1 - beta1)"),
        ("beta1 ** t", "beta2 ** t"),
        ("beta2 ** t", "beta1 ** t"),
    ),
    changed(
        "adam_step",
        "stale_moments",
        (
            "    m = beta1",
            "    m_hat = m / (1 - beta1 ** t)\n    v_hat = v / (1 - beta2 ** t)\n    m = beta1",
        ),
        ("    m_hat = m / (1 - beta1 ** t)\n    v_hat = v / (1 - beta2 ** t)\n    return", "    return"),
    ),
    changed("adam_step", "update_sign", ("param - lr", "param + lr")),
    changed(
        "adam_step",
        "writes_input",
        (
            "return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v",
            "param -= lr * m_hat / (xp.sqrt(v_hat) + eps)\n    return param, m, v",
        ),
    ),
    changed(
        "adam_step",
        "writes_input",
        ("m = beta1 * m + (1 - beta1) * grad", "m *= beta1\n    m += (1 - beta1) * grad"),
    ),
    # cold: v weighed by 1 - beta1, eps outside the division, corrections multiplied, m and v swapped
    changed("adam_step", "v_beta1", ("v = beta2 * v + (1 - beta2)", "v = beta2 * v + (1 - beta1)")),
    changed(
        "adam_step",
        "eps_outside",
        ("lr * m_hat / (xp.sqrt(v_hat) + eps)", "lr * m_hat / xp.sqrt(v_hat) + eps"),
    ),
    changed(
        "adam_step",
        "bias_multiplied",
        ("m / (1 - beta1 ** t)", "m * (1 - beta1 ** t)"),
        ("v / (1 - beta2 ** t)", "v * (1 - beta2 ** t)"),
    ),
    changed("adam_step", "moments_swapped", ("+ eps), m, v", "+ eps), v, m")),
    # AdamW
    changed(
        "adamw_step",
        "decay_in_moment",
        ("param = param * (1 - lr * weight_decay)", "grad = grad + weight_decay * param"),
    ),
    changed("adamw_step", "decay_lr", ("param * (1 - lr * weight_decay)", "param * (1 - weight_decay)")),
    changed(
        "adamw_step",
        "decay_after",
        ("    param = param * (1 - lr * weight_decay)\n", ""),
        (
            "return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v",
            "param = param - lr * m_hat / (xp.sqrt(v_hat) + eps)\n    return param * (1 - lr * weight_decay), m, v",
        ),
    ),
    changed("adamw_step", "decay_missing", ("    param = param * (1 - lr * weight_decay)\n", "")),
    changed("adamw_step", "decay_sign", ("(1 - lr * weight_decay)", "(1 + lr * weight_decay)")),
    changed("adamw_step", "no_bias_correction", ("m / (1 - beta1 ** t)", "m"), ("v / (1 - beta2 ** t)", "v")),
    changed("adamw_step", "eps_inside", ("(xp.sqrt(v_hat) + eps)", "xp.sqrt(v_hat + eps)")),
    changed(
        "adamw_step", "t_from_zero", ("beta1 ** t", "beta1 ** (t - 1)"), ("beta2 ** t", "beta2 ** (t - 1)")
    ),
    changed(
        "adamw_step",
        "writes_input",
        ("param = param * (1 - lr * weight_decay)", "param *= 1 - lr * weight_decay"),
    ),
]


# a third cold learner's: the front factor's and a power's parentheses, the warm-up shifted either way, the
# decay between other rates, an L1 norm, eps outside the division in parentheses, each moment's weights
# swapped, v of |g|, the decay on the moments, and two slips at once in Adam and in AdamW
TRAINING_MISTAKES += [
    changed("noam_learning_rate", "noam_power_precedence", ("d_model ** -0.5", "d_model ** -1 / 2")),
    changed("noam_learning_rate", "noam_front", ("d_model ** -0.5", "1 / d_model")),
    changed("noam_learning_rate", "noam_one_curve", ("step * warmup ** -1.5", "(step * warmup) ** -1.5")),
    changed(
        "warmup_cosine_learning_rate",
        "warmup_span",
        ("peak * step / warmup", "peak * (step + 1) / warmup"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "warmup_span",
        ("peak * step / warmup", "peak * (step - 1) / (warmup - 1)"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "warmup_start",
        ("peak * step / warmup", "min_lr + (peak - min_lr) * step / warmup"),
    ),
    changed("warmup_cosine_learning_rate", "cosine_height", ("0.5 * (peak - min_lr)", "0.5 * peak")),
    changed("warmup_cosine_learning_rate", "cosine_rising", ("(1 + math.cos", "(1 - math.cos")),
    changed(
        "clip_by_global_norm",
        "clip_l1",
        ("math.sqrt(sum(float((g * g).sum()) for g in grads))", "sum(float(np.abs(g).sum()) for g in grads)"),
    ),
    changed(
        "adam_step",
        "eps_outside",
        ("lr * m_hat / (xp.sqrt(v_hat) + eps)", "lr * (m_hat / xp.sqrt(v_hat) + eps)"),
    ),
    changed(
        "adam_step",
        "moment_weights_swapped",
        ("beta1 * m + (1 - beta1) * grad", "(1 - beta1) * m + beta1 * grad"),
        ("beta2 * v + (1 - beta2) * grad", "(1 - beta2) * v + beta2 * grad"),
    ),
    changed("adam_step", "v_abs", ("(1 - beta2) * grad * grad", "(1 - beta2) * xp.abs(grad)")),
    changed(
        "adam_step",
        "no_bias_correction",
        ("m / (1 - beta1 ** t)", "m"),
        ("v / (1 - beta2 ** t)", "v"),
        ("(xp.sqrt(v_hat) + eps)", "xp.sqrt(v_hat + eps)"),
        also=("eps_inside",),
    ),
    changed(
        "adamw_step",
        "decay_on_moments",
        (
            "    m = beta1 * m",
            "    m, v = m * (1 - lr * weight_decay), v * (1 - lr * weight_decay)\n    m = beta1 * m",
        ),
    ),
    changed(
        "adamw_step",
        "decay_after",
        ("    param = param * (1 - lr * weight_decay)\n", ""),
        (
            "return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v",
            "param = param - lr * m_hat / (xp.sqrt(v_hat) + eps)\n    return param * (1 - weight_decay), m, v",
        ),
        also=("decay_lr",),
    ),
]


# a third cold learner's: the warm-up's power without its minus, the rate held after the warm-up, two
# arguments swapped, the cosine without pi or 0 from total on, each array's mean of squares, v corrected with
# beta1, the decay as a constant or through Adam's denominator, weight_decay handed on in eps's place, and two
# slips at once in the paper's schedule and in clipping
TRAINING_MISTAKES += [
    changed("noam_learning_rate", "noam_warmup_sign", ("warmup ** -1.5", "warmup ** 1.5")),
    changed(
        "noam_learning_rate",
        "noam_flat",
        ("min(step ** -0.5, step * warmup ** -1.5)", "min(step, warmup) * warmup ** -1.5"),
    ),
    changed(
        "noam_learning_rate",
        "arguments_swapped",
        ("d_model ** -0.5", "warmup ** -0.5"),
        ("warmup ** -1.5", "d_model ** -1.5"),
    ),
    changed(
        "noam_learning_rate",
        "noam_scale_missing",
        ("d_model ** -0.5 * ", ""),
        ("return", "step = step + 1\n    return"),
        also=("schedule_off_by_one",),
    ),
    changed(
        "warmup_cosine_learning_rate", "cosine_pi", ("math.cos(math.pi * progress)", "math.cos(progress)")
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_end_zero",
        ("    progress = min(", "    if step >= total:\n        return 0.0\n    progress = min("),
    ),
    changed("clip_by_global_norm", "clip_means", ("float((g * g).sum())", "float((g * g).mean())")),
    changed(
        "clip_by_global_norm",
        "clip_epsilon",
        ("max_norm / norm if norm > max_norm else 1.0", "max_norm / (norm + 1e-6)"),
        also=("clip_always",),
    ),
    changed("adam_step", "bias_same_beta", ("v / (1 - beta2 ** t)", "v / (1 - beta1 ** t)")),
    changed("adamw_step", "decay_constant", ("param * (1 - lr * weight_decay)", "param - lr * weight_decay")),
    changed(
        "adamw_step",
        "decay_adaptive",
        ("    param = param * (1 - lr * weight_decay)\n", ""),
        (
            "lr * m_hat / (xp.sqrt(v_hat) + eps)",
            "lr * (m_hat + weight_decay * param) / (xp.sqrt(v_hat) + eps)",
        ),
    ),
    changed(
        "adamw_step", "argument_misplaced", ("(xp.sqrt(v_hat) + eps)", "(xp.sqrt(v_hat) + weight_decay)")
    ),
]


# a fourth cold learner's (two more of theirs, the cosine's height 0.5 * peak and its 1 - cos, are the
# second learner's above): a power written ** -1/2, the rate 0 at step 1 from a step counted from 0, the
# warm-up's line with step and warmup swapped or warmup ** (-3 // 2), the cosine's brackets, min_lr as a
# share of peak, progress over total, a step late or in whole numbers, each array's sum squared,
# the results returned in another order, a step counted by the function itself, AdamW's decay at Adam's
# corrected step size or of the gradient
TRAINING_MISTAKES += [
    changed(
        "noam_learning_rate",
        "noam_power_precedence",
        ("d_model ** -0.5 * min(step ** -0.5", "d_model ** -1/2 * min(step ** -1/2"),
    ),
    changed(
        "noam_learning_rate",
        "schedule_off_by_one",
        ("    return", "    step = step - 1\n    if step == 0:\n        return 0.0\n    return"),
    ),
    changed("noam_learning_rate", "noam_line_swapped", ("step * warmup ** -1.5", "warmup * step ** -1.5")),
    changed("noam_learning_rate", "noam_warmup_squared", ("warmup ** -1.5", "warmup ** (-3 // 2)")),
    changed(
        "warmup_cosine_learning_rate", "cosine_over_total", ("/ (total - warmup), 1.0)", "/ total, 1.0)")
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_whole_progress",
        ("/ (total - warmup), 1.0)", "// (total - warmup), 1)"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_min_ratio",
        (
            "min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * progress))",
            "peak * (min_lr + 0.5 * (1 - min_lr) * (1 + math.cos(math.pi * progress)))",
        ),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_unbracketed",
        ("min_lr + 0.5 * (peak - min_lr) * (1", "min_lr + 0.5 * peak - min_lr * (1"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_decay_off_by_one",
        ("min((step - warmup) /", "min((step - warmup - 1) /"),
    ),
    changed(
        "clip_by_global_norm",
        "returns_order",
        ("return [g * scale for g in grads], norm", "return norm, [g * scale for g in grads]"),
    ),
    changed("clip_by_global_norm", "clip_sum_squared", ("float((g * g).sum())", "float(g.sum()) ** 2")),
    changed(
        "adam_step",
        "keeps_state",
        ("def adam_step", "_updates = [0]\n\n\ndef adam_step"),
        (
            "    xp = get_array_module()",
            "    xp = get_array_module()\n    _updates[0] += 1\n    t = _updates[0]",
        ),
    ),
    changed(
        "adamw_step",
        "decay_step_size",
        ("param * (1 - lr * weight_decay)", "param * (1 - lr / (1 - beta1 ** t) * weight_decay)"),
    ),
    changed(
        "adamw_step",
        "decay_of_gradient",
        ("param * (1 - lr * weight_decay)", "param - lr * weight_decay * grad"),
    ),
]


def _adamw_calling_adam(expected: str, handed: str) -> TrainingMistake:
    """A learner's AdamW that decays the parameter and hands on to their right adam_step the arguments
    ``handed`` (after param, grad, m, v), mixed up as ``expected`` names."""
    source = CORRECT["adam_step"] + (
        "\n\ndef adamw_step(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):\n"
        f"    return adam_step(param * (1 - lr * weight_decay), grad, m, v, {handed})\n"
    )
    return TrainingMistake("adamw_step", expected, source)


# a fifth cold learner's: the warm-up's line from step / warmup * sqrt(warmup), the paper's schedule as an
# if/else with its branches swapped, the progress held by max, min_lr inside the brackets, min_lr halved
# beside a step late, the norm the largest entry, the scale by the sum of squares, the gradients unscaled in
# a loop, a correction's brackets lost, eps after the division, the moments restarted beside eps inside the
# root, adam_step called with t and lr swapped, the decay dividing; their decay at the Adam paper's step size
# is the entry above now named so (a decay halved takes its place there); and beside the grader, adam_step
# handed eps as its lr (weight_decay as its lr reads as the two swapped: the decay multiplies them)
TRAINING_MISTAKES += [
    changed(
        "noam_learning_rate",
        "noam_warmup_power",
        ("step * warmup ** -1.5", "step / warmup * math.sqrt(warmup)"),
    ),
    changed(
        "noam_learning_rate",
        "noam_max",
        (
            "    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "    if step < warmup:\n        factor = step ** -0.5\n    else:\n"
            "        factor = step * warmup ** -1.5\n    return d_model ** -0.5 * factor",
        ),
    ),
    changed(
        "warmup_cosine_learning_rate", "cosine_clamp_max", ("min((step - warmup)", "max((step - warmup)")
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_floor_bracketed",
        ("min_lr + 0.5 * (peak - min_lr) * (1", "(min_lr + 0.5 * (peak - min_lr)) * (1"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_floor_halved",
        ("min((step - warmup) /", "min((step - warmup - 1) /"),
        ("return min_lr + 0.5", "return 0.5 * min_lr + 0.5"),
        also=("cosine_decay_off_by_one",),
    ),
    changed(
        "clip_by_global_norm",
        "clip_other_norm",
        ("math.sqrt(sum(float((g * g).sum()) for g in grads))", "max(float(np.abs(g).max()) for g in grads)"),
    ),
    changed(
        "clip_by_global_norm",
        "clip_scale_norm",
        ("max_norm / norm if", "max_norm / norm ** 2 if"),
    ),
    changed(
        "clip_by_global_norm",
        "clip_unscaled",
        (
            "    return [g * scale for g in grads], norm",
            "    clipped = list(grads)\n    for g in clipped:\n        g = g * scale\n    return clipped, norm",
        ),
    ),
    changed("adam_step", "bias_unbracketed", ("m / (1 - beta1 ** t)", "m / 1 - beta1 ** t")),
    changed(
        "adam_step",
        "eps_outside",
        (
            "return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v",
            "update = lr * m_hat / xp.sqrt(v_hat) + eps\n    return param - update, m, v",
        ),
    ),
    changed(
        "adam_step",
        "moments_restarted",
        ("    m = beta1 * m", "    m, v = xp.zeros_like(grad), xp.zeros_like(grad)\n    m = beta1 * m"),
        ("(xp.sqrt(v_hat) + eps)", "xp.sqrt(v_hat + eps)"),
        also=("eps_inside",),
    ),
    _adamw_calling_adam("handed_on_swapped", "lr, t, beta1, beta2, eps"),
    _adamw_calling_adam("handed_on_misplaced", "t, eps, beta1, beta2, eps"),
    changed(
        "adamw_step", "decay_divided", ("param * (1 - lr * weight_decay)", "param / (1 + lr * weight_decay)")
    ),
]


# a sixth cold learner's: the line's power written ** -3/2, warmup^-1.5 left outside the min, the progress
# without its brackets (a guard, too: its rates once read back as total replaced by peak, which a progress
# held at 1 gives whatever total is), the warm-up a step ahead (its decay right: the decay is not named),
# the norm of the last array alone (= in place of += in a loop), the first moment with beta2's weight, the
# bias corrections' powers written as products, a decayed parameter computed and the original handed on;
# and beside the grader, the norm of the first array alone
TRAINING_MISTAKES += [
    changed(
        "noam_learning_rate", "noam_line_precedence", ("step * warmup ** -1.5", "step * warmup ** -3 / 2")
    ),
    changed(
        "noam_learning_rate",
        "noam_warmup_outside",
        ("min(step ** -0.5, step * warmup ** -1.5)", "min(step ** -0.5, step) * warmup ** -1.5"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_progress_unbracketed",
        ("min((step - warmup) / (total - warmup), 1.0)", "min(step - warmup / (total - warmup), 1.0)"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "warmup_off_by_one",
        (
            "    if step <= warmup:\n        return peak * step / warmup",
            "    if step < warmup:\n        return peak * (step + 1) / warmup",
        ),
    ),
    changed(
        "clip_by_global_norm",
        "clip_other_norm",
        (
            "    norm = math.sqrt(sum(float((g * g).sum()) for g in grads))",
            "    total = 0.0\n    for g in grads:\n        total = float((g * g).sum())\n    norm = math.sqrt(total)",
        ),
    ),
    changed(
        "clip_by_global_norm",
        "clip_other_norm",
        (
            "math.sqrt(sum(float((g * g).sum()) for g in grads))",
            "math.sqrt(float((grads[0] * grads[0]).sum()))",
        ),
    ),
    changed(
        "adam_step", "m_beta2", ("m = beta1 * m + (1 - beta1) * grad", "m = beta1 * m + (1 - beta2) * grad")
    ),
    changed(
        "adam_step", "bias_product", ("1 - beta1 ** t", "1 - beta1 * t"), ("1 - beta2 ** t", "1 - beta2 * t")
    ),
    changed(
        "adamw_step",
        "decay_missing",
        ("    param = param * (1 - lr * weight_decay)", "    decayed = param * (1 - lr * weight_decay)"),
    ),
]


# a seventh cold learner's: the line divided by warmup ** -1.5 (the numbers of its power without the minus),
# a rate cached on the step alone (an earlier call's answer for other arguments given again)
TRAINING_MISTAKES += [
    changed("noam_learning_rate", "noam_warmup_sign", ("step * warmup ** -1.5", "step / warmup ** -1.5")),
    changed(
        "noam_learning_rate",
        "earlier_answer",
        ("\ndef noam_learning_rate", "\n_rates = {}\n\n\ndef noam_learning_rate"),
        (
            "    return d_model",
            "    if step not in _rates:\n        _rates[step] = d_model",
        ),
        ("warmup ** -1.5)\n", "warmup ** -1.5)\n    return _rates[step]\n"),
    ),
]


# a seventh cold learner's too: the warm-up's line as step / warmup (another power of warmup, the decay
# right), step outside the min (the rate never decays), the cosine's brackets lost or its progress outside
# it, AdamW's decay with its bracket closed early, raised to the power t, no lr and added (two slips) or
# shrinking the gradient, v of the gradient with the root of |v_hat| to keep it finite, the bias
# corrections' brackets around 1 - beta, t from 0 held at 1 beside v of m^2 (two slips), and m and v
# swapped where AdamW hands them on to adam_step
TRAINING_MISTAKES += [
    changed(
        "noam_learning_rate",
        "noam_line_power",
        (
            "    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "    if step < warmup:\n        return d_model ** -0.5 * step / warmup\n"
            "    return d_model ** -0.5 * step ** -0.5",
        ),
    ),
    changed(
        "noam_learning_rate",
        "noam_no_decay",
        ("min(step ** -0.5, step * warmup ** -1.5)", "step * min(step ** -0.5, warmup ** -1.5)"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_wave_unbracketed",
        (
            "(peak - min_lr) * (1 + math.cos(math.pi * progress))",
            "(peak - min_lr) * 1 + math.cos(math.pi * progress)",
        ),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_linear",
        ("math.cos(math.pi * progress)", "math.cos(math.pi) * progress"),
    ),
    changed(
        "adamw_step",
        "decay_unbracketed",
        ("param * (1 - lr * weight_decay)", "param * (1 - lr) * weight_decay"),
    ),
    changed(
        "adamw_step",
        "decay_compounded",
        ("param * (1 - lr * weight_decay)", "param * (1 - lr * weight_decay) ** t"),
    ),
    changed(
        "adamw_step",
        "decay_lr",
        ("param * (1 - lr * weight_decay)", "param + weight_decay * param"),
        also=("decay_sign",),
    ),
    changed(
        "adamw_step",
        "decay_shrinks_gradient",
        ("    param = param * (1 - lr * weight_decay)", "    grad = grad * (1 - lr * weight_decay)"),
    ),
    changed(
        "adam_step", "v_unsquared", ("grad * grad", "grad"), ("xp.sqrt(v_hat)", "xp.sqrt(xp.abs(v_hat))")
    ),
    changed(
        "adam_step",
        "bias_power_bracketed",
        ("1 - beta1 ** t", "(1 - beta1) ** t"),
        ("1 - beta2 ** t", "(1 - beta2) ** t"),
    ),
    changed(
        "adam_step",
        "v_of_m",
        ("(1 - beta2) * grad * grad", "(1 - beta2) * m * m"),
        ("1 - beta1 ** t", "1 - beta1 ** max(t - 1, 1)"),
        ("1 - beta2 ** t", "1 - beta2 ** max(t - 1, 1)"),
        also=("t_from_zero",),
    ),
    TrainingMistake(
        "adamw_step",
        "arguments_swapped",
        CORRECT["adam_step"]
        + (
            "\n\ndef adamw_step(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):\n"
            "    return adam_step(param * (1 - lr * weight_decay), grad, v, m, t, lr, beta1, beta2, eps)\n"
        ),
    ),
]


SOLVED_TRAINING = "".join(CORRECT.values())  # every training rung right, as a learner writes it
