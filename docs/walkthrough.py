# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Backpropagation through the Transformer, by hand
#
# This page walks through every backward pass of the model, one layer at a time, in the order the
# layers are usually taught: linear, ReLU, dropout, softmax, layer norm, embedding, positional
# encoding, scaled dot-product attention, multi-head attention (self and cross), multi-head latent
# attention and the label-smoothed cross-entropy. It ends with a gradient check of a whole tiny
# Transformer and a short training run of that model.
#
# Every section has the same five parts:
#
# 1. **Forward**: what the layer computes.
# 2. **Backward**: the gradient, derived in a few lines with nothing but the chain rule.
# 3. **In the textbook**: the function of `numpy_transformer/functional.py` that does it, shown
#    from the source, so you can put the formula and the code side by side.
# 4. **Check**: the analytic gradient compared with float64 central differences on small arrays.
# 5. **Picture**, where one helps.
#
# The page is a [jupytext](https://jupytext.readthedocs.io) notebook (`docs/walkthrough.py`): open it
# in Jupyter, or run it top to bottom with `python docs/walkthrough.py`. The test suite executes it,
# so every number below is what the code gives today. All the data is random and seeded.

# %%
import inspect

import matplotlib.pyplot as plt
import numpy as np

import numpy_transformer as nt
from numpy_transformer import functional as F
from numpy_transformer.gradient_checking import assert_gradients
from numpy_transformer.gradient_checking.report import GradcheckError
from numpy_transformer.optim import Adam
from numpy_transformer.translator.batches import make_batch
from numpy_transformer.translator.decoding import greedy_decode
from numpy_transformer.translator.vocabulary import BOS_ID, EOS_ID, PAD_ID

# The model calls tuned kernels by default; this page is about the textbook, so run on it throughout.
nt.set_kernels("reference")
rng = np.random.default_rng(0)


def show(function):
    """Print a textbook function's source, docstring included."""
    print(inspect.getsource(function))


def check(forward, backward, inputs, wrt=None):
    """Compare backward with float64 central differences of forward; print one line per gradient."""
    print(assert_gradients(forward, backward, inputs, wrt=wrt))


# %% [markdown]
# ## Notation and the one rule
#
# Training needs the gradient of one scalar, the loss $L$, with respect to every weight. For any
# array $y$ computed on the way, write $\bar y = \partial L / \partial y$: an array of the same shape
# as $y$, saying how much $L$ moves when each entry of $y$ moves. The code calls it `dout` or `dy`.
#
# Every layer of `functional.py` is a pair. The forward `*_forward(inputs) -> (out, cache)` computes
# $y = f(x)$ and keeps in `cache` whatever the backward will need. The backward
# `*_backward(dout, cache)` receives $\bar y$ and returns $\bar x$ for each differentiable input, in
# the order the forward takes them. The one rule it applies is the chain rule:
#
# $$\bar x_i = \sum_j \bar y_j \, \frac{\partial y_j}{\partial x_i}.$$
#
# That is a vector-Jacobian product. The Jacobian $\partial y / \partial x$ is never built: for a
# (32, 64, 512) activation it would have $10^{12}$ entries. Each derivation below finds the few
# array operations that give the same product.
#
# Two facts come back again and again:
#
# - **The gradient has the shape of the thing.** $\bar W$ has the shape of $W$, $\bar x$ that of
#   $x$. When a shape does not fit, a sum is missing or a transpose is wrong.
# - **A value used twice gets the sum of both gradients.** If $x$ feeds two branches, $L$ depends on
#   it through both, and the chain rule adds the two contributions. Weight sharing across positions,
#   residual connections, and self-attention's queries, keys and values all rely on it.

# %% [markdown]
# ## How a gradient is checked
#
# A derivation can be wrong in ways that still give arrays of the right shape. The check is
# numerical: move one input entry by $\pm h$ and measure the change of a scalar,
#
# $$\frac{\partial L}{\partial x_i} \approx \frac{L(x + h e_i) - L(x - h e_i)}{2h}.$$
#
# To turn a layer's array output into a scalar, the checker draws a random upstream gradient $G$ and
# uses $L = \sum G \odot f(x)$, so $\bar y = G$ and every output entry counts with a different
# weight (a uniform $G$ would hide some mistakes, such as a missing row sum). The comparison passes
# when $|a - n| \le 10^{-5} + 10^{-3}|n|$, the rule of `torch.autograd.gradcheck`.
#
# Why central differences, in float64, with $h = 10^{-6}$? The error of the estimate has two parts.
# The Taylor remainder is of order $h^2$ for the central difference (of order $h$ for the one-sided
# $(L(x + h e_i) - L(x)) / h$). Rounding adds about $\epsilon_{\text{mach}} |L| / h$, and
# $\epsilon_{\text{mach}}$ is $2 \times 10^{-16}$ in float64 but $10^{-7}$ in float32. The picture
# measures both for one entry of a layer norm's input.

# %%
x = rng.standard_normal((2, 3, 6))
gamma, beta = rng.standard_normal(6), rng.standard_normal(6)
G = rng.standard_normal((2, 3, 6))
exact = F.layer_norm_backward(G, F.layer_norm_forward(x, gamma, beta)[1])[0][1, 2, 4]


def loss_at(shift):
    moved = x.copy()
    moved[1, 2, 4] += shift
    return (G * F.layer_norm_forward(moved, gamma, beta)[0]).sum()


steps = np.logspace(-13, -1, 49)
central = [abs((loss_at(h) - loss_at(-h)) / (2 * h) - exact) for h in steps]
one_sided = [abs((loss_at(h) - loss_at(0.0)) / h - exact) for h in steps]
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.loglog(steps, central, label="central difference")
ax.loglog(steps, one_sided, label="one-sided difference")
ax.axvline(1e-6, color="gray", linestyle=":", label="h = 1e-6, the checker's step")
ax.set_xlabel("step h")
ax.set_ylabel("|estimate - analytic|")
ax.set_title("Error of a finite-difference derivative, float64")
ax.legend()
plt.show()
print(f"at h = 1e-6: central error {central[28]:.1e}, one-sided error {one_sided[28]:.1e}")

# %% [markdown]
# Right of the minimum the Taylor remainder dominates (slope 2 for central, 1 for one-sided); left of
# it the rounding error grows as $1/h$. Around $h = 10^{-6}$ the central difference agrees with the
# analytic value to about nine digits, which leaves a wide margin between "right" (relative errors
# near $10^{-9}$) and "wrong" (errors of order one).
#
# `numpy_transformer.gradient_checking.assert_gradients(forward, backward, inputs)` does all of
# this: it converts floating inputs to float64, runs the forward, feeds the backward a random $G$, perturbs
# every entry of every floating input, and raises a `GradcheckError` naming the worst entry of any
# gradient that fails. The `check` helper defined at the top prints its report: for each gradient,
# the largest relative error (divided by the largest gradient of the whole check), the largest
# absolute error, where it occurred, and how many entries were checked.

# %% [markdown]
# ## Linear
#
# **Forward.** $y = x W^\top + b$, with $W$ stored (out, in) as PyTorch stores it. $x$ may have any
# number of leading axes (batch, position); call all of its rows $n$:
#
# $$y_{nj} = \sum_i x_{ni} W_{ji} + b_j.$$
#
# **Backward.** Each $x_{ni}$ reaches every $y_{nj}$ of its own row with weight $W_{ji}$; each
# $W_{ji}$ reaches $y_{nj}$ of *every* row with weight $x_{ni}$; $b_j$ reaches $y_{nj}$ of every row
# with weight 1:
#
# $$\bar x_{ni} = \sum_j \bar y_{nj} W_{ji}, \qquad
#   \bar W_{ji} = \sum_n \bar y_{nj} x_{ni}, \qquad
#   \bar b_j = \sum_n \bar y_{nj},$$
#
# that is $\bar x = \bar y W$, $\bar W = \bar y^\top x$ and $\bar b$ = the column sums of $\bar y$,
# where $\bar y^\top x$ runs over all rows of the batch at once. The weights are shared by every
# position, so their gradient is a sum over every position.

# %%
show(F.linear_backward)

# %%
check(
    F.linear_forward,
    F.linear_backward,
    {
        "x": rng.standard_normal((2, 3, 4)),
        "weight": rng.standard_normal((5, 4)),
        "bias": rng.standard_normal(5),
    },
    wrt=["x", "weight", "bias"],
)

# %% [markdown]
# ## ReLU
#
# **Forward.** $y = \max(x, 0)$, entry by entry.
#
# **Backward.** Each output depends on its own input only, so the Jacobian is diagonal: 1 where
# $x > 0$, 0 elsewhere. $\bar x = \bar y \odot [x > 0]$. The forward keeps the boolean mask
# $[x > 0]$ as its cache.
#
# At exactly $x = 0$ the derivative does not exist (the textbook takes 0). A central difference that
# straddles the kink measures $1/2$, so a gradient check must not put an entry within $h$ of zero;
# with normal draws that happens with probability about $10^{-6}$ per entry.

# %%
show(F.relu_backward)
check(F.relu_forward, F.relu_backward, {"x": rng.standard_normal((3, 5))})

# %% [markdown]
# ## Dropout
#
# **Forward.** In training, each entry is kept with probability $1 - p$ and scaled up:
# $y = x \odot m / (1 - p)$ with $m_i \sim \text{Bernoulli}(1 - p)$. The scale keeps
# $\mathbb{E}[y] = x$, so at evaluation time dropout is simply the identity.
#
# **Backward.** For a fixed mask, $y$ is $x$ times a constant diagonal, so
# $\bar x = \bar y \odot m / (1 - p)$: the same mask and the same scale as the forward. Drawing a new
# mask in the backward, or forgetting the $1/(1 - p)$, gives a gradient of the right shape that is
# wrong.
#
# **Check.** A finite-difference check needs a deterministic function, but dropout draws a new mask
# at every call. The check below therefore gives each forward call a generator seeded the same way,
# so that every call drops the same entries.

# %%
show(F.dropout_backward)


def dropout_fixed_mask(x):
    return F.dropout_forward(x, 0.5, np.random.default_rng(7), training=True)


check(dropout_fixed_mask, F.dropout_backward, {"x": rng.standard_normal((4, 6))})

# %% [markdown]
# ## Softmax
#
# **Forward.** Along the last axis, $y_i = e^{x_i} / \sum_k e^{x_k}$. The code subtracts the row's
# maximum first, which changes nothing mathematically and keeps $e^{x}$ from overflowing.
#
# **Backward.** Here every output depends on every input of its row:
#
# $$\frac{\partial y_i}{\partial x_j} = y_i(\delta_{ij} - y_j)
# \quad\Longrightarrow\quad
# \bar x_j = \sum_i \bar y_i \, y_i (\delta_{ij} - y_j) = y_j \Big(\bar y_j - \sum_i \bar y_i y_i\Big).$$
#
# So the (n, n) Jacobian per row, $\operatorname{diag}(y) - y y^\top$, collapses into two
# element-wise products and one row sum $\sum_i \bar y_i y_i$. Forgetting that row sum is the classic
# mistake. One consequence you can test: adding the same constant to every $x_j$ of a row leaves
# $y$ unchanged, so the gradient along that direction is zero, and every row of $\bar x$ sums to 0.

# %%
show(F.softmax_backward)
x = rng.standard_normal((3, 5))
check(F.softmax_forward, F.softmax_backward, {"x": x})

# the same product with the Jacobian written out, for one row
y, cache = F.softmax_forward(x)
dy = rng.standard_normal(x.shape)
jacobian = np.diag(y[0]) - np.outer(y[0], y[0])
print("row 0, via the Jacobian:", np.round(dy[0] @ jacobian, 6))
print("row 0, softmax_backward:", np.round(F.softmax_backward(dy, cache)[0], 6))
print("row sums of dx:", F.softmax_backward(dy, cache).sum(axis=-1))

# %% [markdown]
# ## Layer normalisation
#
# **Forward.** Over the last axis (width $D$) of each row:
#
# $$\mu = \frac1D \sum_k x_k, \quad \sigma^2 = \frac1D \sum_k (x_k - \mu)^2, \quad
#   r = \frac{1}{\sqrt{\sigma^2 + \epsilon}}, \quad \hat x = (x - \mu)\, r, \quad
#   y = \gamma \odot \hat x + \beta.$$
#
# **Backward.** $\gamma$ and $\beta$ are shared by every row, as a linear layer's weights are:
# $\bar\beta = \sum_{\text{rows}} \bar y$ and $\bar\gamma = \sum_{\text{rows}} \bar y \odot \hat x$.
# The gradient reaching $\hat x$ is $g = \bar y \odot \gamma$. Every $x_i$ reaches every $\hat x_j$ of
# its row three ways: directly, through $\mu$ and through $r$. Since $\sum_k (x_k - \mu) = 0$,
# $\partial \sigma^2 / \partial x_i = \frac{2}{D}(x_i - \mu)$, hence
# $\partial r / \partial x_i = -\frac{r^3}{D}(x_i - \mu)$ and
#
# $$\frac{\partial \hat x_j}{\partial x_i} = r\Big(\delta_{ij} - \frac1D\Big) - \frac{r}{D}\,\hat x_i \hat x_j
# \quad\Longrightarrow\quad
# \bar x_i = r\Big(g_i - \operatorname{mean}(g) - \hat x_i \operatorname{mean}(g \odot \hat x)\Big).$$
#
# The term $\operatorname{mean}(g)$ is the path through $\mu$, the term
# $\hat x_i \operatorname{mean}(g \odot \hat x)$ the path through $\sigma^2$. Because of the first,
# every row of $\bar x$ sums to zero: shifting a row by a constant does not change its normalised
# value.

# %%
show(F.layer_norm_backward)
inputs = {
    "x": rng.standard_normal((2, 3, 6)),
    "gamma": rng.standard_normal(6),
    "beta": rng.standard_normal(6),
}
check(F.layer_norm_forward, F.layer_norm_backward, inputs)
dx = F.layer_norm_backward(rng.standard_normal((2, 3, 6)), F.layer_norm_forward(**inputs)[1])[0]
print("largest |row sum| of dx:", np.abs(dx.sum(axis=-1)).max())

# %% [markdown]
# ## Token embedding
#
# **Forward.** Look up each token's row of the table $E$ (shape (V, D)) and scale it by $\sqrt D$,
# as the paper does: $y_t = \sqrt D \, E_{\text{id}_t}$.
#
# **Backward.** The lookup is a product with a one-hot matrix, $y = \sqrt D\, \operatorname{onehot}(\text{ids})\, E$,
# so the linear layer's rule gives $\bar E = \sqrt D\, \operatorname{onehot}(\text{ids})^\top \bar y$:
#
# $$\bar E_v = \sqrt D \sum_{t \,:\, \text{id}_t = v} \bar y_t .$$
#
# Rows of tokens absent from the batch get zero; a token that appears several times gets the *sum*
# of its positions' gradients. The token ids are integers, so they get no gradient.
#
# The textbook does the sum with `np.add.at`, a scatter-add, without building the one-hot matrix.
# The tempting `dE[ids] += dy` is wrong: with repeated ids, NumPy's buffered fancy assignment keeps one
# of the additions and drops the others. The check catches it, and names the entry.

# %%
show(F.embedding_backward)
ids = np.array([[3, 1, 3, 0], [2, 3, 1, 1]])  # token 3 three times, token 1 twice, token 4 never
inputs = {"ids": ids, "table": rng.standard_normal((5, 4))}
check(F.embedding_forward, F.embedding_backward, inputs)


def embedding_backward_overwriting(dout, cache):
    table_grad = np.zeros(cache.table_shape)
    table_grad[cache.ids] += dout * cache.scale  # repeated ids: only one addition survives
    return table_grad


try:
    check(F.embedding_forward, embedding_backward_overwriting, inputs)
except GradcheckError as error:
    print(error)
else:
    raise AssertionError("the check should have caught the overwritten repeated ids")

# %% [markdown]
# ## Positional encoding
#
# **Forward.** The paper adds a fixed table of sinusoids to the embeddings:
# $y = x + PE_{[0:T]}$, with $PE_{\text{pos}, 2i} = \sin(\text{pos}\, w_i)$,
# $PE_{\text{pos}, 2i+1} = \cos(\text{pos}\, w_i)$ and $w_i = 10000^{-2i/D}$.
#
# **Backward.** The table is a constant, not a weight, so $\bar x = \bar y$ and there is nothing else
# to compute. The picture shows the table: each pair of columns is a sine and cosine of one
# frequency, fast on the left and slow on the right, so every position gets a distinct pattern.

# %%
show(F.positional_encoding_backward)
check(
    lambda x: F.positional_encoding_forward(x, F.sinusoidal_table(10, 4, np.float64)),
    F.positional_encoding_backward,
    {"x": rng.standard_normal((2, 5, 4))},
)
fig, ax = plt.subplots(figsize=(7, 3))
image = ax.imshow(F.sinusoidal_table(50, 64, np.float64), aspect="auto", cmap="RdBu")
ax.set_xlabel("dimension")
ax.set_ylabel("position")
ax.set_title("The sinusoidal positional encoding table, 50 positions, D = 64")
fig.colorbar(image)
plt.show()

# %% [markdown]
# ## Scaled dot-product attention
#
# **Forward.** For each batch entry and head, queries $Q$ (T, K), keys $K$ (S, K) and values
# $V$ (S, K), with scale $s = 1/\sqrt{K}$:
#
# $$S = s\, Q K^\top, \qquad S_{ts} = -10^9 \text{ where the mask hides key } s \text{ from query } t,
#   \qquad P = \operatorname{softmax}_{\text{row}}(S), \qquad Y = \operatorname{dropout}(P)\, V.$$
#
# **Backward.** Read the forward from the bottom up; each step is a layer already derived. The two
# products are linear layers in each of their factors, the softmax is the softmax above:
#
# $$\bar V = \tilde P^\top \bar Y, \qquad \bar{\tilde P} = \bar Y V^\top, \qquad
#   \bar P = \operatorname{dropout\_backward}(\bar{\tilde P}), \qquad
#   \bar S = P \odot \Big(\bar P - \textstyle\sum_{\text{row}} \bar P \odot P\Big),$$
#
# $$\bar S_{ts} = 0 \text{ where masked}, \qquad \bar Q = s\, \bar S K, \qquad \bar K = s\, \bar S^\top Q,$$
#
# where $\tilde P$ is $P$ after dropout. Two traps: the scale $s$ appears in both $\bar Q$ and
# $\bar K$, and a masked score is a constant, so it passes no gradient. In a row with some keys
# visible, $P$ is exactly 0 at the masked ones and $\bar S$ is 0 there by itself. In a row whose
# every key is masked, $P$ is uniform (all scores equal $-10^9$), and only the explicit zeroing gives
# the true gradient: those scores do not depend on $Q$ or $K$ at all.
#
# **Check.** Batch 0 uses a causal mask (query $t$ sees keys $\le t$); batch 1 hides its last two
# keys as padding, and its first query sees no key at all.

# %%
show(F.attention_backward)
T = S = 6
causal = np.tril(np.ones((T, S), dtype=bool))
padding = np.ones((T, S), dtype=bool)
padding[:, -2:] = False
padding[0] = False  # a query with every key masked
mask = np.stack([causal, padding])[:, None]  # (B, 1, T, S), the same for both heads
inputs = {
    "q": rng.standard_normal((2, 2, T, 4)),
    "k": rng.standard_normal((2, 2, S, 4)),
    "v": rng.standard_normal((2, 2, S, 4)),
    "mask": mask,
}
check(F.attention_forward, F.attention_backward, inputs)


def attention_with_dropout(q, k, v, mask):
    return F.attention_forward(q, k, v, mask, dropout_p=0.3, rng=np.random.default_rng(5), training=True)


print("with dropout on the probabilities:")
check(attention_with_dropout, F.attention_backward, inputs)

# %% [markdown]
# **Picture.** For the first head of batch 0 (causal mask), the probabilities $P$, the gradient that
# reaches them, $\bar P$, and the gradient of the scores, $\bar S$. The upper triangle is masked
# (gray where the value there is zero by construction).
# $\bar P$ is not zero there (it is $\bar Y V^\top$, which knows nothing of the mask), yet $\bar S$
# is, because the softmax backward multiplies by $P$. The first row of $\bar S$ is zero too: a query
# that sees a single key has $P = 1$ there whatever the score, so its score gets no gradient. Every
# row of $\bar S$ sums to zero, as for any softmax.

# %%
out, cache = F.attention_forward(**inputs)
dout = rng.standard_normal(out.shape)
dprobs = dout @ inputs["v"].swapaxes(-1, -2)  # the gradient reaching P (no dropout here)
dscores = F.softmax_backward(dprobs, cache.probs) * mask
hidden = ~mask[0, 0]
fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
panels = [  # masked entries in gray where they are zero by construction
    (np.ma.masked_where(hidden, cache.probs[0, 0]), "P = softmax(S), masked in gray", "viridis"),
    (dprobs[0, 0], "gradient reaching P", "RdBu"),
    (np.ma.masked_where(hidden, dscores[0, 0]), "gradient of the scores S", "RdBu"),
]
for ax, (values, title, cmap) in zip(axes, panels):
    limit = np.abs(values).max()
    low = 0.0 if cmap == "viridis" else -limit
    image = ax.imshow(values, cmap=plt.get_cmap(cmap).with_extremes(bad="lightgray"), vmin=low, vmax=limit)
    ax.set_title(title)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    fig.colorbar(image, ax=ax, shrink=0.8)
fig.tight_layout()
plt.show()
print("largest |row sum| of the score gradient:", np.abs(dscores.sum(axis=-1)).max())

# %% [markdown]
# ## Multi-head attention: cross and self
#
# **Forward.** Project, split the width $D$ into $H$ heads of width $K = D/H$, attend in every head
# at once, merge the heads back and project again:
#
# $$Q = x_q W_q^\top,\quad K = x_{kv} W_k^\top,\quad V = x_{kv} W_v^\top,\quad
#   y = \operatorname{merge}\big(\operatorname{attention}(\operatorname{split}(Q), \operatorname{split}(K),
#   \operatorname{split}(V))\big)\, W_o^\top,$$
#
# (plus biases, where the model has them). In **cross-attention** the decoder's stream gives the
# queries ($x_q$) and the encoder's output gives the keys and values ($x_{kv}$). In
# **self-attention** all three come from the same $x$. The textbook stores
# $[W_q; W_k; W_v]$ stacked as one (3D, D) matrix `w_qkv`.
#
# **Backward.** Every piece is derived already: four linear layers and one attention. Split and
# merge only reshape and transpose, moving entries without changing them, so the backward of one is
# the other. What is new is where gradients meet:
#
# - in cross-attention $x_{kv}$ feeds both $K$ and $V$: $\bar x_{kv} = \bar K W_k + \bar V W_v$;
# - in self-attention $x$ feeds all three: $\bar x = \bar Q W_q + \bar K W_k + \bar V W_v$.
#
# In the decoder, $\bar x_{kv}$ of every layer's cross-attention flows into the encoder's output,
# so the encoder's gradient is the sum over all decoder layers.

# %%
show(F.multi_head_attention_backward)
show(F.multi_head_self_attention_backward)

# %%
D, H = 8, 2
src_padding = np.array([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]  # (B, 1, 1, S)
print("cross-attention, with biases, source padding:")
check(
    F.multi_head_attention_forward,
    F.multi_head_attention_backward,
    {
        "x_q": rng.standard_normal((2, 3, D)),
        "x_kv": rng.standard_normal((2, 5, D)),
        "w_qkv": rng.standard_normal((3 * D, D)) / np.sqrt(D),
        "w_o": rng.standard_normal((D, D)) / np.sqrt(D),
        "mask": src_padding,
        "n_heads": H,
        "b_qkv": rng.standard_normal(3 * D),
        "b_o": rng.standard_normal(D),
    },
    wrt=["x_q", "x_kv", "w_qkv", "w_o", "b_qkv", "b_o"],
)
print("self-attention, causal mask:")
check(
    F.multi_head_self_attention_forward,
    F.multi_head_self_attention_backward,
    {
        "x": rng.standard_normal((2, 4, D)),
        "w_qkv": rng.standard_normal((3 * D, D)) / np.sqrt(D),
        "w_o": rng.standard_normal((D, D)) / np.sqrt(D),
        "mask": np.tril(np.ones((4, 4), dtype=bool))[None, None],
        "n_heads": H,
    },
    wrt=["x", "w_qkv", "w_o"],
)

# %% [markdown]
# ## Multi-head latent attention
#
# **Forward.** Multi-Head Latent Attention (MLA) makes keys and values from one small latent instead
# of from $x_{kv}$ directly. With latent width $L = D/4$:
#
# $$Q = x_q W_q^\top, \quad C = x_{kv} W_c^\top \ (\text{width } L), \quad
#   K = C\, W_{kd}^\top, \quad V = C\, W_{vd}^\top,$$
#
# then the same heads and output projection as above. When decoding, only $C$ has to be kept per
# past token, a quarter of the width of $K$ alone.
#
# **Backward.** One more linear layer, and one more meeting point: the latent feeds both keys and
# values, so
#
# $$\bar C = \bar K W_{kd} + \bar V W_{vd}, \qquad \bar x_{kv} = \bar C\, W_c, \qquad
#   \bar W_c = \bar C^\top x_{kv}.$$
#
# In self-attention $x$ feeds both the queries and the latent, and $\bar x$ adds the two paths. The
# textbook stores $[W_q; W_c]$ as `w_q_compress` (D + L, D) and $[W_{kd}; W_{vd}]$ as
# `w_kv_decompress` (2D, L).

# %%
show(F.multi_head_latent_attention_backward)
latent = D // 4
weights = {
    "w_q_compress": rng.standard_normal((D + latent, D)) / np.sqrt(D),
    "w_kv_decompress": rng.standard_normal((2 * D, latent)) / np.sqrt(latent),
    "w_o": rng.standard_normal((D, D)) / np.sqrt(D),
}
print("latent cross-attention, source padding:")
check(
    F.multi_head_latent_attention_forward,
    F.multi_head_latent_attention_backward,
    {
        "x_q": rng.standard_normal((2, 3, D)),
        "x_kv": rng.standard_normal((2, 5, D)),
        **weights,
        "mask": src_padding,
        "n_heads": H,
    },
)
print("latent self-attention, causal mask:")
check(
    F.multi_head_latent_self_attention_forward,
    F.multi_head_latent_self_attention_backward,
    {
        "x": rng.standard_normal((2, 4, D)),
        **weights,
        "mask": np.tril(np.ones((4, 4), dtype=bool)),
        "n_heads": H,
    },
)

# %% [markdown]
# ## Label-smoothed cross-entropy
#
# **Forward.** For each target token $n$ with logits $z_n$ (width $V$, the vocabulary) and label
# $y_n$, the model's distribution is $p_n = \operatorname{softmax}(z_n)$. Label smoothing replaces
# the one-hot target by $q_n = (1 - \varepsilon)\operatorname{onehot}(y_n) + \varepsilon / V$, and
# the loss is the mean over the $N$ tokens that are not padding:
#
# $$\ell_n = -\sum_v q_{nv} \log p_{nv}, \qquad L = \frac1N \sum_{n \text{ not padding}} \ell_n .$$
#
# **Backward.** With $\log p_{nv} = z_{nv} - \log \sum_k e^{z_{nk}}$ and $\sum_v q_{nv} = 1$,
#
# $$\frac{\partial \ell_n}{\partial z_{nj}} = -q_{nj} + p_{nj} \sum_v q_{nv} = p_{nj} - q_{nj}
# \quad\Longrightarrow\quad
# \bar z_n = \bar L\, \frac{p_n - q_n}{N} \text{ on real tokens}, \quad 0 \text{ on padding}.$$
#
# Differentiating softmax and cross-entropy together gives this one subtraction; chaining the
# softmax backward with the logarithm's would give the same numbers with more work and more
# rounding. The traps: dividing by the number of real tokens, not of all positions, and letting no
# gradient leak into padded rows.
#
# The forward returns a Python float, and the checker needs an array output to weight by $G$, so the
# check wraps the pair: the loss as a 0-dimensional array, and $G$ as the upstream $\bar L$.

# %%
show(F.cross_entropy_backward)
targets = np.array([[3, 1, 4, 0], [2, 2, 0, 0]])  # 0 is padding: 5 real tokens


def loss_forward(logits):
    loss, cache = F.cross_entropy_forward(logits, targets, pad_id=0, label_smoothing=0.1)
    return np.asarray(loss), cache


def loss_backward(dloss, cache):
    return F.cross_entropy_backward(float(dloss), cache)


check(loss_forward, loss_backward, {"logits": rng.standard_normal((2, 4, 6))})

# %% [markdown]
# **Picture.** One token's $p$, $q$ and gradient $p - q$. Without smoothing the gradient would only
# vanish as $p$ approaches one-hot, pushing the logits apart forever; with smoothing it vanishes at
# $p = q$, so the loss cannot go below the entropy of $q$,
# $H(q) = -\sum_v q_v \log q_v$. The training run at the end of the page meets that floor.

# %%
logits = 2.0 * rng.standard_normal((1, 6))
_, cache = F.cross_entropy_forward(logits, np.array([3]), label_smoothing=0.1)
smoothed = np.full(6, 0.1 / 6)
smoothed[3] += 0.9
positions = np.arange(6)
fig, ax = plt.subplots(figsize=(7, 3))
ax.bar(positions - 0.25, cache.probs[0], width=0.25, label="p = softmax(z)")
ax.bar(positions, smoothed, width=0.25, label="q, smoothed target (label 3)")
ax.bar(positions + 0.25, F.cross_entropy_backward(1.0, cache)[0], width=0.25, label="gradient p - q")
ax.axhline(0, color="black", linewidth=0.5)
ax.set_xlabel("vocabulary entry")
ax.set_title("One token of the loss: the gradient of its logits is p - q")
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# ## Blocks: where paths meet, gradients add
#
# Three facts carry the layers' backwards up to the whole model (`numpy_transformer/workbook/blocks.py`
# writes each block as a functional pair over a plain parameter dict; the workbook asks for them).
#
# **Residual.** Pre-norm $y = x + f(\mathrm{norm}(x))$: $x$ reaches $y$ along the skip and along
# the branch, so $\bar x = \bar y + \mathrm{norm}'^{\top}\!\left(f'^{\top} \bar y\right)$: the
# gradient splits at the sum and adds where $x$ forked. Post-norm $y = \mathrm{norm}(x + f(x))$: the
# norm comes after the sum, so first $\bar s = \mathrm{norm}'^{\top} \bar y$, then
# $\bar x = \bar s + f'^{\top} \bar s$: both paths go through the norm.
#
# **Memory.** The encoder's output $m$ is the keys and values of every decoder layer's
# cross-attention: $\bar m = \sum_{l} \bar m^{(l)}$, one term per decoder layer.
#
# **Tied embedding.** With the output projection $\text{logits} = h E^{\top}$ sharing $E$ with the
# target embedding $E[\text{ids}] \sqrt{D}$, $\bar E$ is the sum of the two uses' gradients.

# %%
from numpy_transformer.workbook import blocks  # noqa: E402

for norm_first in (True, False):
    width = 4
    params = {"gamma": 1 + 0.5 * rng.standard_normal(width), "beta": rng.standard_normal(width),
              "weight": rng.standard_normal((width, width)), "bias": rng.standard_normal(width)}  # fmt: skip
    print(f"residual, {'pre' if norm_first else 'post'}-norm:")
    check(
        lambda x, norm_first=norm_first, **p: blocks.residual_forward(x, p, norm_first),
        lambda dout, cache: (lambda dx, dp: (dx, *dp.values()))(*blocks.residual_backward(dout, cache)),
        {"x": rng.standard_normal((2, 3, width)), **params},
    )

src = np.array([[1, 2, 3, 0], [4, 5, 6, 2]])
tgt_in, tgt_out = np.array([[1, 2, 3], [1, 4, 0]]), np.array([[2, 3, 5], [4, 5, 0]])
params = blocks.init_params(rng, 7, 6, 8, 16, 2)
loss, cache = blocks.encoder_decoder_forward(src, tgt_in, tgt_out, params, 2, 2, 0, 0.1)
grads = blocks.encoder_decoder_backward(1.0, cache)
result = nt.gradcheck(
    lambda: blocks.encoder_decoder_forward(src, tgt_in, tgt_out, params, 2, 2, 0, 0.1)[0],
    params,
    grads,
    max_entries=8,
)
print(f"whole encoder-decoder, 2 layers: {len(result.reports)} tensors, all passed: {result.passed}")
dprojection = F.linear_backward(F.cross_entropy_backward(1.0, cache.output.loss), cache.output.projection)[1]
print(f"tgt_table: |projection's part| {np.abs(dprojection).sum():.3f}, "
      f"|embedding's part| {np.abs(grads['tgt_table'] - dprojection).sum():.3f}: both count")  # fmt: skip

# %% [markdown]
# ## A whole tiny Transformer
#
# The model chains all of the above: embeddings and positional encodings, encoder blocks
# (self-attention and feed-forward, each inside a residual connection with a layer norm), decoder
# blocks (masked self-attention, cross-attention, feed-forward), a final projection and the loss.
# Each module of `numpy_transformer/layers.py` and `stacks.py` owns its parameters, and its
# `backward` is its `forward` read in reverse, one line per step. A residual connection
# $y = x + f(x)$ is the meeting-point rule once more: $\bar x = \bar y + (\text{the branch's } \bar x)$.
#
# The check below builds two tiny models in float64 with dropout off (the function must be
# deterministic): one with multi-head attention and pre-norm, one with latent attention and the
# paper's post-norm. It computes the real loss (label smoothing, padded source and target), runs
# the backward once, then compares **every entry of every parameter** with central differences of
# that loss.


# %%
def whole_model_check(attention, norm_first):
    tiny = {"d_model": 8, "N": 1, "h": 2, "d_ff": 16, "dropout": 0.0, "dtype": "float64", "seed": 1}
    model = nt.build_transformer(9, 9, 6, 6, attention=attention, norm_first=norm_first, **tiny)
    src = np.array([[4, 5, 6, 7, 8], [5, 6, 7, 0, 0]])
    tgt_in = np.array([[BOS_ID, 8, 7, 6, 5], [BOS_ID, 7, 6, 5, 0]])
    tgt_out = np.array([[8, 7, 6, 5, 4], [7, 6, 5, EOS_ID, 0]])
    masks = nt.make_src_mask(src, PAD_ID), nt.make_tgt_mask(tgt_in, PAD_ID)

    def loss():
        logits = model.forward(src, tgt_in, *masks)
        return F.cross_entropy_forward(logits, tgt_out, pad_id=PAD_ID, label_smoothing=0.1)[0]

    _, cache = F.cross_entropy_forward(model.forward(src, tgt_in, *masks), tgt_out, PAD_ID, 0.1)
    model.zero_grad()
    model.backward(F.cross_entropy_backward(1.0, cache))
    parameters = dict(model.named_parameters())
    result = nt.gradcheck(
        loss,
        {name: parameter.data for name, parameter in parameters.items()},
        {name: parameter.grad.copy() for name, parameter in parameters.items()},
    )
    entries = sum(report.checked for report in result.reports)
    print(
        f"{attention}, {'pre' if norm_first else 'post'}-norm: {len(result.reports)} parameter tensors, "
        f"{entries} entries, all passed: {result.passed}, worst relative error {result.max_relative_error:.1e}"
    )
    for report in sorted(result.reports, key=lambda report: report.relative_error)[-3:]:
        print(f"    {report.name}: {report.relative_error:.1e}")


whole_model_check("mha", norm_first=True)
whole_model_check("mla", norm_first=False)

# %% [markdown]
# ## Training on these gradients
#
# A gradient check proves the derivative at one point. Training shows the gradients do their job
# over many: below, a small model learns to **reverse** sequences of symbols, on the textbook
# functions of this page, with the hand-written Adam of `numpy_transformer/optim.py`. One step is
# the whole story: forward, loss, backward, update.

# %%
vocab, steps, peak_lr, smoothing = 12, 1000, 3e-3, 0.1
model = nt.build_transformer(vocab, vocab, 10, 11, d_model=32, N=1, h=2, d_ff=64, dropout=0.0, seed=0)
optimizer = Adam(model, lr=peak_lr)
data_rng = np.random.default_rng(1)


def random_sequences(count):
    """Sequences of 1 to 8 symbols; ids 0-3 are padding, start, end and unknown."""
    return [data_rng.integers(4, vocab, length).tolist() for length in data_rng.integers(1, 9, count)]


losses = []
for step in range(steps):
    sources = random_sequences(32)
    batch = make_batch(sources, [source[::-1] for source in sources])
    logits = model.forward(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    loss, cache = F.cross_entropy_forward(logits, batch.tgt_out, pad_id=PAD_ID, label_smoothing=smoothing)
    model.zero_grad()
    model.backward(F.cross_entropy_backward(1.0, cache))
    optimizer.step(lr=peak_lr * min(1.0, (step + 1) / 40))  # a short linear warm-up
    losses.append(loss)

smoothed_target = np.full(vocab, smoothing / vocab)
smoothed_target[0] += 1 - smoothing
floor = -(smoothed_target * np.log(smoothed_target)).sum()
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(losses, linewidth=0.8, label="training loss, one batch of 32")
ax.axhline(floor, color="gray", linestyle="--", label=f"H(q) = {floor:.3f}, the label-smoothing floor")
ax.set_xlabel("step")
ax.set_ylabel("loss (nats per token)")
ax.set_title("Reversing sequences: the loss of a tiny Transformer")
ax.legend()
plt.show()
print(f"loss: first step {losses[0]:.3f}, mean of the last 20 steps {np.mean(losses[-20:]):.3f}")
assert np.mean(losses[-20:]) < floor + 0.2, "the model did not learn: a gradient is wrong somewhere"

# %% [markdown]
# A uniform guess over the 12 entries of the vocabulary would score $\log 12 \approx 2.48$; the
# untrained model, whose logits are not uniform, starts above that. The loss then falls towards the
# floor $H(q)$, which it cannot pass. Greedy decoding of fresh sequences shows what it learned:

# %%
model.eval()
sources = random_sequences(6)
batch = make_batch(sources, sources)
outputs = greedy_decode(model, batch.src, batch.src_mask, 10, BOS_ID, EOS_ID)
for source, output in zip(sources, outputs.tolist()):
    decoded = output[: output.index(EOS_ID)] if EOS_ID in output else output
    print(f"{source} -> {decoded}  {'reversed' if decoded == source[::-1] else 'wrong'}")

# %% [markdown]
# ## Where next
#
# - Write these backward passes yourself: `numpy-transformer learn start mywork` creates a workbook
#   with one exercise per function of this page, `numpy-transformer learn check` grades each one the
#   moment you write it, and `numpy-transformer learn train` trains a translator on your own code.
# - Check your own layers in your own tests with
#   `numpy_transformer.gradient_checking.assert_gradients`, as this page did.
# - Read `numpy_transformer/layers.py` and `stacks.py` to see how the modules chain these pairs,
#   and the guide *Learning backprop* (`docs/learn.md`), section "How backprop flows through the
#   Transformer", for the order of the whole backward pass.
