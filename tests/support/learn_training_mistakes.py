"""Plausible wrong training rungs (the schedules, clipping, the Adam and AdamW step), rung by rung, each
written as a learner would write it, with the cause `learn check` should name: a key of
numpy_transformer.workbook.SENTENCES. Written beside the grader, with the first two cold learners'
among them (marked "cold"); TRAINING_MISTAKES holds these and the later learners' rounds
(learn_training_cold_rounds.py)."""

from __future__ import annotations

from learn_training_cold_rounds import COLD_ROUNDS
from learn_training_rungs import TrainingMistake, changed

BY_RUNG: list[TrainingMistake] = [
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
    changed("warmup_cosine_learning_rate", "cosine_half_missing", ("0.5 * (peak", "(peak")),
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
    changed(
        "noam_learning_rate", "noam_line_ratio_power", ("step * warmup ** -1.5", "(step / warmup) ** 1.5")
    ),
    changed("noam_learning_rate", "noam_line", ("step * warmup ** -1.5", "step ** 2 * warmup ** -2.5")),
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

TRAINING_MISTAKES = BY_RUNG + COLD_ROUNDS
