"""The training rungs' mistakes of the third to the seventeenth cold learner, round by round, each as the
learner wrote it (or the nearest form that gives the same numbers), with the cause `learn check`
should name: a key of numpy_transformer.workbook.SENTENCES. The first two learners' are in
learn_training_mistakes.py, among the mistakes of their rung."""

from __future__ import annotations

from learn_training_rungs import CORRECT, TrainingMistake, changed

_SCALED = (
    "    scale = max_norm / norm if norm > max_norm else 1.0\n    return [g * scale for g in grads], norm"
)

# a third cold learner's: the front factor's and a power's parentheses, the warm-up shifted either way, the
# decay between other rates, an L1 norm, eps outside the division in parentheses, each moment's weights
# swapped, v of |g|, the decay on the moments, and two slips at once in Adam and in AdamW
COLD_ROUNDS = [
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
COLD_ROUNDS += [
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
COLD_ROUNDS += [
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
COLD_ROUNDS += [
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
COLD_ROUNDS += [
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
COLD_ROUNDS += [
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
COLD_ROUNDS += [
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

# an eighth cold learner's: the norm's square compared with max_norm (graded done before: no case had
# max_norm between the norm and its square); the warm-up's line in whole numbers, the factor in front on the
# decay alone, the rate 0 after total, the warm-up divided by warmup + 1 with the cosine's angle in degrees,
# eps held at 1e-8 whatever is handed in (no cause named before)
COLD_ROUNDS += [
    changed(
        "clip_by_global_norm",
        "clip_compared_squared",
        ("if norm > max_norm else", "if norm * norm > max_norm else"),
    ),
    changed("noam_learning_rate", "noam_whole_line", ("step * warmup ** -1.5", "step // warmup ** 1.5")),
    changed(
        "noam_learning_rate",
        "noam_front_decay_only",
        (
            "d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "min(1.0 / math.sqrt(d_model * step), step * warmup ** -1.5)",
        ),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_past_end",
        (
            "        return peak * step / warmup\n",
            "        return peak * step / warmup\n    if step > total:\n        return 0.0\n",
        ),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "warmup_divisor",
        ("peak * step / warmup", "peak * step / (warmup + 1)"),
        ("math.cos(math.pi * progress)", "math.cos(180 * progress)"),
        also=("cosine_degrees",),
    ),
    changed("adam_step", "argument_unused", ("(xp.sqrt(v_hat) + eps)", "(xp.sqrt(v_hat) + 1e-8)")),
    # their mirrors, written beside them: the factor on the line alone, the warm-up divided by warmup - 1, a
    # beta held at 0.999
    changed(
        "noam_learning_rate",
        "noam_front_line_only",
        (
            "d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "min(step ** -0.5, step / math.sqrt(d_model * warmup ** 3))",
        ),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "warmup_divisor",
        ("peak * step / warmup", "peak * step / (warmup - 1)"),
    ),
    changed(
        "adamw_step",
        "argument_unused",
        ("beta2 * v + (1 - beta2)", "0.999 * v + (1 - 0.999)"),
        ("1 - beta2 ** t", "1 - 0.999 ** t"),
    ),
]

# a ninth cold learner's: min_lr's floor on the warm-up too (graded done before: no case had a warm-up step
# below min_lr), peak and min_lr swapped (the numbers of 1 - cos, both said), the decay as 1 / step, Adam's
# results in another order, v of ((1 - beta2) g)^2, the moments handed in returned, weight_decay held at 0.01
# (none named before)
COLD_ROUNDS += [
    changed(
        "warmup_cosine_learning_rate",
        "cosine_floor_warmup",
        ("        return peak * step / warmup\n", "        return max(peak * step / warmup, min_lr)\n"),
        ("    return min_lr + 0.5", "    return max(min_lr, min_lr + 0.5"),
        ("(1 + math.cos(math.pi * progress))", "(1 + math.cos(math.pi * progress)))"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_rising",
        ("min_lr + 0.5 * (peak - min_lr)", "peak + 0.5 * (min_lr - peak)"),
    ),
    changed(
        "noam_learning_rate",
        "noam_decay_falls",
        ("min(step ** -0.5, step * warmup ** -1.5)", "min(warmup ** 0.5 / step, step * warmup ** -1.5)"),
    ),
    changed(
        "adam_step",
        "returns_order",
        (
            "return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v",
            "return m, v, param - lr * m_hat / (xp.sqrt(v_hat) + eps)",
        ),
    ),
    changed("adam_step", "v_weight_squared", ("(1 - beta2) * grad * grad", "((1 - beta2) * grad) ** 2")),
    changed(
        "adamw_step",
        "moments_handed_back",
        ("    m = beta1 * m", "    m0, v0 = m, v\n    m = beta1 * m"),
        ("(xp.sqrt(v_hat) + eps), m, v", "(xp.sqrt(v_hat) + eps), m0, v0"),
    ),
    changed("adamw_step", "argument_unused", ("(1 - lr * weight_decay)", "(1 - lr * 0.01)")),
    # their mirrors, written beside them: Adam returning the moments handed in, AdamW its results as (v, param, m)
    changed(
        "adam_step",
        "moments_handed_back",
        ("    m = beta1 * m", "    m0, v0 = m, v\n    m = beta1 * m"),
        ("(xp.sqrt(v_hat) + eps), m, v", "(xp.sqrt(v_hat) + eps), m0, v0"),
    ),
    changed(
        "adamw_step",
        "returns_order",
        (
            "return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v",
            "return v, param - lr * m_hat / (xp.sqrt(v_hat) + eps), m",
        ),
    ),
]

# a tenth cold learner's: clipping's results in another order beside the gradients always rescaled (said to be
# right in that order before: only the first call was read so), d_model held at 512 (read as d_model^0 in
# front before), warmup held at 4000 beside max(...) for min(...), and the warm-up's step - 1 under
# `if step < warmup` beside the progress not held at 1 (neither pair named before)
COLD_ROUNDS += [
    changed(
        "clip_by_global_norm",
        "returns_order",
        ("max_norm / norm if norm > max_norm else 1.0", "max_norm / norm"),
        ("return [g * scale for g in grads], norm", "return norm, [g * scale for g in grads]"),
    ),
    changed(
        "noam_learning_rate",
        "argument_unused",
        ("    return d_model ** -0.5", "    d_model = 512\n    return d_model ** -0.5"),
    ),
    changed(
        "noam_learning_rate",
        "argument_unused",
        ("    return d_model ** -0.5", "    warmup = 4000\n    return d_model ** -0.5"),
        ("min(step", "max(step"),
        also=("noam_max",),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "warmup_off_by_one",
        ("if step <= warmup:", "if step < warmup:"),
        ("peak * step / warmup", "peak * (step - 1) / warmup"),
        ("min((step - warmup) / (total - warmup), 1.0)", "(step - warmup) / (total - warmup)"),
        also=("cosine_clamp",),
    ),
]

# an eleventh cold learner's: the scale min(1, max_norm / norm) computed whatever the norm (it divides by 0
# where every gradient is zero, a legal input: not caught before, no case had it), the square root over the
# whole product, 1 / sqrt(d_model * min(...)), the warm-up's rate floored, peak * step // warmup, and v's
# weight without its brackets (none of the three named before); m's too, the same slip
COLD_ROUNDS += [
    changed(
        "clip_by_global_norm",
        "clip_zero_norm",
        ("max_norm / norm if norm > max_norm else 1.0", "min(1.0, max_norm / norm)"),
    ),
    changed(
        "noam_learning_rate",
        "noam_root_over_all",
        (
            "d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "1 / math.sqrt(d_model * min(step ** -0.5, step * warmup ** -1.5))",
        ),
    ),
    changed(
        "warmup_cosine_learning_rate", "warmup_whole_rate", ("peak * step / warmup", "peak * step // warmup")
    ),
    changed("adam_step", "moment_unbracketed", ("(1 - beta2) * grad * grad", "1 - beta2 * grad * grad")),
    changed("adam_step", "moment_unbracketed", ("(1 - beta1) * grad", "1 - beta1 * grad")),
    # their mirrors, written beside the grader: the scale's division on arrays, where a norm of 0 gives nan (a
    # RuntimeWarning, not ZeroDivisionError): right on every other call, the division unguarded; rescaled
    # always; and rescaled always, returned as (norm, grads)
    changed(
        "clip_by_global_norm",
        "clip_zero_norm",
        (_SCALED, "    return [g * min(norm, max_norm) / norm for g in grads], norm"),
    ),
    changed(
        "clip_by_global_norm",
        "clip_always",
        (_SCALED, "    return [g * max_norm / norm for g in grads], norm"),
    ),
    changed(
        "clip_by_global_norm",
        "returns_order",
        (_SCALED, "    return norm, [g * max_norm / norm for g in grads]"),
    ),
]

# a twelfth cold learner's: pi written 3.14 (a difference of 4e-9, no cause said before), beta1 and beta2 both
# held at 0.9 and 0.999 (one argument held was read, not two), the decay to 0 held up by max(lr, min_lr) (said
# as min_lr left out before), and the items of the list grads replaced (said as arrays written into before)
COLD_ROUNDS += [
    changed(
        "warmup_cosine_learning_rate",
        "cosine_turn",
        ("def warmup", "PI = 3.14\n\n\ndef warmup"),
        ("math.cos(math.pi * progress)", "math.cos(PI * progress)"),
    ),
    changed(
        "adam_step",
        "arguments_unused",
        ("    xp = get_array_module()", "    xp = get_array_module()\n    beta1, beta2 = 0.9, 0.999"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_floor_max",
        (
            "return min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * progress))",
            "return max(0.5 * peak * (1 + math.cos(math.pi * progress)), min_lr)",
        ),
    ),
    changed(
        "clip_by_global_norm",
        "writes_list",
        (
            "    return [g * scale for g in grads], norm",
            "    for i in range(len(grads)):\n        grads[i] = grads[i] * scale\n    return grads, norm",
        ),
    ),
    # their mirrors, written beside the grader: 22 / 7 for pi, and AdamW's beta1 and beta2 held at once
    changed(
        "warmup_cosine_learning_rate",
        "cosine_turn",
        ("math.cos(math.pi * progress)", "math.cos(22 / 7 * progress)"),
    ),
    changed(
        "adamw_step",
        "arguments_unused",
        ("    xp = get_array_module()", "    xp = get_array_module()\n    beta1, beta2 = 0.9, 0.999"),
    ),
]

# a thirteenth cold learner's: the decay's branch with d_model ** 0.5 in front (said before as the step's
# power, which is right), v of grad * 2 and the powers floored in three places (no cause said before), the
# progress not clamped with the half cosine 0.5 * peak, and the scale max_norm // norm (no cause said before)
COLD_ROUNDS += [
    changed(
        "noam_learning_rate",
        "noam_decay_front",
        (
            "    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "    if step < warmup:\n        return d_model ** -0.5 * step * warmup ** -1.5\n"
            "    return d_model ** 0.5 * step ** -0.5",
        ),
    ),
    changed("adamw_step", "v_doubled", ("(1 - beta2) * grad * grad", "(1 - beta2) * grad * 2")),
    changed(
        "noam_learning_rate",
        "noam_floored_powers",
        (
            "d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "d_model ** (-1 // 2) * min(step ** (-1 // 2), step * warmup ** (-3 // 2))",
        ),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_clamp",
        ("step <= warmup", "step < warmup"),
        ("min((step - warmup) / (total - warmup), 1.0)", "(step - warmup) / (total - warmup)"),
        ("min_lr + 0.5 * (peak - min_lr)", "min_lr + 0.5 * peak"),
        also=("cosine_height",),
    ),
    changed(
        "clip_by_global_norm",
        "clip_whole_scale",
        (
            "    scale = max_norm / norm if norm > max_norm else 1.0\n    return [g * scale for g in grads], norm",
            "    if norm > max_norm:\n        scale = max_norm // norm\n        grads = [g * scale for g in grads]\n"
            "    return grads, norm",
        ),
    ),
    # their mirrors, written beside the grader: Adam's v of grad * 2, and the powers floored in two places
    changed("adam_step", "v_doubled", ("(1 - beta2) * grad * grad", "(1 - beta2) * grad * 2")),
    changed(
        "noam_learning_rate",
        "noam_floored_powers",
        ("d_model ** -0.5 * min(step ** -0.5,", "d_model ** (-1 // 2) * min(step ** (-1 // 2),"),
    ),
]

# a fourteenth cold learner's: the paper's warm-up line divided with // in a branch of its own (said before
# by its branch alone), the warm-up and the cosine as the smaller of the two at every step, with no branch,
# and m_hat made from m before it is updated (no cause said before)
COLD_ROUNDS += [
    changed(
        "noam_learning_rate",
        "noam_whole_warmup",
        (
            "    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "    if step < warmup:\n        return d_model ** -0.5 * (step // warmup ** 1.5)\n"
            "    return d_model ** -0.5 * step ** -0.5",
        ),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_min_of_curves",
        (
            "    if step <= warmup:\n        return peak * step / warmup\n",
            "",
        ),
        (
            "    return min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * progress))",
            "    return min(peak * step / warmup, min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * progress)))",
        ),
    ),
    changed(
        "adam_step",
        "stale_m",
        (
            "    m = beta1 * m + (1 - beta1) * grad\n",
            "    m_hat = m / (1 - beta1 ** t)\n    m = beta1 * m + (1 - beta1) * grad\n",
        ),
        ("    m_hat = m / (1 - beta1 ** t)\n    v_hat", "    v_hat"),
    ),
    # their mirrors, written beside the grader: v_hat made from the old v, and AdamW's m_hat from the old m
    changed(
        "adam_step",
        "stale_v",
        (
            "    v = beta2 * v + (1 - beta2) * grad * grad\n",
            "    v_hat = v / (1 - beta2 ** t)\n    v = beta2 * v + (1 - beta2) * grad * grad\n",
        ),
        ("    v_hat = v / (1 - beta2 ** t)\n    return", "    return"),
    ),
    changed(
        "adamw_step",
        "stale_m",
        (
            "    m = beta1 * m + (1 - beta1) * grad\n",
            "    m_hat = m / (1 - beta1 ** t)\n    m = beta1 * m + (1 - beta1) * grad\n",
        ),
        ("    m_hat = m / (1 - beta1 ** t)\n    v_hat", "    v_hat"),
    ),
]

# a fifteenth cold learner's: the paper's warm-up line step / warmup and the warm-up held at its peak by
# max(step, warmup) ** -0.5 (said before by their region alone), min_lr not added to the cosine (said as
# the rates it runs between), and m's new gradient not weighed by 1 - beta1 (no cause said before)
COLD_ROUNDS += [
    changed("noam_learning_rate", "noam_warmup_linear", ("step * warmup ** -1.5", "step / warmup")),
    changed(
        "noam_learning_rate",
        "noam_warmup_held",
        ("min(step ** -0.5, step * warmup ** -1.5)", "max(step, warmup) ** -0.5"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_floor_not_added",
        ("return min_lr + 0.5 * (peak - min_lr)", "return 0.5 * (peak - min_lr)"),
    ),
    changed("adam_step", "moment_weight", ("(1 - beta1) * grad", "grad")),
    # their mirrors, written beside the grader: v's new square not weighed, and AdamW's m alone
    changed("adam_step", "moment_weight", ("(1 - beta2) * grad * grad", "grad * grad")),
    changed("adamw_step", "moment_weight", ("(1 - beta1) * grad", "grad")),
]

# a sixteenth cold learner's: the paper's warm-up line step // warmup * warmup ** -0.5 (said before as step //
# warmup ** 1.5, 0 past warmup, which was false), clipping's condition reversed and v's update with beta1 in
# both places (no cause said before), and the sum of the arrays' norms beside a write into them (the write
# alone said before)
COLD_ROUNDS += [
    changed(
        "noam_learning_rate",
        "noam_whole_warmup",
        ("min(step ** -0.5, step * warmup ** -1.5)", "min(step ** -0.5, step // warmup * warmup ** -0.5)"),
    ),
    changed("clip_by_global_norm", "clip_reversed", ("if norm > max_norm", "if norm < max_norm")),
    changed(
        "clip_by_global_norm",
        "writes_input",
        (
            "math.sqrt(sum(float((g * g).sum()) for g in grads))",
            "sum(float(np.linalg.norm(g)) for g in grads)",
        ),
        (
            "    scale = max_norm / norm if norm > max_norm else 1.0\n    return [g * scale for g in grads], norm",
            "    if norm > max_norm:\n        for i in range(len(grads)):\n            grads[i] *= max_norm / norm\n"
            "    return grads, norm",
        ),
        also=("clip_norm_sum",),
    ),
    changed(
        "adam_step", "v_beta1_both", ("beta2 * v + (1 - beta2) * grad", "beta1 * v + (1 - beta1) * grad")
    ),
    # their mirrors, written beside the grader: AdamW's v with beta1, and Adam's update added in place
    changed(
        "adamw_step", "v_beta1_both", ("beta2 * v + (1 - beta2) * grad", "beta1 * v + (1 - beta1) * grad")
    ),
    changed(
        "adam_step",
        "writes_input",
        (
            "    return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v",
            "    param += lr * m_hat / (xp.sqrt(v_hat) + eps)\n    return param.copy(), m, v",
        ),
        also=("update_sign",),
    ),
]

# a seventeenth cold learner's: the decay sqrt(warmup / step) beside the line in a branch of its own, the
# warm-up's line (step / warmup) ** 1.5 (each said before by its region alone), the constants kept from the
# first call (said as not used, not as kept), a norm of each row (norm(g, axis=-1)), the bias correction a
# product beside |v_hat| and AdamW's decayed parameter returned without Adam's update (no cause said before)
COLD_ROUNDS += [
    changed(
        "noam_learning_rate",
        "noam_decay_warmup",
        (
            "    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "    if step <= warmup:\n        return d_model ** -0.5 * step * warmup ** -1.5\n"
            "    return d_model ** -0.5 * math.sqrt(warmup / step)",
        ),
    ),
    changed(
        "noam_learning_rate",
        "arguments_unused",
        (
            "    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "    if not _kept:\n        _kept.extend([d_model ** -0.5, warmup ** -1.5])\n"
            "    return _kept[0] * min(step ** -0.5, step * _kept[1])",
        ),
        ("def noam_learning_rate", "_kept = []\n\n\ndef noam_learning_rate"),
    ),
    changed(
        "noam_learning_rate", "noam_line_ratio_power", ("step * warmup ** -1.5", "(step / warmup) ** 1.5")
    ),
    changed(
        "clip_by_global_norm",
        "clip_other_norm",
        (
            "math.sqrt(sum(float((g * g).sum()) for g in grads))",
            "math.sqrt(sum(float(np.linalg.norm(g, axis=-1).sum()) ** 2 for g in grads))",
        ),
    ),
    changed(
        "adam_step",
        "bias_product",
        ("(1 - beta1 ** t)", "(1 - beta1 * t)"),
        ("(1 - beta2 ** t)", "(1 - beta2 * t)"),
        ("xp.sqrt(v_hat)", "xp.sqrt(xp.abs(v_hat))"),
    ),
    changed(
        "adamw_step",
        "adamw_update_lost",
        ("    param = param * (1 - lr * weight_decay)\n", "    decayed = param * (1 - lr * weight_decay)\n"),
        ("    return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v", "    return decayed, m, v"),
    ),
    # their mirror, written beside the grader: the decay sqrt(warmup / step) inside the min
    changed("noam_learning_rate", "noam_decay_warmup", ("min(step ** -0.5,", "min((warmup / step) ** 0.5,")),
]

# an eighteenth cold learner's: the decay counted from the warm-up's end in a branch, warmup^-1.5 read as
# / warmup * 1.5, total and min_lr swapped in the signature, a flag set past the warm-up that a later case
# shows, and AdamW's decay applied twice with the decayed parameter in the gradient
COLD_ROUNDS += [
    changed(
        "noam_learning_rate",
        "noam_decay_from_warmup",
        (
            "    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "    if step <= warmup:\n        lr = step * warmup ** -1.5\n"
            "    else:\n        lr = (step - warmup) ** -0.5\n"
            "    return d_model ** -0.5 * lr",
        ),
    ),
    changed("noam_learning_rate", "noam_line_times_power", ("step * warmup ** -1.5", "step / warmup * 1.5")),
    changed(
        "warmup_cosine_learning_rate",
        "arguments_swapped",
        ("(step, peak, warmup, total, min_lr)", "(step, peak, warmup, min_lr, total)"),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "keeps_state_later",
        (
            "    if step <= warmup:\n",
            "    global _warmed_up\n    if step > warmup:\n        _warmed_up = True\n    if not _warmed_up:\n",
        ),
        ("def warmup_cosine_learning_rate", "_warmed_up = False\n\n\ndef warmup_cosine_learning_rate"),
    ),
    changed(
        "adamw_step",
        "decay_twice",
        (
            "    m = beta1 * m + (1 - beta1) * grad\n",
            "    grad = grad + weight_decay * param\n    m = beta1 * m + (1 - beta1) * grad\n",
        ),
    ),
    # its mirror, written beside the grader: the schedule's constants held from the first call in a flag
    changed(
        "noam_learning_rate",
        "keeps_state_later",
        (
            "    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "    global _seen_decay\n    _seen_decay = _seen_decay or step > warmup\n"
            "    return d_model ** -0.5 * (step ** -0.5 if _seen_decay else step * warmup ** -1.5)",
        ),
        ("def noam_learning_rate", "_seen_decay = False\n\n\ndef noam_learning_rate"),
    ),
]

# a nineteenth cold learner's: the rate after the warm-up warmup ** -0.5 where step ** -0.5 belongs, the rate read
# from a table of steps 0 to total - 1 one step behind, clipping by a loop's running norm beside a write into
# the arrays, and the norm sq ** 1/2 (the sum of squares halved)
COLD_ROUNDS += [
    changed(
        "noam_learning_rate",
        "noam_flat",
        (
            "    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "    if step < warmup:\n        return d_model ** -0.5 * step * warmup ** -1.5\n"
            "    return d_model ** -0.5 * warmup ** -0.5",
        ),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_table_behind",
        (
            "    if step <= warmup:\n        return peak * step / warmup\n"
            "    progress = min((step - warmup) / (total - warmup), 1.0)\n"
            "    return min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * progress))",
            "    rates = []\n    for s in range(total):\n"
            "        if s <= warmup:\n            rates.append(peak * s / warmup)\n"
            "        else:\n            p = (s - warmup) / (total - warmup)\n"
            "            rates.append(min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * p)))\n"
            "    return rates[min(step, total) - 1]",
        ),
    ),
    changed(
        "clip_by_global_norm",
        "writes_input",
        (
            "    norm = math.sqrt(sum(float((g * g).sum()) for g in grads))\n"
            "    scale = max_norm / norm if norm > max_norm else 1.0\n"
            "    return [g * scale for g in grads], norm",
            "    total = 0.0\n    for g in grads:\n        total += float((g * g).sum())\n"
            "        norm = math.sqrt(total)\n"
            "        if norm > max_norm:\n            g *= max_norm / norm\n    return grads, norm",
        ),
        also=("clip_running_norm",),
    ),
    changed(
        "clip_by_global_norm",
        "clip_other_norm",
        (
            "math.sqrt(sum(float((g * g).sum()) for g in grads))",
            "float(sum(float((g * g).sum()) for g in grads) ** 1 / 2)",
        ),
    ),
]

# a twentieth cold learner's: step overwritten by step ** -0.5 before the line is made from it, the width factor
# left out of a branch's warm-up line, the cosine a full turn, the arrays' norms added unsquared under a root,
# m's weights swapped alone, and the AdamW paper's Algorithm 2 with both eta and alpha set to lr
COLD_ROUNDS += [
    changed(
        "noam_learning_rate",
        "noam_warmup_outside",
        (
            "    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "    step = step ** -0.5\n    warm = step * warmup ** -1.5\n    return d_model ** -0.5 * min(step, warm)",
        ),
    ),
    changed(
        "noam_learning_rate",
        "noam_front_decay_only",
        (
            "    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
            "    if step < warmup:\n        return step * warmup ** -1.5\n    return d_model ** -0.5 * step ** -0.5",
        ),
    ),
    changed(
        "warmup_cosine_learning_rate",
        "cosine_full_turn",
        ("math.cos(math.pi * progress)", "math.cos(2 * math.pi * progress)"),
    ),
    changed(
        "clip_by_global_norm",
        "clip_other_norm",
        (
            "math.sqrt(sum(float((g * g).sum()) for g in grads))",
            "math.sqrt(sum(float(np.linalg.norm(g)) for g in grads))",
        ),
    ),
    changed(
        "adam_step", "m_weights_swapped", ("beta1 * m + (1 - beta1) * grad", "(1 - beta1) * m + beta1 * grad")
    ),
    changed(
        "adamw_step",
        "adamw_lr_twice",
        ("    param = param * (1 - lr * weight_decay)\n", ""),
        (
            "    return param - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v",
            "    return param - lr * (lr * m_hat / (xp.sqrt(v_hat) + eps) + weight_decay * param), m, v",
        ),
    ),
]
