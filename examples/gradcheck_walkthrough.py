"""Check a backward pass yourself, in under a minute.

    python examples/gradcheck_walkthrough.py

1. One functional pair, layer normalisation, by hand: perturb one input entry by +-eps and
   compare (L(x + eps) - L(x - eps)) / 2 eps with the analytic gradient.
2. The same for every entry, with numpy_transformer.gradient_checking.assert_gradients.
3. A whole encoder block (attention, feed-forward, two residual connections) with assert_module_gradients.
4. What a wrong backward looks like: the checker names the tensor, the index and both values.
"""

import numpy as np

import numpy_transformer as nt
from numpy_transformer import functional as F
from numpy_transformer.gradient_checking import assert_gradients, assert_module_gradients
from numpy_transformer.gradient_checking.report import GradcheckError

rng = np.random.default_rng(0)

# 1. by hand -----------------------------------------------------------------------------------
x, gamma, beta = rng.standard_normal((2, 3, 6)), rng.standard_normal(6), rng.standard_normal(6)
upstream = rng.standard_normal((2, 3, 6))  # a random, non-uniform dL/dy: L = sum(upstream * y)
out, cache = F.layer_norm_forward(x, gamma, beta)
dx, dgamma, dbeta = F.layer_norm_backward(upstream, cache)
eps, index = 1e-6, (1, 2, 4)
x[index] += eps
plus = (F.layer_norm_forward(x, gamma, beta)[0] * upstream).sum()
x[index] -= 2 * eps
minus = (F.layer_norm_forward(x, gamma, beta)[0] * upstream).sum()
x[index] += eps
print(f"1. dL/dx{index}: analytic {dx[index]:.10f}, central difference {(plus - minus) / (2 * eps):.10f}")

# 2. every entry of every input ----------------------------------------------------------------
result = assert_gradients(
    F.layer_norm_forward,
    F.layer_norm_backward,
    {"x": x, "gamma": gamma, "beta": beta},
    wrt=["x", "gamma", "beta"],
)
print("2. layer norm, every entry:\n" + str(result))

# 3. a whole module: every parameter and the input ---------------------------------------------
nt.set_kernels(
    "reference"
)  # check the textbook; tests/model/test_kernels.py proves the fast kernels equal to it
d, common = 8, {"dtype": "float64", "rng": np.random.default_rng(1)}
block = nt.EncoderBlock(
    d,
    nt.MultiHeadLatentAttentionBlock(d, 2, 0.0, **common),
    nt.FeedForwardBlock(d, 16, 0.0, **common),
    0.0,
    **common,
).eval()
src = np.array([[5, 6, 7, 0], [5, 6, 7, 8]])
inputs = {"x": rng.standard_normal((2, 4, d)), "src_mask": nt.make_src_mask(src, 0)}
result = assert_module_gradients(block, inputs, lambda dx: {"x": dx})
print(
    f"3. encoder block with latent attention: {len(result.reports)} tensors, worst relative error "
    f"{result.max_relative_error:.1e}"
)


# 4. a deliberate bug: forget the mean term of the layer-norm backward --------------------------
def buggy_backward(dout, cache):
    xhat, rstd, gamma = cache
    g = dout * gamma
    dx = (g - xhat * (g * xhat).mean(axis=-1, keepdims=True)) * rstd  # missing: - g.mean(axis=-1)
    return dx, (dout * xhat).sum(axis=(0, 1)), dout.sum(axis=(0, 1))


try:
    assert_gradients(
        F.layer_norm_forward, buggy_backward, {"x": x, "gamma": gamma, "beta": beta}, wrt=["x", "", ""]
    )
except GradcheckError as error:
    print("4. the checker catches a wrong backward:\n" + str(error))
