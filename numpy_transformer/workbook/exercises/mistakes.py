"""The recognisable mistakes: one sentence each, named so that the tests can ask for them."""

from __future__ import annotations

from typing import Any

SENTENCES = {
    "rows_sum": "the sum over positions is missing or partial: a parameter is used at every position "
    "of every leading axis, so its gradient adds up all of them",
    "transposed": "it is transposed: a gradient has the shape of what it is the gradient of",
    "sign": "the sign is flipped",
    "factor": "it is off by a constant factor of {factor:.6g}",
    "zero": "it is zero everywhere",
    "ln_mean": "the mean term of layer norm is missing: x also reaches the output through mu",
    "ln_var": "the variance term of layer norm is missing: x also reaches the output through sigma",
    "ln_both": "both the mean and the variance terms of layer norm are missing: x also reaches "
    "the output through mu and sigma",
    "softmax_row_sum": "softmax backward without its row coupling: every output of a row depends on every "
    "input of the row (the outputs sum to 1), so each dx entry has a term from the whole row",
    "scale_forgotten": "the 1/sqrt(d) scale is forgotten: the scores were multiplied by it, so dq and dk are too",
    "scale_twice": "the 1/sqrt(d) scale is applied twice",
    "repeated_ids": "repeated ids are overwritten instead of added: every position holding a token "
    "adds its gradient to that token's row (add.at, not assignment)",
    "mask_leak": "masked positions leak gradient: a masked score is a constant, so its gradient is 0",
    "padding_leak": "padding leaks gradient: positions whose target is padding take no part in the loss",
    "dropout_scale": "the dropout mask is not rescaled: the forward divided by 1 - p, so the backward does too",
    "dropout_mask": "the dropout mask is not applied: entries the forward dropped get no gradient",
    "dropout_dv": "dv uses P where the forward used dropout(P): v was multiplied by the dropped probabilities",
    "token_count": "the loss is not divided by its token count: it is the mean over the non-padding tokens",
    "token_count_pad": "the loss is divided by every position's count, padding included: only the "
    "non-padding tokens are counted",
    "upstream": "the upstream gradient (dloss) is not multiplied in",
    "label_smoothing": "label smoothing is left out: the target distribution is (1 - eps) one_hot + eps / V",
    "embedding_scale": "the sqrt(D) scale of the embedding is forgotten: the forward multiplied the rows by it",
    "residual_dropped": "a residual's skip path is dropped: x reaches the output along the skip and "
    "along the branch, so its gradient is the sum of both",
    "norm_path": "the norm's backward is on the wrong path: in pre-norm the norm is on the branch only (the "
    "skip's gradient passes it by); in post-norm it comes after the sum (both paths' gradients pass through it)",
    "memory_one_layer": "the encoder output's gradient is kept from one decoder layer only: it feeds the "
    "cross-attention of every decoder layer, so their gradients add",
    "tied_not_added": "the tied matrix gets only one of its gradients: tgt_table is the target embedding and "
    "the output projection, so its two gradients add",
    "layer_order": "the layers are undone in the forward's order: the backward goes through the last layer "
    "first, each layer receiving the gradient of the one above it",
    "skipped": "it is fed the gradient reaching {above}: a gradient comes back through every piece in "
    "between, each through its own backward",
    "positional_added": "the positional table is added on the way back: the forward added a constant, so "
    "the gradient passes through unchanged",
    "paths": "a tensor feeding several paths (queries, keys, values, the latent) gets only some of "
    "their gradients: the gradients of every path must be added",
    "relu_skipped": "the relu's backward is left out: the forward zeroed every hidden unit whose input was "
    "not positive, so those units get no gradient (relu_backward with the forward's mask)",
    "relu_mask": "the relu's mask is taken from the gradient: the slope is 1 where the forward's input was "
    "positive (the mask in the cache), whatever the sign of the gradient",
    "swapped": "a gradient is returned under another parameter's key: {name} holds the gradient of "
    "{other}; each key takes the gradient of its own parameter",
    "counted_twice": "a gradient is counted twice: where paths meet, each path's gradient is added once",
    "averaged": "the paths' gradients are averaged: where paths meet, their gradients add",
    "stray_factor": "it is scaled by {factor:.6g}, a constant the forward does not have: between its "
    "pieces a block's backward hands each gradient on unchanged, or adds those that meet",
    "memory_dropped": "the memory's gradient is dropped: the memory feeds the cross-attention's keys and "
    "values, so dmemory is what that attention's backward returns for them (its dx_kv)",
    "dropout_skipped": "the dropout's backward is left out: the forward dropped entries and scaled the rest by "
    "1 / (1 - p), so the gradient goes back through the same mask and scale (dropout_backward with the "
    "forward's cache)",
    "final_norm_skipped": "the stack's final norm is left out of the backward: the forward normalised the last "
    "layer's output, so the gradient goes back through that norm before it reaches the last layer",
    "memory_swapped": "the encoder is handed the gradient of the decoder's input: the encoder's output is the "
    "memory, so the gradient it gets is the memory's (the dmemory the decoder stack returns)",
    "wrong_cache": "a piece's backward is handed another piece's cache: {where}'s is used twice, {other}'s "
    "never; each backward takes the cache its own forward returned",
    # the causes of causes.py: read from the calls a learner's block made
    "branch_dropped": "a residual's branch is dropped: the gradient coming back through {piece} is not added "
    "where the paths meet; x reaches the output along the skip and along the branch, so its gradient is the "
    "sum of both",
    "piece_order": "the pieces are undone in the forward's order: yours starts at {started}; a backward starts "
    "at the piece nearest the output ({last}, the forward's last) and goes back to the forward's first "
    "({first}), each piece handed the gradient of the one after it",
    "post_norm_order": "the post-norm residual is undone in pre-norm order: in post-norm, y = norm(x + f(x)), "
    "the norm comes last, so its backward comes first and both the skip and the branch take its gradient "
    "(cache.norm_first says which)",
    "cache_swapped": "{where}'s and {other}'s caches are swapped: {function} is handed {other}'s cache with the "
    "gradient reaching {where}; each backward takes the cache its own forward returned",
    "not_chained": "the stack's layers are not chained: each layer is handed the gradient from above the stack, "
    "but a layer's dout is the dx that the layer above it returns",
    "relu_inverted": "the relu's mask is inverted: the gradient passes where the forward's input was positive "
    "(where the mask in the cache is True) and is zero where it was not",
    "relu_place": "the relu's backward is on the wrong side: the relu sits between the two linears, so its mask "
    "(the forward's, from the cache) applies to the gradient reaching the hidden units, not to the block's dout",
    "linear_dx_transposed": "the linear's input gradient uses W^T, which the forward's y = x W^T has "
    "already transposed",
    "subtracted": "a gradient is subtracted where it adds: {what} is taken away; where paths meet (a tied "
    "matrix's two uses too), their gradients add",
    "qkv_part": "only part of w_qkv's gradient is kept: its {zero} rows are zero, its {kept} rows right; w_qkv "
    "stacks the weights of the queries, keys and values, so each part takes the gradient of its own path",
    "wrong_function": "{function} is used on {where}, which {right} undoes: each piece's backward is the one "
    "of the forward that made its cache",
    "shape": "the gradient handed to {where}'s backward has shape {shape}{what}, but {where}'s output, which "
    "it is the gradient of, has shape {expected}: each piece takes the gradient of its own output",
    "different_tensors": "{first} and {second}, which {function} returns, are added, but they are the "
    "gradients of different tensors: a cross-attention's dx_q is the gradient of x (its queries' input), "
    "its dx_kv that of the memory (dmemory)",
    "foreign_term": "{what} is added to {label}, but it is the gradient of another tensor: {label} adds "
    "only the gradients of the paths its own tensor takes",
    # the layers' causes the first ones leave as a symptom (a constant factor, zero) or unnamed
    "relu_unmasked": "the relu's mask is not applied: dout passes even where x was not positive, where "
    "max(x, 0) does not change with x",
    "dropout_multiplied": "the kept entries are multiplied by 1 - p where the forward divided by it: inverted "
    "dropout scales what it keeps up, and its backward scales their gradient the same way",
    "softmax_axis": "the row's sum is taken along another axis than the last: softmax normalises along the "
    "last axis, so the sum in its backward runs along it too",
    "ln_rstd": "the 1/sigma factor is missing: xhat = (x - mu) / sigma, so every path from x to the output "
    "is divided by sigma; multiply by rstd (the cache's 1 / sigma)",
    "positional_zero": "the gradient is zeroed as if x were the constant: the table is the constant; y = x + PE, "
    "so dy/dx is the identity",
    "stack_order": "a stacked gradient's parts are in another order: each is stacked as the forward stacks "
    "its weights ([dW_q; dW_k; dW_v] for w_qkv and b_qkv, [dW_q; dW_c] for w_q_compress, [dW_kd; dW_vd] for "
    "w_kv_decompress), each part the gradient of its own weight",
    # the layers' causes of a learner's common slips
    "softmax_diagonal": "only the Jacobian's diagonal, y (1 - y), is used, as for a sigmoid: every output of a "
    "row depends on every input of the row, so the Jacobian's other entries, -y_i y_j, count too",
    "softmax_unweighted": "the row's term sums dout alone: it is the sum of dout * y over the row (each output "
    "weighs its share)",
    "ln_gamma": "gamma is left out of dx: y = gamma * xhat + beta, so the gradient reaching xhat is g = dout * "
    "gamma, and every term of dx is built from g",
    "ln_sum": "the row's terms are sums where they are means: mu and sigma average over the D entries of a row, "
    "so each term carries a 1/D",
    "ln_dgamma": "dgamma lacks xhat: y = gamma * xhat + beta, so dgamma sums dout * xhat over the rows (dbeta "
    "sums dout)",
    "mask_inverted": "the mask is read the wrong way round: it is True where a query may see a key, so the "
    "scores' gradient is kept where it is True and is 0 where it is False",
    "ce_probs": "this is the gradient with respect to the probabilities, -q / probs: the loss takes the logits, "
    "and the softmax between them is part of its backward",
    "heads_reshape": "the heads are split or merged by a reshape alone: split_heads reshapes (B, T, D) to "
    "(B, T, H, K) and moves the head axis forward to (B, H, T, K), so merging moves it back before the reshape "
    "(transpose(0, 2, 1, 3), as merge_heads does)",
    # the causes of the rungs above the blocks: a constant of the exercise's own, a stack, the loss
    "embedding_scale_twice": "the sqrt(D) scale is applied twice: embedding_backward already multiplies the "
    "rows' gradient by it, once, as the forward multiplied the rows",
    "upstream_twice": "the upstream gradient (dloss) is multiplied in twice: cross_entropy_backward(dloss, ...) "
    "already multiplies by it, and what comes after it is linear",
    "token_count_twice": "the mean is taken twice: cross_entropy_backward already divides by the token count "
    "(n_valid), so nothing after it divides again",
    "memory_averaged": "the layers' memory gradients are averaged: the memory feeds the cross-attention of every "
    "decoder layer, so their gradients add (a sum, not a mean)",
    "memory_some_layers": "the encoder output's gradient adds only {kept} of the {layers} decoder layers' "
    "gradients: it feeds the cross-attention of every decoder layer, so every layer's dmemory adds",
    "tied_averaged": "the tied matrix's two gradients are averaged: tgt_table is the target embedding and the "
    "output projection, so its two gradients add (a sum, not a mean)",
    "final_norm_last": "the stack's final norm is undone last: the forward applied it after the last layer, so "
    "its backward comes first, and the last layer is handed the gradient it returns",
    "memory_plus_input": "the encoder is handed the memory's gradient plus the decoder input's: the encoder's "
    "output is the memory alone, so it gets dmemory alone (the decoder stack's dx goes to the target embedding)",
    "tables_swapped": "src_table's and tgt_table's gradients are mixed up: a gradient of shape {first} meets one "
    "of shape {second}; tgt_table's gradient adds the target embedding's and the projection's, src_table's is the "
    "source embedding's alone",
    "dropout_none": "the cache's dropout is None when dropout is off (p = 0): nothing was dropped, so the gradient "
    "passes unchanged; check for None first (dropout_backward does)",
    "zeros_shape": "{name} starts as zeros of shape {zeros}, but {what}, added to it, has shape {other}: an "
    "accumulator takes the shape of the gradients it gathers (zeros of that shape, or the first of them)",
    "ce_plain": "this is probs - one_hot, the plain cross-entropy's gradient: this loss also smooths the labels "
    "((1 - eps) one_hot + eps / V), leaves padding out and takes the mean over the non-padding tokens "
    "(cross_entropy_backward does all three)",
    "smoothing_convention": "label smoothing is spread another way: the target distribution is (1 - eps) one_hot "
    "+ eps / V, eps / V on every class, the target's included (1 - eps + eps / V there), not eps / (V - 1) on "
    "the others",
    "reshaped": "its values are right, its shape is not: a gradient has the shape of what it is the gradient of, "
    "so reshape it back (dx.reshape(x.shape))",
    "dtype": "a gradient is returned in another dtype than its input's: a backward computes in its input's "
    "dtype (a lower one loses the precision the model trains in)",
    # the training rungs' causes: a schedule, clipping, the Adam and AdamW step
    "schedule_off_by_one": "the schedule is off by one step: step is the number of this update, 1 for the "
    "first, and the rate at step s is the formula's at s itself (no step - 1, no step + 1)",
    "noam_warmup_power": "the warm-up's line is step * warmup^-0.5, step / sqrt(warmup) (as step / warmup * "
    "sqrt(warmup) gives too: / and * go from left to right, so it divides by warmup, then multiplies by "
    "sqrt(warmup)): the line is step * warmup^-1.5, step / (warmup * sqrt(warmup)), so that it meets "
    "step^-0.5 exactly at step = warmup",
    "noam_warmup_linear": "the warm-up's line is step / warmup, rising to 1 at step warmup, far above the "
    "decay there: the line is step * warmup^-1.5, step / (warmup * sqrt(warmup)), so that it meets "
    "step^-0.5 exactly at step = warmup",
    "noam_warmup_held": "there is no warm-up: the rate is held at its peak, warmup^-0.5 (times d_model^-0.5), "
    "up to step warmup, as max(step, warmup) ** -0.5 gives; the warm-up rises in a line from 0, step * "
    "warmup^-1.5, to meet the decay step^-0.5 at step = warmup",
    "noam_whole_warmup": "the warm-up's line divides in whole numbers (step // warmup, or step // warmup ** "
    "1.5), which is 0 all through the warm-up: it is step * warmup^-1.5, step / warmup ** 1.5 with a true "
    "division, climbing a little every step up to step = warmup",
    "noam_decay_warmup": "the decay carries a factor sqrt(warmup), sqrt(warmup / step), as if it went on from 1 "
    "at the end of the warm-up: it is step^-0.5 alone, which meets the line step * warmup^-1.5 at step = "
    "warmup, both warmup^-0.5 there",
    "noam_line_ratio_power": "the warm-up's line is (step / warmup)^1.5, the power over the ratio: it is step * "
    "warmup^-1.5, step to the first power and warmup alone to the -1.5, rising in a straight line",
    # an eighteenth cold learner's: the decay counted from the warm-up's end, warmup^-1.5 read as / warmup * 1.5,
    # state a later case shows
    "noam_decay_from_warmup": "the decay counts its steps from the warm-up's end, (step - warmup)^-0.5, as a "
    "branch after the warm-up with step - warmup gives: it is step^-0.5, the step counted from the first "
    "update, which meets the line step * warmup^-1.5 at step = warmup, both warmup^-0.5 there",
    "noam_line_times_power": "the warm-up's line is step / warmup * 1.5, warmup^-1.5 read as a division by "
    "warmup times 1.5: it is step * warmup^-1.5, step / warmup ** 1.5 (warmup to the power 1.5), rising to "
    "warmup^-0.5 at step = warmup",
    "cosine_table_behind": "yours reads the rate from a table of the steps 0 to total - 1 at index step - 1 "
    "(schedule[min(step, total) - 1]): one step behind, and held at the rate of step total - 1 past total; "
    "the rate at step is the schedule's at step itself (1 for the first update), min_lr from total on",
    "clip_running_norm": "each array is scaled by max_norm over the norm of it and the arrays before it, a "
    "loop's running total, where that is over max_norm: every array takes one scale, max_norm / norm, of "
    "the norm of all of them, known once the loop has added every array",
    "cosine_full_turn": "the cosine turns a full circle, cos(2 * pi * progress): it falls to min_lr halfway "
    "through the decay and climbs back to peak at total; half a turn, cos(pi * progress), falls once from peak "
    "to min_lr",
    "m_weights_swapped": "m's two weights are swapped, (1 - beta1) * m + beta1 * grad: a running average keeps "
    "beta1 of the old m and adds 1 - beta1 of the new gradient, m = beta1 * m + (1 - beta1) * grad (v's are "
    "right)",
    "adamw_lr_twice": "Adam's step is scaled by lr twice, lr * (lr * m_hat / (sqrt(v_hat) + eps) + weight_decay * "
    "param), as the AdamW paper's Algorithm 2 gives with both its schedule multiplier eta and its step size "
    "alpha set to lr: eta is the schedule's multiplier (1 at a constant rate), so the step is lr * m_hat / "
    "(sqrt(v_hat) + eps) and the decay lr * weight_decay * param",
    "keeps_state_later": "{name} keeps state between calls: called again on the arguments of an earlier call "
    "({call}) after the calls between, it gave another answer ({what} differs): a global or a flag those "
    "calls changed gives it; use only what it is handed, and keep nothing from one call to the next",
    "noam_scale_missing": "the d_model^-0.5 in front is missing: the whole schedule is scaled by "
    "1 / sqrt(d_model)",
    "noam_scale_inverted": "the d_model factor in front is inverted, sqrt(d_model): the whole schedule is "
    "divided by it, d_model^-0.5 (1 / sqrt(d_model))",
    "noam_max": "the rate is the larger of the two curves, as max(...) in place of min(...) gives, or an "
    "if/else with its two branches swapped (the decay up to step warmup, the rising line after it): it is "
    "the smaller, min(step^-0.5, step * warmup^-1.5), the rising line during the warm-up and the decay "
    "after it",
    "cosine_progress": "the cosine's progress counts from step 0: it runs from 0 at the end of the warm-up "
    "to 1 at total, (step - warmup) / (total - warmup)",
    "cosine_half": "the cosine is not mapped onto [0, 1]: 0.5 * (1 + cos(pi * progress)) falls from 1 to 0 "
    "as progress goes from 0 to 1",
    "cosine_half_missing": "the 0.5 is missing: (1 + cos(pi * progress)) runs from 2 to 0, so the decay "
    "starts at twice its height; 0.5 * (1 + cos(pi * progress)) falls from 1 to 0 as progress goes from 0 "
    "to 1",
    "cosine_floor_not_added": "min_lr is not added: the cosine's part alone, 0.5 * (peak - min_lr) * (1 + "
    "cos(pi * progress)), runs from peak - min_lr down to 0; the rate is min_lr plus it, min_lr + 0.5 * "
    "(peak - min_lr) * (1 + cos(pi * progress))",
    "cosine_floor": "min_lr is left out: the decay runs from peak down to min_lr, min_lr + 0.5 * (peak - "
    "min_lr) * (1 + cos(pi * progress))",
    "cosine_floor_max": "the decay runs from peak down to 0 and is held up at min_lr by max(..., min_lr): "
    "it runs from peak down to min_lr, min_lr + 0.5 * (peak - min_lr) * (1 + cos(pi * progress)), no max "
    "needed",
    "cosine_min_of_curves": "the warm-up has no branch of its own: the smaller of its line and the cosine is "
    "taken at every step, and before step warmup the progress is below 0, where the cosine can fall under "
    "the line (a decay short beside the warm-up): up to step warmup the rate is the line alone, peak * step / "
    "warmup",
    "cosine_clamp": "the progress is not held at 1 after total: past the end the cosine climbs again; the "
    "rate stays min_lr",
    "clip_per_tensor": "each gradient is clipped by its own norm: the norm is global, of every gradient "
    "together, and one scale applies to all of them (the update keeps its direction)",
    "clip_by_value": "the entries are clipped one by one to [-max_norm, max_norm]: clipping by the norm "
    "scales every array by one factor, max_norm / norm",
    "clip_squared": "the norm is the sum of squares without its square root",
    "clip_rms": "the norm is a mean of the squares (a root mean square): it is the square root of their sum",
    "clip_inverted": "the scale is inverted: the gradients are multiplied by max_norm / norm, which is below "
    "1 where clipping applies",
    "clip_reversed": "the condition is reversed: the gradients are scaled where their norm is under max_norm "
    "(scaled up, to max_norm) and left where it is over; clip only where norm > max_norm, by max_norm / norm",
    "clip_always": "the gradients are rescaled even where their norm is under max_norm: clipping only ever "
    "shrinks, so below max_norm they are left as they are",
    "clip_compared_squared": "the norm's square is compared with max_norm: the gradients are clipped where "
    "the norm itself exceeds max_norm (a norm of 1.5 under a max_norm of 2 is left as it is)",
    "clip_norm_after": "the norm returned is the one after clipping: it is the norm of the gradients handed "
    "in, before clipping (what a training log shows)",
    "no_bias_correction": "the bias correction is missing: both moments start at zero, so m_hat = m / (1 - "
    "beta1^t) and v_hat = v / (1 - beta2^t)",
    "bias_one_moment": "the bias correction is applied to one moment only: both start at zero, m_hat = m / "
    "(1 - beta1^t) and v_hat = v / (1 - beta2^t)",
    "bias_swapped": "the bias corrections are applied to the wrong moments: m's divides by 1 - beta1^t, v's "
    "by 1 - beta2^t, each moment with its own beta",
    "t_from_zero": "t is counted from 0: t is the number of this update, 1 for the first, and the correction "
    "is 1 - beta^t with t as it is given (not t - 1)",
    "t_ahead": "t is counted one ahead: t is already the number of this update, so the correction is "
    "1 - beta^t with t as it is given (not t + 1)",
    "eps_inside": "epsilon is inside the square root: it is added after it, sqrt(v_hat) + eps",
    "no_sqrt": "the square root of v_hat is missing: the step divides by sqrt(v_hat) + eps",
    "corrected_state": "the bias-corrected moments are returned as the new state: m_hat and v_hat only "
    "serve this update; the running averages m and v are what carries on",
    "v_unsquared": "v averages the gradient, not its square: v = beta2 v + (1 - beta2) g^2",
    "moment_weight": "the new gradient is not weighed by 1 - beta: each moment is a running average, "
    "m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2",
    "betas_swapped": "beta1 and beta2 are swapped: beta1 is the first moment's (the gradient's), beta2 the "
    "second's (its square's)",
    "stale_moments": "the update uses the moments from before this step: first update m and v with this "
    "gradient, then correct them and step",
    "stale_m": "m_hat is made from m before this step: first update m with this gradient, then correct "
    "it, m_hat = m / (1 - beta1^t)",
    "stale_v": "v_hat is made from v before this step: first update v with this gradient's square, then "
    "correct it, v_hat = v / (1 - beta2^t)",
    "update_sign": "the update is added: Adam steps against the gradient, param - lr * m_hat / "
    "(sqrt(v_hat) + eps)",
    "adamw_update_lost": "Adam's update is lost: yours returns the decayed parameter, param * (1 - lr * "
    "weight_decay), as it was before the step; apply the step to the decayed parameter and return the "
    "parameter it gives",
    "decay_in_moment": "the weight decay is inside the gradient (Adam with L2): decoupled, it shrinks the "
    "parameter itself, param * (1 - lr * weight_decay), and the moments never see it",
    "decay_lr": "the decay is not scaled by the learning rate: the parameter shrinks by lr * weight_decay",
    "decay_after": "the decay is applied to the updated parameter: AdamW shrinks the parameter as it was "
    "before this step, then applies Adam's update",
    "decay_missing": "the weight decay is missing: AdamW first shrinks the parameter, param * (1 - lr * "
    "weight_decay), and Adam's update is taken from that decayed parameter (where you compute it, hand it "
    "on: a decayed copy left unused while the original param is updated leaves the decay out)",
    "decay_sign": "the decay grows the parameter: it shrinks it, param * (1 - lr * weight_decay)",
    "v_beta1": "v's update weighs the gradient's square by 1 - beta1: v = beta2 v + (1 - beta2) g^2, each "
    "moment with its own beta",
    "v_beta1_both": "v's update uses beta1 in both its places, v = beta1 v + (1 - beta1) g^2: it is v = "
    "beta2 v + (1 - beta2) g^2, each moment with its own beta",
    "eps_outside": "epsilon is added outside the division: it belongs in the denominator, m_hat / "
    "(sqrt(v_hat) + eps)",
    "bias_multiplied": "the bias correction multiplies: it divides, m_hat = m / (1 - beta1^t) and v_hat = v / "
    "(1 - beta2^t), which enlarges the moments early on",
    "moments_swapped": "m and v are returned swapped: the order is (param, m, v)",
    "v_abs": "v averages the gradient's size |g|, not its square: v = beta2 v + (1 - beta2) g^2 (its square "
    "root in the step brings it back to the gradient's scale)",
    "moment_weights_swapped": "each moment's two weights are swapped: a running average keeps beta of the old "
    "moment and adds 1 - beta of the new gradient, m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2",
    "decay_on_moments": "the decay shrinks the moments too: decoupled, it shrinks the parameter alone, param * "
    "(1 - lr * weight_decay); m and v are Adam's, of the gradient as it is",
    "clip_l1": "the norm is the sum of the entries' sizes |g| (an L1 norm): the global norm is the square root "
    "of the sum of every entry squared (L2)",
    "clip_norm_sum": "the norm is the sum of the arrays' own norms: the global norm is the square root of the "
    "sum of their squares, sqrt(sum of every entry squared)",
    "warmup_off_by_one": "the warm-up is off by one step: it is peak * step / warmup, with step as it is "
    "given (no step - 1, no step + 1), so that step 1 has a rate above 0 and step warmup reaches peak",
    "schedule_factor": "every rate is {times:.6g} times the schedule's: its shape is right, a constant factor "
    "is not (one the formula does not have, or one it has left out)",
    "noam_decay": "the decay after the warm-up is wrong (the rising line before it is right): past step = "
    "warmup the rate is d_model^-0.5 * step^-0.5, falling as 1 / sqrt(step), and min(...) picks it there",
    "noam_no_decay": "the rate never decays: past step = warmup yours still follows the rising line, so "
    "your decay is never the smaller (as step outside the min, step * min(step^-0.5, warmup^-1.5), which "
    "multiplies the decay by step too, or a decay's power without its minus sign, step ** 0.5, gives); it "
    "is d_model^-0.5 * step^-0.5, falling as 1 / sqrt(step) (a power of -0.5), and step belongs to the "
    "rising line alone, min(step^-0.5, step * warmup^-1.5)",
    "noam_decay_power": "the decay falls as {times:.4g} * step^{power:.4g} (times d_model^-0.5): it is "
    "step^-0.5, 1 / sqrt(step), with no other factor (the rising line before it is right)",
    "noam_front": "the factor in front is {times:.4g} * d_model^{power:.4g} (yours is {ratio:.6g} times the "
    "schedule at d_model {d_model}): it is d_model^-0.5, 1 / sqrt(d_model), the shape after it is right",
    "noam_one_curve": "the rate is one curve at every step, {times:.4g} * step^{power:.4g} (times "
    "d_model^-0.5, at warmup {warmup}): the schedule is two, the rising line step * warmup^-1.5 up to step "
    "warmup and the decay step^-0.5 after it, min(...) picking the smaller; check each power's parentheses "
    "(step * warmup ** -1.5 raises warmup alone)",
    "noam_line": "the warm-up's rising line is wrong (the decay after it is right): up to step = warmup the "
    "rate is d_model^-0.5 * step * warmup^-1.5, and min(...) picks it there",
    "warmup_start": "the warm-up's line starts at {start:.6g} at step 0: it climbs from 0, peak * step / "
    "warmup, to peak at step warmup",
    "warmup_span": "the warm-up's line runs between other steps: yours climbs from 0 at step {zero:.6g} to "
    "peak at step {top:.6g}; it climbs from 0 at step 0 to peak at step warmup ({warmup}), peak * step / "
    "warmup, with step as it is given",
    "cosine_ends": "the decay runs between other rates: yours goes from {start:.6g} at the end of the "
    "warm-up to {end:.6g} at total, where it falls from peak ({peak:.6g}) to min_lr ({min_lr:.6g}), min_lr + "
    "0.5 * (peak - min_lr) * (1 + cos(pi * progress))",
    "warmup_whole_steps": "the warm-up divides in whole numbers (step // warmup is 0 until step warmup): it "
    "climbs a little every step, peak * step / warmup with a true division",
    "cosine_quarter": "the decay is a quarter cosine, cos(pi / 2 * progress): the schedule's is half a "
    "period lifted onto [0, 1], 0.5 * (1 + cos(pi * progress)), which falls slowly at both ends",
    "cosine_span": "the cosine's progress runs over other steps: yours goes from 0 at step {start:.6g} to 1 at "
    "step {end:.6g}, where the decay runs from warmup ({warmup}) to total ({total}): progress = (step - warmup) "
    "/ (total - warmup){kept}",
    "clip_epsilon": "the scale divides by norm + {eps:.3g}: it is max_norm / norm exactly (an epsilon, as "
    "PyTorch's clip_grad_norm_ adds, is not needed: where it clips, the norm exceeds max_norm)",
    "clip_spectral": "a matrix's norm is taken as its largest singular value (numpy's norm(g, 2) on a 2-d "
    "array): the global norm counts every entry, the square root of the sum of every entry squared "
    "(norm(g) with no ord, or sqrt((g * g).sum()))",
    "eps_uncorrected": "epsilon is added to sqrt(v) before v's bias correction (the Adam paper's efficient "
    "form, lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)): here it is added after it, m_hat "
    "/ (sqrt(v_hat) + eps)",
    "v_of_m": "v averages the square of the first moment (m^2): it averages the gradient's square, v = beta2 "
    "v + (1 - beta2) g^2",
    "first_step_moments": "at t = 1 the moments are set to the gradient itself (m = g, v = g^2): they are "
    "averaged from their zeros like on every step, m = beta1 m + (1 - beta1) g, and the bias correction "
    "makes up for the zeros",
    "decay_twice": "the weight decay is applied twice: inside the gradient (L2) and decoupled; AdamW's is "
    "decoupled alone, param * (1 - lr * weight_decay), and the moments never see it",
    "decay_rate": "the decay shrinks the parameter by another share of it: AdamW's is lr * weight_decay, "
    "{right:.6g} on call {call}, yours {yours:.6g} ({times:.6g} times as much){kept}",
    # a third cold learner's: the warm-up's power without its minus, the rate held after the warm-up, the
    # cosine without pi or 0 after total, each array's mean of squares, both corrections with one beta, the
    # decay taken away as a constant or put through Adam's denominator, and arguments mixed up
    "noam_warmup_sign": "the warm-up's line is step * warmup^1.5: its power has lost its minus sign, or the line "
    "divides by warmup ** -1.5 where it multiplies (step / warmup ** -1.5 is step * warmup^1.5, the same "
    "numbers); your rising line is so large that min(...) always picks the decay, so there is no warm-up; "
    "the line is step * warmup ** -1.5, a product, which meets step^-0.5 at step = warmup",
    "noam_flat": "after the warm-up your rate stays at its peak, warmup^-0.5 (times d_model^-0.5), as "
    "min(step, warmup) * warmup^-1.5 (a cap on step) or warmup ** -0.5 written where step ** -0.5 belongs gives: "
    "it decays, d_model^-0.5 * step^-0.5 (1 / sqrt(step)), the smaller of the two curves, min(step^-0.5, step * "
    "warmup^-1.5)",
    "cosine_pi": "the cosine's angle lacks pi, cos(progress): it turns through 1 radian where it should turn "
    "half a circle, so yours never reaches min_lr at total; it is cos(pi * progress)",
    "cosine_end_zero": "from total on the rate is 0: the decay ends at min_lr at total, and the rate stays "
    "min_lr after it (progress held at 1)",
    "clip_means": "the norm adds each array's mean of squares: the global norm is the square root of the sum "
    "of every entry squared, each array's (g * g).sum(), not its mean",
    "bias_same_beta": "both bias corrections use the same beta: each moment is corrected with its own, m_hat "
    "= m / (1 - beta1^t) and v_hat = v / (1 - beta2^t)",
    "decay_constant": "the decay takes a constant away, param - lr * weight_decay: it takes a share of the "
    "parameter, param * (1 - lr * weight_decay), so each weight shrinks in proportion to its size",
    "decay_adaptive": "the decay goes through Adam's denominator, lr * (m_hat + weight_decay * param) / "
    "(sqrt(v_hat) + eps): decoupled, it is lr * weight_decay * param, taken away as it is, param * (1 - lr * "
    "weight_decay), before Adam's update",
    "arguments_swapped": "two arguments are swapped, {first} and {second}: yours is the formula with each in "
    "the other's place; check each name where you use it, and the order you hand them on in",
    "argument_misplaced": "an argument is used where another belongs, {used} where {belongs} belongs: yours "
    "is the formula with {belongs} replaced by {used}; check each name where you use it, and the order you "
    "hand arguments on in (a call's arguments go by position)",
    "rung_dtype": "{name} is returned as {dtype}, which rounds it to about {digits} digits: compute in the "
    "dtype of what the function is handed (Python floats, float64 arrays), as the textbook does, with no "
    "astype or {dtype}(...) on the way",
    "writes_input": "{name} writes into {what}, which it was handed: return new arrays (x = x - ..., not "
    "x -= ...), the caller keeps what it handed in",
    "writes_list": "{name} replaces the items of the list {what} it was handed ({what}[i] = ...): build a new "
    "list and return it ([... for g in {what}]), the caller keeps the list it handed in",
    "returns_input": "{name} returns {what}: return new arrays, a copy where nothing "
    "changes, so that what the caller does with them leaves its own untouched",
    # a fourth cold learner's: a power written ** -1/2, the warm-up's line with step and warmup swapped or
    # with warmup^-2, the cosine's height, brackets, sign, min_lr as a ratio, its progress over total, a step
    # late or in whole numbers, each array's sum squared, AdamW's decay at Adam's corrected step size or of
    # the gradient, a function keeping state between calls, and the results returned in another order
    "noam_power_precedence": "a power is written ** -1/2, which Python reads as (x ** -1) / 2, 1 / (2 x): ** "
    "binds tighter than /, so it is not 1 / sqrt(x); write x ** -0.5 (or x ** (-1 / 2)): lr = d_model^-0.5 * "
    "min(step^-0.5, step * warmup^-1.5)",
    "noam_line_swapped": "the warm-up's line has step and warmup swapped, warmup * step^-1.5: it falls with the "
    "step; the line is step * warmup^-1.5, which rises with the step and meets step^-0.5 at step = warmup",
    "noam_warmup_squared": "the warm-up's line is step * warmup^-2 (as warmup ** (-3 // 2) gives: // divides "
    "in whole numbers, rounding -1.5 down to -2): it is step * warmup^-1.5, which meets step^-0.5 at step = "
    "warmup; write -1.5 or (-3 / 2)",
    "cosine_height": "the half cosine's height is 0.5 * peak, so the decay starts at peak + min_lr: it falls "
    "from peak to min_lr, a height of peak - min_lr, min_lr + 0.5 * (peak - min_lr) * (1 + cos(pi * progress))",
    "cosine_unbracketed": "the brackets are lost: yours computes min_lr + 0.5 * peak - min_lr * (1 + cos(pi * "
    "progress)); it is min_lr + 0.5 * (peak - min_lr) * (1 + cos(pi * progress)), the height peak - min_lr "
    "bracketed, times the whole (1 + cos)",
    "cosine_rising": "the decay rises: yours climbs from min_lr after the warm-up to peak at total, as 1 - "
    "cos(pi * progress) gives, or peak and min_lr swapped, peak + 0.5 * (min_lr - peak) * (1 + cos(pi * "
    "progress)) (the same numbers); it falls, min_lr + 0.5 * (peak - min_lr) * (1 + cos(pi * progress)), from "
    "peak to min_lr",
    "cosine_min_ratio": "min_lr is used as a share of peak, peak * min_lr: it is a rate itself, the one the "
    "decay ends at, min_lr + 0.5 * (peak - min_lr) * (1 + cos(pi * progress))",
    "cosine_over_total": "the progress is divided by total, so it reaches 1 at warmup + total, not at total: it "
    "is (step - warmup) / (total - warmup), the steps of the decay alone",
    "cosine_decay_off_by_one": "the decay's progress is off by one step: it is 0 at step warmup, where the "
    "warm-up ends at peak, and 1 at total, (step - warmup) / (total - warmup), with step as it is given",
    "cosine_whole_progress": "the progress divides in whole numbers ((step - warmup) // (total - warmup) is 0 "
    "until total): the rate stays at peak, then drops to min_lr at once; divide with /",
    "clip_sum_squared": "the norm squares each array's sum, g.sum() ** 2: it sums every entry squared, each "
    "array's (g * g).sum(), and takes the square root of their total",
    "decay_step_size": "the decay is scaled by lr / (1 - beta1^t), Adam's bias-corrected step size: AdamW's "
    "decay uses lr itself, param * (1 - lr * weight_decay), whatever the step",
    "decay_of_gradient": "the decay takes lr * weight_decay * grad away: weight decay shrinks the parameter "
    "itself, param * (1 - lr * weight_decay); the gradient reaches the parameter through Adam's update alone",
    # a fifth cold learner's: the progress held by max, min_lr inside the brackets or halved, clipping's
    # norm another one or its scale another, a bias correction's brackets lost, the moments restarted, the
    # decay at the Adam paper's step size or dividing, and arguments mixed up where they are handed on
    "cosine_clamp_max": "the progress is held by max((step - warmup) / (total - warmup), 1), which is at "
    "least 1: the rate drops to min_lr right after the warm-up; min(..., 1) holds it at 1 only from total on",
    "cosine_floor_bracketed": "the brackets take min_lr in: yours computes (min_lr + 0.5 * (peak - min_lr)) * "
    "(1 + cos(pi * progress)), from peak + min_lr down to 0; min_lr is added to the cosine's part, min_lr + "
    "0.5 * (peak - min_lr) * (1 + cos(pi * progress)), from peak down to min_lr",
    "cosine_floor_halved": "min_lr is halved, 0.5 * min_lr + 0.5 * (peak - min_lr) * (1 + cos(pi * "
    "progress)): the 0.5 belongs to the cosine's part alone, min_lr is added whole, min_lr + 0.5 * (peak - "
    "min_lr) * (1 + cos(pi * progress))",
    "clip_other_norm": "the norm is {what}: the global norm is the square root of the sum of every entry "
    "squared, of every array together (sqrt of the sum over the arrays of (g * g).sum())",
    "clip_unscaled": "the gradients come back unscaled where their norm is over max_norm (the norm returned "
    "is right): each is multiplied by max_norm / norm; in a loop, g = g * scale binds the name g to a new "
    "array and leaves the list as it was, so return a new list, [g * scale for g in grads]",
    "clip_scale_norm": "the scale divides max_norm by {what}, though the norm returned is right: it is "
    "max_norm / norm, with that norm",
    "bias_unbracketed": "a bias correction has lost its brackets, m / 1 - beta1 ** t, which Python reads as "
    "(m / 1) - beta1^t (/ binds tighter than -): it takes beta^t away; it divides by the whole, m / (1 - "
    "beta1 ** t) and v / (1 - beta2 ** t)",
    "moments_restarted": "the moments restart from zeros on every call, the m and v handed in left out: each "
    "carries on from the step before, m = beta1 * m + (1 - beta1) * grad and v = beta2 * v + (1 - beta2) * "
    "grad^2 with m and v as they are handed in",
    "decay_paper_step_size": "the decay is scaled by lr * sqrt(1 - beta2^t) / (1 - beta1^t), the step size of "
    "the Adam paper's efficient form: AdamW's decay uses lr itself, param * (1 - lr * weight_decay), "
    "whatever the step",
    "decay_divided": "the decay divides, param / (1 + lr * weight_decay): it multiplies, param * (1 - lr * "
    "weight_decay), taking the share lr * weight_decay of the parameter away",
    "handed_on_swapped": "two arguments are swapped where they are handed on to {below}, {first} and "
    "{second}: yours is {below} called with each in the other's place, the rest right; a call's arguments "
    "go by position, so hand them on in {below}'s order, ({order})",
    "handed_on_misplaced": "an argument is handed on to {below} where another belongs, {used} where "
    "{belongs} belongs: yours is {below} called with {used} in {belongs}'s place, the rest right; a call's "
    "arguments go by position, so hand them on in {below}'s order, ({order})",
    # a sixth cold learner's: the line's power written ** -3/2, warmup^-1.5 outside the min, the progress
    # without its brackets, the first moment with beta2's weight, a bias correction's power a product
    "noam_line_precedence": "the warm-up's power is written ** -3/2, which Python reads as (warmup ** -3) / 2: "
    "** binds tighter than /, so it is not warmup^-1.5; write warmup ** -1.5 (or warmup ** (-3 / 2)): the "
    "line is step * warmup^-1.5",
    "noam_warmup_outside": "warmup^-1.5 scales the decay, the rate step^-0.5 * warmup^-1.5 at every step, as "
    "min(step^-0.5, step) * warmup^-1.5 (warmup^-1.5 outside the min's brackets) or a line made from step after "
    "step = step ** -0.5 overwrote it gives: warmup^-1.5 belongs to the rising line alone, min(step^-0.5, step * "
    "warmup^-1.5), of the step handed in; check where each bracket closes, and keep step's name for step",
    "cosine_progress_unbracketed": "the progress has lost its brackets, step - warmup / (total - warmup), "
    "which Python reads as step - (warmup / (total - warmup)) (/ binds tighter than -): it is past 1 from "
    "the first step after the warm-up; the step's distance from warmup is divided, (step - warmup) / "
    "(total - warmup)",
    "m_beta2": "m's update weighs the gradient by 1 - beta2: m = beta1 m + (1 - beta1) g, each moment with "
    "its own beta",
    "bias_product": "a bias correction multiplies beta by t, 1 - beta1 * t: it raises beta to the power t, "
    "1 - beta1 ** t and 1 - beta2 ** t (** is the power, * a product; 1 - beta * t falls below 0 within a "
    "few steps, and a negative v_hat's square root is nan)",
    # a seventh cold learner's: an answer kept between calls, the warm-up's line of another power of warmup,
    # the cosine's brackets lost or its progress outside it, AdamW's decay bracketed wrong, compounded over
    # the steps or shrinking the gradient, a bias correction's brackets around 1 - beta
    "noam_line_power": "the warm-up's rising line is step * warmup^{power:.4g} (times d_model^-0.5; step / "
    "warmup is step * warmup^-1), the decay after it right: the line is step * warmup^-1.5, step / (warmup * "
    "sqrt(warmup)), which meets step^-0.5 at step = warmup",
    "cosine_wave_unbracketed": "the cosine's brackets are lost, 0.5 * (peak - min_lr) * 1 + cos(pi * "
    "progress): * binds tighter than +, so only the 1 is scaled and cos(...) is added whole; it is 0.5 * "
    "(peak - min_lr) * (1 + cos(pi * progress))",
    "cosine_linear": "the progress stands outside the cosine, cos(pi) * progress, which is -progress: your "
    "decay is a straight line; the angle is pi * progress, cos(pi * progress), a half cosine",
    "decay_unbracketed": "the decay's bracket closes early, param * (1 - lr) * weight_decay: it multiplies the "
    "parameter by weight_decay whole; it is param * (1 - lr * weight_decay), lr * weight_decay in the bracket",
    "decay_compounded": "the decay is raised to the power t, param * (1 - lr * weight_decay) ** t: each step "
    "decays the parameter it is handed once, param * (1 - lr * weight_decay) (the earlier steps' decays are "
    "in it already)",
    "decay_shrinks_gradient": "the decay shrinks the gradient, grad * (1 - lr * weight_decay): it shrinks the "
    "parameter, param * (1 - lr * weight_decay), and Adam's update takes the gradient as it is",
    "bias_power_bracketed": "a bias correction raises 1 - beta to the power t, (1 - beta1) ** t: it is 1 - "
    "beta1 ** t, beta alone raised (** binds tighter than -: write it without brackets), and 1 - beta2 ** t",
    "earlier_answer": "your result for {these} is the one for {earlier}, an earlier call's: a cache (keyed on "
    "some of the arguments alone) or a global kept between calls gives it; compute each result from every "
    "argument handed in, and keep nothing from one call to the next",
    "keeps_state": "{name} keeps state between calls: called twice on the same arguments, it gave two answers "
    "({what} differs); use only what it is handed{counter}, and keep nothing from one call to the next",
    # an eighth cold learner's: the warm-up's line in whole numbers or without the factor in front, the
    # warm-up divided by warmup + 1, the cosine's angle in degrees, a rate past total other than min_lr, an
    # argument not used
    "noam_whole_line": "the warm-up's line divides in whole numbers, step // warmup ** 1.5, which is 0 until "
    "step reaches warmup^1.5 (past warmup itself): it is step * warmup^-1.5, step / warmup ** 1.5 with a true "
    "division, climbing a little every step up to step = warmup",
    "noam_front_decay_only": "the d_model^-0.5 factor is missing from the warm-up's rising line: yours "
    "multiplies the decay alone by it, min(d_model^-0.5 * step^-0.5, step * warmup^-1.5), so the line climbs "
    "sqrt(d_model) times too steeply; it multiplies both curves, d_model^-0.5 * min(step^-0.5, step * "
    "warmup^-1.5)",
    "noam_front_line_only": "the d_model^-0.5 factor is missing from the decay: yours multiplies the warm-up's "
    "rising line alone by it, min(step^-0.5, d_model^-0.5 * step * warmup^-1.5), so the decay is sqrt(d_model) "
    "times too high; it multiplies both curves, d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)",
    "warmup_divisor": "the warm-up's line divides by another number than warmup (warmup + 1 or warmup - 1), so "
    "it reaches peak at another step: it is peak * step / warmup, peak at step warmup",
    "cosine_degrees": "the cosine's angle is 180 * progress, in degrees: math.cos takes radians, so yours "
    "turns through 180 radians (about 29 circles) where it should turn half a circle; it is cos(pi * "
    "progress) (or cos(math.radians(180 * progress)))",
    "cosine_past_end": "{where} ({total}) your rate is {yours:.6g}: the decay ends at min_lr ({min_lr:.6g}) at "
    "total, and the rate stays min_lr after it (the progress held at 1, min(..., 1), gives it with no branch "
    "of its own)",
    "argument_unused": "{name} is not used: yours gives the formula's results with {name} held at {value:.6g} "
    "on every call, whatever is handed in ({handed}), as a constant written in its place (or a default "
    "used in its stead) gives{kept}; use {name} as it is given",
    # a ninth cold learner's: min_lr's floor on the warm-up too, the decay falling as another power of the
    # step read from the numbers, v of ((1 - beta2) g)^2, the moments handed in returned
    "cosine_floor_warmup": "the floor min_lr is applied to the warm-up too: yours computes max(lr, min_lr) at "
    "every step, so the warm-up's first steps, below min_lr, are held up at min_lr; the warm-up climbs in a "
    "line from 0, peak * step / warmup, whatever min_lr is (min_lr is where the decay ends)",
    "noam_decay_falls": "your decay after the warm-up falls as {falls} (a power of {power:.4g} of the step; "
    "the rising line before it is right): past step = warmup the rate is d_model^-0.5 * step^-0.5, falling as 1 / "
    "sqrt(step), and min(...) picks it there",
    "v_weight_squared": "v's weight is squared with the gradient, ((1 - beta2) * g) ** 2 = (1 - beta2)^2 g^2: "
    "v averages the gradient's square with the weight 1 - beta2, v = beta2 v + (1 - beta2) g^2",
    "moments_handed_back": "m and v are returned as they were handed in, the moments from before this step "
    "(param is updated): return the new m and v, the ones this step's update used",
    "returns_order": "{name} returns its results in another order, ({yours}): the order is ({right}), and "
    "in it they are {then}",
    # an eleventh cold learner's: the scale divided by a norm of 0, the root over the whole product, the
    # warm-up's rate floored, a moment's weight without its brackets
    "cosine_turn": "the cosine's pi is {turn:.6g} (a rounded constant): its angle turns a little more or less "
    "than half a circle, so the decay misses min_lr at total; use math.pi, cos(math.pi * progress)",
    "arguments_unused": "{names} are not used: yours gives the formula's results with {held} on every call, "
    "whatever is handed in ({handed}), as constants written in their place, defaults used in their stead, or "
    "values kept from an earlier call (a cache filled once) give; use each as it is given",
    "clip_zero_norm": "the scale max_norm / norm is computed even where the norm is 0 (every gradient zero), "
    "a division by 0 (on Python's floats it raises ZeroDivisionError, on NumPy's it gives inf or nan): divide "
    "only where norm > max_norm, and return the gradients unchanged otherwise",
    "noam_root_over_all": "the square root is taken over the whole product, 1 / sqrt(d_model * min(...)): it "
    "puts the min's two curves under the root too; only d_model is under it, d_model^-0.5 * min(step^-0.5, "
    "step * warmup^-1.5)",
    "warmup_whole_rate": "the warm-up's rate divides in whole numbers, peak * step // warmup, which floors it "
    "(to 0 wherever peak * step is under warmup): it is peak * step / warmup with a true division, climbing a "
    "little every step",
    "moment_unbracketed": "a moment's weight has lost its brackets, beta * v + 1 - beta * g (1 added, beta * g "
    "taken away): it is v = beta2 * v + (1 - beta2) * g^2, and m = beta1 * m + (1 - beta1) * g, 1 - beta in "
    "brackets",
    # a thirteenth cold learner's: the decay's factor in front read from the numbers, v of 2g, powers floored
    "noam_decay_front": "the factor in front of your decay after the warm-up is d_model^{power:.4g}{lost} (the "
    "rising line before it is right): past step = warmup the rate is d_model^-0.5 * step^-0.5, the same "
    "d_model^-0.5 in front of both curves",
    "v_doubled": "v averages 2g, the gradient times 2 (grad * 2), where g^2 belongs (grad ** 2): v = beta2 v "
    "+ (1 - beta2) g^2, the gradient's square",
    "clip_whole_scale": "the scale divides in whole numbers, max_norm // norm, which is 0 wherever norm is over "
    "max_norm, so clipping zeroes every gradient: it is max_norm / norm, a true division",
    "noam_floored_powers": "the powers are divided in whole numbers in more than one place: a power written "
    "(-1 // 2) is -1 in whole numbers (// rounds -0.5 down), and (-3 // 2) is -2; use -0.5 and -1.5 (or "
    "(-1 / 2) and (-3 / 2)): lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)",
}


def sentence(key: str, **values: Any) -> str:
    """The sentence of a recognised mistake, its numbers filled in."""
    return SENTENCES[key].format(**values)
