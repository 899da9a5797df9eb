"""The training rungs' functions written once each with their known mistakes as keywords: with no
keyword each is the textbook's (numpy_transformer.workbook.optimiser), with a keyword the mistake it
names. From them, each rung's mistakes alone and two together (``*_MISTAKES``, ``*_PAIRS``), the
keys of SENTENCES beside the functions that make them; the exercises (``training_exercises``) declare
them, and the symptoms (``training_symptoms``) reproduce what a wrong rung's numbers show with them."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy

from ...backend import Array, get_array_module

# -- the schedules --------------------------------------------------------------------------------


def noam(step: int, d_model: int, warmup: int, shift: int = 0, power: float = -1.5, scale: float = -0.5,
         pick: Callable = min, flat: bool = False, first_zero: bool = False, halved: str = "",
         line_swapped: bool = False, line_halved: bool = False, warmup_outside: bool = False,
         whole_line: bool = False, front_on: str = "", rooted: bool = False,
         decay_power: float = -0.5, branched: str = "", held: bool = False, decay_scaled: bool = False,
         ratio_powered: bool = False, decay_from: bool = False, times_power: bool = False,
         bare_line: bool = False) -> float:  # fmt: skip
    """noam_learning_rate with the mistakes its keywords say (flat: the warm-up's line held at its peak,
    pick(step, warmup) * warmup^power, in place of the decay; first_zero: 0 where the shifted step is
    below 1, not the rate at step 1; halved: ``x ** -1/2``, (x ** -1) / 2, in the "front", the "decay" or
    "both"; line_swapped: the line warmup * step^power; line_halved: the line's ``warmup ** -3/2``,
    (warmup ** -3) / 2; warmup_outside: warmup^power outside the min, min(decay, step) * warmup^power,
    whatever ``pick``; whole_line: the line divided in whole numbers, step // warmup^-power; front_on: the
    factor in front on one curve alone, the "decay" or the "line"; rooted: the square root over the whole
    product, 1 / sqrt(d_model * min(...)), the min's curves under the root too; decay_power: the decay's
    power of the step, -1 where (-1 // 2) floors it; branched: the line while step < warmup ("below") or
    step <= warmup ("through"), the decay after it, in place of the min: the same where both curves are
    right; held: no warm-up, the line held at the rate the two curves meet at, warmup^(power + 1), as
    max(step, warmup)^-0.5 gives;
    decay_scaled: the decay times warmup^0.5, sqrt(warmup / step); ratio_powered: the line the power of the
    ratio, (step / warmup)^-power; decay_from: past warmup the decay of the steps since it, (step -
    warmup)^decay_power; times_power: the line step / warmup * -power, warmup^power read as a division;
    bare_line: a branch's line without the factor in front)."""
    step += shift
    if first_zero and step < 1:
        return 0.0
    step = max(step, 1)
    front = d_model ** (2 * scale) / 2 if halved in ("front", "both") else d_model**scale
    if flat:
        return float(front * pick(step, warmup) * warmup**power)
    decay = step**-1 / 2 if halved in ("decay", "both") else step**decay_power
    decay = decay * warmup**0.5 if decay_scaled else decay
    decay = (step - warmup) ** decay_power if decay_from and step > warmup else decay
    warmups = warmup ** (2 * power) / 2 if line_halved else warmup**power
    if warmup_outside:  # min kept: max(step^-0.5, step) * warmup^power is the line alone, no decay at all
        return float(front * min(decay, step) * warmups)
    line = warmup * step**power if line_swapped else step * warmups
    line = step // warmup**-power if whole_line else line
    line = warmup ** (power + 1) if held else line
    line = (step / warmup) ** -power if ratio_powered else line
    line = step / warmup * -power if times_power else line
    if front_on:  # the factor on one curve alone, the other left at d_model^0
        return float(pick(front * decay, line) if front_on == "decay" else pick(decay, front * line))
    if branched:
        warming = step < warmup or (branched == "through" and step == warmup)
        if bare_line and warming:
            return float(line)
        return float(front * (line if warming else decay) ** (-0.5 if rooted else 1.0))
    return float(front * pick(decay, line) ** (-0.5 if rooted else 1.0))


NOAM_KNOBS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("schedule_off_by_one", {"shift": -1}),
    ("schedule_off_by_one", {"shift": 1}),
    ("noam_warmup_power", {"power": -0.5}),
    ("noam_warmup_linear", {"power": -1.0}),
    ("noam_warmup_held", {"held": True, "front_on": ""}),  # beside a factor on one curve: a constant
    # never paired with the factor in front on one curve, the warm-up held or another power of warmup: beside
    # them the decay is never the smaller on the cases (a rate that never decays, or held), or the pair is
    # the textbook times sqrt(warmup) (a factor in front)
    ("noam_decay_warmup", {"decay_scaled": True, "front_on": "", "held": False, "power": -1.5}),
    (
        "noam_decay_warmup",
        {"decay_scaled": True, "branched": "through", "front_on": "", "held": False, "power": -1.5},
    ),
    ("noam_line_ratio_power", {"ratio_powered": True}),
    ("noam_scale_missing", {"scale": 0.0}),
    ("noam_scale_inverted", {"scale": 0.5}),
    ("noam_max", {"pick": max}),
    ("noam_warmup_sign", {"power": 1.5}),
    ("noam_flat", {"flat": True}),
    ("schedule_off_by_one", {"shift": -1, "first_zero": True}),
    ("noam_power_precedence", {"halved": "front"}),
    ("noam_power_precedence", {"halved": "decay"}),
    ("noam_power_precedence", {"halved": "both"}),
    ("noam_line_swapped", {"line_swapped": True}),
    ("noam_warmup_squared", {"power": -2.0}),
    ("noam_line_precedence", {"line_halved": True}),
    ("noam_warmup_outside", {"warmup_outside": True}),
    ("noam_whole_line", {"whole_line": True}),
    ("noam_whole_warmup", {"whole_line": True, "branched": "below"}),  # 0 in the warm-up, right after it
    ("noam_front_decay_only", {"front_on": "decay"}),
    ("noam_front_line_only", {"front_on": "line"}),
    ("noam_root_over_all", {"rooted": True}),
    # powers written (-1 // 2) and (-3 // 2) in two or three places at once, floored to -1 and -2
    ("noam_floored_powers", {"scale": -1.0, "decay_power": -1.0, "power": -2.0}),
    ("noam_floored_powers", {"scale": -1.0, "decay_power": -1.0}),
    ("noam_floored_powers", {"scale": -1.0, "power": -2.0}),
    ("noam_floored_powers", {"decay_power": -1.0, "power": -2.0}),
    # last: a pair they make that another pair's numbers has says the earlier one
    ("noam_line_times_power", {"times_power": True}),
    ("noam_front_decay_only", {"bare_line": True, "branched": "below"}),
    ("noam_front_decay_only", {"bare_line": True, "branched": "through"}),
    # a branch's decay alone counts from the warm-up's end: never beside a min (front_on, flat, warmup_outside)
    (
        "noam_decay_from_warmup",
        {"decay_from": True, "branched": "through", "front_on": "", "flat": False, "warmup_outside": False},
    ),
)


def cosine(step: int, peak: float, warmup: int, total: int, min_lr: float, shift: int = 0, start: bool = False,
           half: float = 0.5, floor: str = "min_lr", clamp: Callable | None = min, ramp_shift: int = 0,
           past_end: str = "", quarter: bool = False, whole_steps: bool = False, turn: float = math.pi,
           height: str = "", rising: bool = False, over_total: bool = False, decay_shift: int = 0,
           whole_progress: bool = False, floor_weight: float = 1.0,
           unbracketed_progress: bool = False, linear: bool = False, ramp_over: int = 0,
           floor_all: bool = False, branch_below: bool = False, whole_rate: bool = False,
           curves_min: bool = False, table: bool = False) -> float:  # fmt: skip
    """warmup_cosine_learning_rate with the mistakes its keywords say (floor: "min_lr" right, "zero" the
    cosine to 0, "max" the cosine to 0 held up by max(min_lr, ...), "ratio" to peak * min_lr; past_end: the
    rate from total on, "min_lr" or "zero", ahead of the cosine; turn: the angle at progress 1, pi right;
    height: the half cosine's "peak" alone, "unbracketed" min_lr + 0.5 * peak - min_lr * (1 + cos), or
    "floor_inside" (min_lr + 0.5 * (peak - min_lr)) * (1 + cos), or "wave_unbracketed" min_lr + 0.5 * (peak
    - min_lr) * 1 + cos; linear: cos(pi) * progress, the progress outside the cosine; floor_weight: min_lr's
    weight where it is added; rising: 1 - cos; the progress divided by total (over_total), shifted
    (decay_shift), divided in whole numbers (whole_progress), without its brackets, step - warmup / (total -
    warmup) (unbracketed_progress), or held at 1 by another function (clamp; None: not held); ramp_shift: the
    warm-up's line at step + ramp_shift, held at peak from step warmup on; ramp_over: the line divided by
    warmup + ramp_over; floor_all: every rate held up at min_lr, max(lr, min_lr), the warm-up's too;
    branch_below: the warm-up's branch taken while step < warmup, step warmup left to the decay; whole_rate:
    the warm-up's rate divided in whole numbers, peak * step // warmup; curves_min: no branch, the smaller
    of the warm-up's line and the decay at every step, the progress below 0 in the warm-up; table: the rate
    of a table of steps 0 to total - 1 read at min(step, total) - 1, one step behind and held past total)."""
    step = min(step, total) - 1 if table else step + shift

    def warming_up() -> float:
        if whole_steps:
            return peak * (step // max(warmup, 1))
        # the line held at peak from step warmup on, where a branch leaves it; climbing on beside a min
        reached = step + ramp_shift if curves_min else min(step + ramp_shift, warmup)
        line = peak * reached / max(warmup + ramp_over, 1)
        if whole_rate:  # floored whole, the rate itself: peak * step // warmup
            line = peak * reached // max(warmup + ramp_over, 1)
        return max(line, min_lr) if floor_all else line

    if not curves_min and (step < warmup or (step == warmup and not branch_below)):
        return warming_up()
    if past_end and step >= total:
        return min_lr if past_end == "min_lr" else 0.0
    begin = 0 if start else warmup
    # a length of 0 alone guarded: with total below warmup (mixed up, or held) the progress is below 0, as
    # a learner's own division gives it
    length, moved = (total if over_total else total - begin) or 1, step - begin + decay_shift
    progress = moved // length if whole_progress else moved / length
    if unbracketed_progress:  # / binds tighter than -: only warmup is divided
        progress = step + decay_shift - begin / length
    progress = clamp(progress, 1.0) if clamp else progress
    low = {"min_lr": min_lr, "ratio": peak * min_lr}.get(floor, 0.0)
    turned = math.cos(turn) * progress if linear else math.cos(turn * progress)
    wave = 1.0 - turned if rising else 1.0 + turned
    if quarter:
        rate = low + (peak - low) * math.cos(0.5 * turn * progress)
    elif height == "unbracketed":
        rate = low + half * peak - low * wave
    elif height == "floor_inside":
        rate = (low + half * (peak - low)) * wave
    elif height == "wave_unbracketed":  # * binds tighter than +: the cosine added whole, unscaled
        rate = low + half * (peak - low) + wave - 1.0
    elif half:
        rate = floor_weight * low + half * (peak if height == "peak" else peak - low) * wave
    else:
        rate = low + (peak - low) * math.cos(turn * progress)
    rate = max(min_lr, rate) if floor == "max" else rate
    return min(warming_up(), rate) if curves_min else rate


COSINE_KNOBS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("schedule_off_by_one", {"shift": -1}),
    ("schedule_off_by_one", {"shift": 1}),
    ("cosine_progress", {"start": True}),
    ("cosine_half", {"half": 0.0}),
    ("cosine_half_missing", {"half": 1.0}),
    ("cosine_floor", {"floor": "zero"}),
    ("cosine_floor", {"floor": "zero", "past_end": "min_lr"}),
    ("warmup_off_by_one", {"ramp_shift": -1}),
    ("warmup_off_by_one", {"ramp_shift": -1, "branch_below": True}),  # if step < warmup: peak at warmup
    ("cosine_clamp", {"clamp": None}),
    ("cosine_min_of_curves", {"curves_min": True}),
    ("cosine_quarter", {"quarter": True}),
    ("cosine_floor_max", {"floor": "max"}),
    ("warmup_whole_steps", {"whole_steps": True}),
    ("cosine_pi", {"turn": 1.0}),
    ("cosine_end_zero", {"past_end": "zero"}),
    ("cosine_height", {"height": "peak"}),
    ("cosine_height", {"height": "peak", "branch_below": True}),  # if step < warmup: peak + min_lr at warmup
    ("cosine_unbracketed", {"height": "unbracketed"}),
    ("cosine_rising", {"rising": True}),
    ("cosine_min_ratio", {"floor": "ratio"}),
    ("cosine_over_total", {"over_total": True}),
    ("cosine_decay_off_by_one", {"decay_shift": -1}),
    ("cosine_decay_off_by_one", {"decay_shift": 1}),
    ("cosine_whole_progress", {"whole_progress": True}),
    ("cosine_clamp_max", {"clamp": max}),
    ("cosine_floor_bracketed", {"height": "floor_inside"}),
    ("cosine_floor_halved", {"floor_weight": 0.5}),
    ("cosine_floor_not_added", {"floor_weight": 0.0}),
    ("warmup_off_by_one", {"ramp_shift": 1}),
    ("cosine_progress_unbracketed", {"unbracketed_progress": True}),
    ("cosine_wave_unbracketed", {"height": "wave_unbracketed"}),
    ("cosine_linear", {"linear": True}),
    # ramp_shift named so that no pair shifts the step too: those lines are warmup_span's, read from the numbers
    ("warmup_divisor", {"ramp_over": 1, "ramp_shift": 0}),
    ("warmup_divisor", {"ramp_over": -1, "ramp_shift": 0}),
    ("cosine_degrees", {"turn": 180.0}),
    ("cosine_floor_warmup", {"floor_all": True}),
    ("warmup_whole_rate", {"whole_rate": True}),
    # last: a pair they make that another pair's numbers has says the earlier one
    ("cosine_table_behind", {"table": True, "shift": 0}),
    ("cosine_full_turn", {"turn": 2 * math.pi}),
)


def _knob_mistakes(function: Callable, knobs: tuple[tuple[str, dict[str, Any]], ...]) -> tuple[
    tuple[tuple[str, Callable], ...], tuple[tuple[tuple[str, str], Callable], ...]
]:  # fmt: skip
    """``function`` with each of ``knobs`` (a mistake's key, its keywords) alone, and with two of different
    keys and keywords together."""
    alone = tuple((key, partial(function, **words)) for key, words in knobs)
    together = tuple(
        ((first, second), partial(function, **words, **more))
        for index, (first, words) in enumerate(knobs)
        for second, more in knobs[index + 1 :]
        if first != second and not set(words) & set(more)
    )
    return alone, together


NOAM_MISTAKES, NOAM_PAIRS = _knob_mistakes(noam, NOAM_KNOBS)
COSINE_MISTAKES, COSINE_PAIRS = _knob_mistakes(cosine, COSINE_KNOBS)


# -- clipping -------------------------------------------------------------------------------------


def global_norm(grads: list[Array], norm: str) -> float:
    """The norm of every gradient together, or the mistaken one ``norm`` says."""
    xp = get_array_module()
    squares = [float((g * g).sum()) for g in grads]
    if norm == "sum":  # the arrays' own norms added
        return sum(math.sqrt(square) for square in squares)
    if norm == "rms":
        return math.sqrt(sum(squares) / sum(g.size for g in grads))
    if norm == "means":  # each array's mean of squares, added
        return math.sqrt(sum(square / max(g.size, 1) for g, square in zip(grads, squares)))
    if norm == "squared":
        return sum(squares)
    if norm == "halved":  # sq ** 1/2, read (sq ** 1) / 2
        return sum(squares) / 2
    if norm == "root_of_norms":  # the arrays' own norms, not squared, under the root
        return math.sqrt(sum(math.sqrt(square) for square in squares))
    if norm == "sums":  # each array's sum, squared
        return math.sqrt(sum(float(g.sum()) ** 2 for g in grads))
    if norm == "l1":
        return sum(float(xp.abs(g).sum()) for g in grads)
    if norm == "max":  # the largest entry's size, of every array
        return max((float(xp.abs(g).max()) for g in grads if g.size), default=0.0)
    if norm in ("first", "last"):  # one array's own norm, the others left out
        return math.sqrt(squares[0 if norm == "first" else -1]) if squares else 0.0
    if norm == "rows":  # each array's norm(g, axis=-1): a norm per row, the rows' norms added
        return math.sqrt(sum(float(xp.linalg.norm(g, axis=-1).sum()) ** 2 for g in grads))
    if norm == "spectral":  # a matrix's norm(g, 2): its largest singular value
        squares = [float(xp.linalg.norm(g, 2)) ** 2 if g.ndim == 2 else s for g, s in zip(grads, squares)]
    return math.sqrt(sum(squares))


def clip(grads: list[Array], max_norm: float, norm: str = "", scale: str = "", returned: str = "") -> tuple[
    list[Array], float
]:  # fmt: skip
    """clip_by_global_norm with the mistakes its keywords say: the norm's (``norm``), the scale's
    (``scale``; "unguarded": min(1, max_norm / norm), which divides by 0 where every gradient is 0; "whole":
    max_norm // norm, 0 wherever it clips; "reversed": scaled where the norm is under max_norm; "running":
    each array by the norm of it and the arrays before it), the norm
    returned (``returned``: "after", the clipped gradients' norm)."""
    xp = get_array_module()
    total = global_norm(grads, norm)
    if scale == "per_tensor":
        own = [global_norm([g], norm) for g in grads]
        clipped = [g * (max_norm / n) if n > max_norm else g.copy() for g, n in zip(grads, own)]
    elif scale == "by_value":
        clipped = [xp.clip(g, -max_norm, max_norm) for g in grads]
    elif scale == "running":  # each array by the norm of it and those before it, a loop's running total
        so_far = [global_norm(grads[: index + 1], norm) for index in range(len(grads))]
        clipped = [g * (max_norm / n) if n > max_norm else g.copy() for g, n in zip(grads, so_far)]
    else:
        over = total * total > max_norm if scale == "compared_squared" else total > max_norm
        over = total < max_norm if scale == "reversed" else over
        factor = max_norm / total if over or scale == "always" else 1.0
        factor = 1.0 / factor if scale == "inverted" else factor
        factor = min(1.0, max_norm / total) if scale == "unguarded" else factor
        factor = max_norm // total if scale == "whole" and over else factor  # 0 wherever it clips
        clipped = [g * factor for g in grads]
    return clipped, global_norm(clipped, norm) if returned == "after" else total


CLIP_KNOBS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("clip_per_tensor", {"scale": "per_tensor"}),
    ("clip_by_value", {"scale": "by_value"}),
    ("clip_squared", {"norm": "squared"}),
    ("clip_rms", {"norm": "rms"}),
    ("clip_inverted", {"scale": "inverted"}),
    ("clip_always", {"scale": "always"}),
    ("clip_compared_squared", {"scale": "compared_squared"}),
    ("clip_norm_after", {"returned": "after"}),
    ("clip_norm_sum", {"norm": "sum"}),
    ("clip_spectral", {"norm": "spectral"}),
    ("clip_l1", {"norm": "l1"}),
    ("clip_means", {"norm": "means"}),
    ("clip_sum_squared", {"norm": "sums"}),
    ("clip_zero_norm", {"scale": "unguarded"}),
    ("clip_whole_scale", {"scale": "whole"}),
    ("clip_reversed", {"scale": "reversed"}),
    # last: a pair it makes that another pair's numbers has says the earlier one
    ("clip_running_norm", {"scale": "running"}),
)


CLIP_MISTAKES, CLIP_PAIRS = _knob_mistakes(clip, CLIP_KNOBS)
OTHER_NORMS = {  # the norms global_norm computes in place of the global one, each said as what it is
    "max": "the largest entry's size, max |g| (an infinity norm)",
    "l1": "the sum of the entries' sizes |g| (an L1 norm)",
    "squared": "the sum of every entry squared, without its square root",
    "root_of_norms": "the square root of the sum of the arrays' own norms, each added unsquared (the norms "
    "squared, norm(g) ** 2, are what the root sums)",
    "halved": "the sum of every entry squared, halved, as sq ** 1/2 gives (Python reads it (sq ** 1) / 2, where "
    "the square root is sq ** 0.5)",
    "sum": "the sum of the arrays' own norms",
    "rms": "the root of the mean of the squares (a root mean square)",
    "means": "the root of the sum of each array's mean of squares",
    "sums": "the root of the sum of each array's sum squared",
    "spectral": "the root of the sum of each matrix's largest singular value squared",
    "rows": "the root of the sum of each array's rows' norms added, squared (norm(g, axis=-1) takes one norm "
    "per row)",
    "last": "the last array's own norm alone, the others left out (as a loop's total = ... in place of "
    "total += ... keeps only the last array's sum of squares)",
    "first": "the first array's own norm alone, the others left out (as a loop that returns, or stops, "
    "after its first array gives)",
}


# -- Adam and AdamW -------------------------------------------------------------------------------


def adam(param: Array, grad: Array, m: Array, v: Array, t: int, lr: float, beta1: float, beta2: float,
         eps: float, *, weight_decay: float = 0.0, decay: str = "", decay_rate: str = "", betas: str = "",
         weights: str = "", v_of: str = "", first: bool = False, stale: str = "", t_shift: int = 0,
         correction: str = "", denominator: str = "", ascent: bool = False, returned: str = "",
         subtracted: bool = False, restart: bool = False, grows: bool = False,
         t_floor: bool = False, unbracketed: str = "") -> tuple[Array, Array, Array]:  # fmt: skip
    """One AdamW step (Adam where weight_decay is 0) with the mistakes its keywords say, each of one part
    of the step: the decay's place (``decay``; "adaptive": weight_decay * param added to m_hat; "gradient":
    lr * weight_decay * grad taken away; "shrunk_gradient": the gradient shrunk in the parameter's
    place; "twice" L2 in the gradient beside the decay, "twice_shrunk" the L2 of the decayed parameter), its
    rate (``decay_rate``; "step_size": lr / (1 - beta1^t) in
    place of lr, "paper_step_size" lr * sqrt(1 - beta2^t) / (1 - beta1^t), "divided": param / (1 + lr *
    weight_decay), "unbracketed": param * (1 - lr) * weight_decay, "compounded": param * (1 - lr *
    weight_decay) ** t) and its form (``subtracted``: lr * weight_decay taken away, not a share; ``grows``:
    the share added), the betas, the
    moments' weights and what v averages (``v_of``), the moments set at t = 1 (``first``), restarted from
    zeros (``restart``) or the old ones corrected (``stale``: "both", "m" or "v"), t shifted (``t_floor``:
    held at 1 or more), the bias correction ("unbracketed_m",
    "_v", "_both": m / 1 - beta1^t, beta^t taken away; "product_m", "_v", "_both": 1 - beta * t, the power
    a product; "bracketed_power": (1 - beta)^t), a moment's weight without its brackets (``unbracketed``:
    "m", "v" or "both": beta * m + 1 - beta * g, 1 added and beta * g taken away), the denominator, the
    update's sign, what is returned ("corrected": the hats; "swapped": v and m; "handed": the moments as they
    were handed in; "decayed": the parameter decayed, Adam's update not applied to it)."""
    xp = get_array_module()
    handed = (m, v)
    shrink = {
        "unscaled": weight_decay,
        "step_size": lr / (1.0 - beta1**t) * weight_decay,
        "paper_step_size": lr * math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t) * weight_decay,
        "divided": lr * weight_decay / (1.0 + lr * weight_decay),  # param / (1 + lr wd), as a share taken
        "unbracketed": 1.0 - (1.0 - lr) * weight_decay,  # param * (1 - lr) * weight_decay, as a share taken
        "compounded": 1.0 - (1.0 - lr * weight_decay) ** t,
    }.get(decay_rate, lr * weight_decay)
    shrink = -shrink if grows else shrink
    if decay in ("in_moment", "twice"):
        grad = grad + weight_decay * param
    if decay == "moments":
        m, v = m * (1.0 - shrink), v * (1.0 - shrink)
    decayed = param  # the parameter as it was handed in: what "adaptive" decays
    if decay == "gradient":
        param = param - shrink * grad
    elif decay == "shrunk_gradient":  # the gradient shrunk where the parameter should be
        grad = grad * (1.0 - shrink)
    elif decay not in ("in_moment", "after", "missing", "adaptive"):
        param = param - shrink if subtracted else param * (1.0 - shrink)
    shrunk = param  # the parameter after the decay, before Adam's update: what "decayed" returns
    if decay == "twice_shrunk":  # L2 of the parameter as the decay left it
        grad = grad + weight_decay * shrunk
    b1, b2 = (beta2, beta1) if betas else (beta1, beta2)
    w1, w2 = {
        "one": (1.0, 1.0),
        "m_one": (1.0, 1.0 - b2),
        "v_one": (1.0 - b1, 1.0),
        "v_beta1": (1.0 - b1, 1.0 - b1),
        "v_beta1_both": (1.0 - b1, 1.0 - b1),
        "m_beta2": (1.0 - b2, 1.0 - b2),
        "swapped": (b1, b2),
        "m_swapped": (b1, 1.0 - b2),
    }.get(weights, (1.0 - b1, 1.0 - b2))
    k1, k2 = (1.0 - b1, 1.0 - b2) if weights == "swapped" else (b1, b2)  # what the old moments keep
    k1 = 1.0 - b1 if weights == "m_swapped" else k1
    k2 = b1 if weights == "v_beta1_both" else k2
    if restart:  # the moments handed in ignored: each step averages from zeros again
        m, v = xp.zeros_like(m), xp.zeros_like(v)
    new_m = k1 * m + w1 * grad
    if unbracketed in ("m", "both"):  # - binds looser than *: 1 added, beta1 * grad taken away
        new_m = k1 * m + 1.0 - b1 * grad
    averaged = {
        "grad": grad,
        "abs": xp.abs(grad),
        "m": new_m * new_m,
        "weight_squared": w2 * grad * grad,
        "doubled": 2.0 * grad,  # grad * 2 written for grad ** 2
    }.get(v_of, grad * grad)  # weight_squared: ((1 - beta2) * g) ** 2, the weight squared with the gradient
    new_v = k2 * v + w2 * averaged
    if unbracketed in ("v", "both"):
        new_v = k2 * v + 1.0 - b2 * averaged
    if first and t == 1:  # the moments set to the gradient, not averaged from 0
        new_m, new_v = grad, grad * grad
    if betas == "in_moments":  # the corrections right
        b1, b2 = beta1, beta2
    moments = (m if stale in ("both", "m") else new_m, v if stale in ("both", "v") else new_v)
    step = max(t + t_shift, 1) if t_floor else t + t_shift
    c1, c2 = 1.0 - b1**step, 1.0 - b2**step
    p1, p2 = 1.0 - b1 * step, 1.0 - b2 * step  # the power written as a product, beta * t
    q1, q2 = (1.0 - b1) ** step, (1.0 - b2) ** step  # the brackets around 1 - beta
    corrections = {
        "product_m": (p1, c2),
        "product_v": (c1, p2),
        "product_both": (p1, p2),
        "bracketed_power": (q1, q2),
        "none": (1.0, 1.0),
        "m_only": (c1, 1.0),
        "v_only": (1.0, c2),
        "swapped": (c2, c1),
        "beta1_both": (c1, c1),
        "beta2_both": (c2, c2),
    }.get(correction, (c1, c2))
    if first and t == 1:  # the gradient itself needs no correction
        corrections = (1.0, 1.0)
    with numpy.errstate(all="ignore"):
        if correction == "multiplied":
            m_hat, v_hat = moments[0] * c1, moments[1] * c2
        elif correction.startswith("unbracketed"):  # m / 1 - beta1 ** t: beta^t taken away, not divided by
            lost = {"unbracketed_m": (True, False), "unbracketed_v": (False, True)}.get(
                correction, (True, True)
            )
            m_hat = moments[0] - b1**step if lost[0] else moments[0] / c1
            v_hat = moments[1] - b2**step if lost[1] else moments[1] / c2
        else:
            m_hat, v_hat = moments[0] / corrections[0], moments[1] / corrections[1]
        if decay == "adaptive":  # the decay put through the adaptive step with the moment
            m_hat = m_hat + weight_decay * decayed
        rate = lr * lr if decay_rate == "lr_twice" else lr  # the AdamW paper's eta and alpha both lr
        update = _update(m_hat, v_hat, rate, eps, denominator, corrections[1])
    new_param = param + update if ascent else param - update
    new_param = new_param + eps if denominator == "eps_outside" else new_param
    if decay == "after":
        new_param = new_param - shrink if subtracted else new_param * (1.0 - shrink)
    if returned == "corrected":
        return new_param, m_hat, v_hat
    if returned == "swapped":
        return new_param, new_v, new_m
    if returned == "handed":
        return new_param, *handed
    if returned == "decayed":
        return shrunk, new_m, new_v
    return new_param, new_m, new_v


def _update(m_hat: Array, v_hat: Array, lr: float, eps: float, denominator: str, correction: float) -> Array:
    """lr * m_hat / (sqrt(v_hat) + eps), or with the mistake in its denominator that ``denominator`` says
    ("eps_outside": eps added to the parameter after it, "eps_outside_lr": lr * (m_hat / sqrt(v_hat) + eps),
    "eps_added": lr * m_hat / sqrt(v_hat) + eps, eps taken away with the update)."""
    xp = get_array_module()
    if denominator == "eps_inside":
        return lr * m_hat / xp.sqrt(v_hat + eps)
    if denominator == "abs_root":  # the root of |v_hat|, where v_hat can be negative
        return lr * m_hat / (xp.sqrt(xp.abs(v_hat)) + eps)
    if denominator == "no_sqrt":
        return lr * m_hat / (v_hat + eps)
    if denominator == "eps_outside":
        return lr * m_hat / xp.sqrt(v_hat)
    if denominator == "eps_added":
        return lr * m_hat / xp.sqrt(v_hat) + eps
    if denominator == "eps_outside_lr":
        return lr * (m_hat / xp.sqrt(v_hat) + eps)
    if denominator == "eps_uncorrected":  # the paper's efficient form: eps on sqrt(v) before v's correction
        return (
            lr * m_hat / (xp.sqrt(v_hat) + eps / numpy.sqrt(numpy.float64(correction)))
        )  # inf where it is 0
    return lr * m_hat / (xp.sqrt(v_hat) + eps)


ADAM_KNOBS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("no_bias_correction", {"correction": "none"}),
    ("bias_one_moment", {"correction": "m_only"}),
    ("bias_one_moment", {"correction": "v_only"}),
    ("bias_swapped", {"correction": "swapped"}),
    ("bias_same_beta", {"correction": "beta1_both"}),
    ("bias_same_beta", {"correction": "beta2_both"}),
    ("bias_multiplied", {"correction": "multiplied"}),
    ("t_from_zero", {"t_shift": -1}),
    ("t_ahead", {"t_shift": 1}),
    ("eps_inside", {"denominator": "eps_inside"}),
    ("no_sqrt", {"denominator": "no_sqrt"}),
    ("eps_outside", {"denominator": "eps_outside"}),
    ("eps_outside", {"denominator": "eps_outside_lr"}),
    ("eps_outside", {"denominator": "eps_added"}),
    ("eps_uncorrected", {"denominator": "eps_uncorrected"}),
    ("corrected_state", {"returned": "corrected"}),
    ("moments_swapped", {"returned": "swapped"}),
    ("v_unsquared", {"v_of": "grad"}),
    ("v_abs", {"v_of": "abs"}),
    ("v_doubled", {"v_of": "doubled"}),
    ("v_of_m", {"v_of": "m"}),
    ("moment_weight", {"weights": "one"}),
    ("moment_weight", {"weights": "m_one"}),
    ("moment_weight", {"weights": "v_one"}),
    ("v_beta1", {"weights": "v_beta1"}),
    ("v_beta1_both", {"weights": "v_beta1_both", "betas": ""}),  # beside betas swapped: m's mirror, not v's
    ("moment_weights_swapped", {"weights": "swapped"}),
    ("betas_swapped", {"betas": "everywhere"}),
    ("betas_swapped", {"betas": "in_moments"}),
    ("stale_moments", {"stale": "both"}),
    ("stale_m", {"stale": "m"}),
    ("stale_v", {"stale": "v"}),
    ("update_sign", {"ascent": True}),
    ("first_step_moments", {"first": True}),
    ("bias_unbracketed", {"correction": "unbracketed_m"}),
    ("bias_unbracketed", {"correction": "unbracketed_v"}),
    ("bias_unbracketed", {"correction": "unbracketed_both"}),
    ("moments_restarted", {"restart": True}),
    ("m_beta2", {"weights": "m_beta2"}),
    ("bias_product", {"correction": "product_m"}),
    ("bias_product", {"correction": "product_v"}),
    ("bias_product", {"correction": "product_both"}),
    ("bias_product", {"correction": "product_both", "denominator": "abs_root"}),  # |v_hat| to keep it finite
    ("v_unsquared", {"v_of": "grad", "denominator": "abs_root"}),
    ("bias_power_bracketed", {"correction": "bracketed_power"}),
    ("t_from_zero", {"t_shift": -1, "t_floor": True}),
    ("v_weight_squared", {"v_of": "weight_squared"}),
    ("moments_handed_back", {"returned": "handed"}),
    ("moment_unbracketed", {"unbracketed": "m"}),
    ("moment_unbracketed", {"unbracketed": "v"}),
    ("moment_unbracketed", {"unbracketed": "both"}),
    # last: a pair it makes that another pair's numbers has says the earlier one
    ("m_weights_swapped", {"weights": "m_swapped"}),
)


ADAM_MISTAKES, ADAM_PAIRS = _knob_mistakes(adam, ADAM_KNOBS)


def adamw(param: Array, grad: Array, m: Array, v: Array, t: int, lr: float, beta1: float, beta2: float,
          eps: float, weight_decay: float, **mistakes: Any) -> tuple[Array, Array, Array]:  # fmt: skip
    return adam(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay=weight_decay, **mistakes)


DECAY_KNOBS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("decay_in_moment", {"decay": "in_moment"}),
    ("decay_after", {"decay": "after"}),
    ("decay_missing", {"decay": "missing"}),
    ("decay_twice", {"decay": "twice"}),
    ("decay_on_moments", {"decay": "moments"}),
    ("decay_lr", {"decay_rate": "unscaled"}),
    ("decay_sign", {"grows": True}),
    ("decay_constant", {"subtracted": True}),
    ("decay_adaptive", {"decay": "adaptive"}),
    ("decay_step_size", {"decay_rate": "step_size"}),
    ("decay_of_gradient", {"decay": "gradient"}),
    ("decay_paper_step_size", {"decay_rate": "paper_step_size"}),
    ("decay_divided", {"decay_rate": "divided"}),
    ("decay_unbracketed", {"decay_rate": "unbracketed"}),
    ("decay_compounded", {"decay_rate": "compounded"}),
    ("decay_shrinks_gradient", {"decay": "shrunk_gradient"}),
    ("adamw_update_lost", {"returned": "decayed", "decay": ""}),  # the decay as it belongs: what is returned
    # last: a pair they make that another pair's numbers has says the earlier one
    ("decay_twice", {"decay": "twice_shrunk"}),
    ("adamw_lr_twice", {"decay_rate": "lr_twice"}),
)


ADAMW_MISTAKES, ADAMW_PAIRS = _knob_mistakes(adamw, DECAY_KNOBS + ADAM_KNOBS)


ADAM_ARGUMENTS = ("param", "grad", "m", "v", "t")  # in the order of adam's arguments
ADAM_HYPER = ("lr", "beta1", "beta2", "eps")


def handed_to_adam(arguments: dict[str, Any]) -> dict[str, Any]:
    """What AdamW hands on to Adam, from its own arguments: the parameter decayed, the rest as they are."""
    handed = {name: arguments[name] for name in ADAM_ARGUMENTS + ADAM_HYPER}
    return {**handed, "param": arguments["param"] * (1.0 - arguments["lr"] * arguments["weight_decay"])}
