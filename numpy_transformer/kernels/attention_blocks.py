"""The eight attention-block kernels around a kernel module's fused attention: one set for every module.

kernels.cpu and kernels.cuda each do the four attention blocks (MHA and MLA, self- and cross-attention)
in one pair of functions of their own, ``fused_forward(x_q, x_kv, w_in, w_decompress, w_o, mask,
n_heads, dropout_p, rng, training, b_in, b_o)`` and ``fused_backward(dout, cache)`` (the latter
returning dx_q, dx_kv, dw_in, dw_decompress, dw_o, db_in, db_o). ``block_kernels`` wraps such a pair
in the textbook's eight signatures, named as the module's own functions, so that the kernel dispatch
(``kernels.ops``) finds them in the module as it finds every other kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backend import Array


def block_kernels(fused_forward: Callable, fused_backward: Callable, module: str) -> dict[str, Callable]:
    """The textbook's attention-block functions by name, each running ``fused_forward`` or
    ``fused_backward`` and belonging to the kernel module ``module`` (its ``__name__``)."""

    def multi_head_attention_forward(
        x_q: Array,
        x_kv: Array,
        w_qkv: Array,
        w_o: Array,
        mask: Array | None,
        n_heads: int,
        dropout_p: float = 0.0,
        rng: Any = None,
        training: bool = False,
        b_qkv: Array | None = None,
        b_o: Array | None = None,
    ) -> tuple[Array, Any]:
        return fused_forward(x_q, x_kv, w_qkv, None, w_o, mask, n_heads, dropout_p, rng, training, b_qkv, b_o)

    def multi_head_attention_backward(
        dout: Array, cache: Any
    ) -> tuple[Array, Array, Array, Array, Array | None, Array | None]:
        dx_q, dx_kv, dw_qkv, _, dw_o, db_qkv, db_o = fused_backward(dout, cache)
        return dx_q, dx_kv, dw_qkv, dw_o, db_qkv, db_o

    def multi_head_self_attention_forward(
        x: Array,
        w_qkv: Array,
        w_o: Array,
        mask: Array | None,
        n_heads: int,
        dropout_p: float = 0.0,
        rng: Any = None,
        training: bool = False,
        b_qkv: Array | None = None,
        b_o: Array | None = None,
    ) -> tuple[Array, Any]:
        return fused_forward(x, None, w_qkv, None, w_o, mask, n_heads, dropout_p, rng, training, b_qkv, b_o)

    def multi_head_self_attention_backward(
        dout: Array, cache: Any
    ) -> tuple[Array, Array, Array, Array | None, Array | None]:
        dx, _, dw_qkv, _, dw_o, db_qkv, db_o = fused_backward(dout, cache)
        return dx, dw_qkv, dw_o, db_qkv, db_o

    def multi_head_latent_attention_forward(
        x_q: Array,
        x_kv: Array,
        w_q_compress: Array,
        w_kv_decompress: Array,
        w_o: Array,
        mask: Array | None,
        n_heads: int,
        dropout_p: float = 0.0,
        rng: Any = None,
        training: bool = False,
    ) -> tuple[Array, Any]:
        return fused_forward(
            x_q, x_kv, w_q_compress, w_kv_decompress, w_o, mask, n_heads, dropout_p, rng, training
        )

    def multi_head_latent_attention_backward(
        dout: Array, cache: Any
    ) -> tuple[Array, Array, Array, Array, Array]:
        dx_q, dx_kv, dw_q_compress, dw_kv_decompress, dw_o, _, _ = fused_backward(dout, cache)
        return dx_q, dx_kv, dw_q_compress, dw_kv_decompress, dw_o

    def multi_head_latent_self_attention_forward(
        x: Array,
        w_q_compress: Array,
        w_kv_decompress: Array,
        w_o: Array,
        mask: Array | None,
        n_heads: int,
        dropout_p: float = 0.0,
        rng: Any = None,
        training: bool = False,
    ) -> tuple[Array, Any]:
        return fused_forward(
            x, None, w_q_compress, w_kv_decompress, w_o, mask, n_heads, dropout_p, rng, training
        )

    def multi_head_latent_self_attention_backward(
        dout: Array, cache: Any
    ) -> tuple[Array, Array, Array, Array]:
        dx, _, dw_q_compress, dw_kv_decompress, dw_o, _, _ = fused_backward(dout, cache)
        return dx, dw_q_compress, dw_kv_decompress, dw_o

    kernels: dict[str, Callable] = {
        function.__name__: function
        for function in (
            multi_head_attention_forward,
            multi_head_attention_backward,
            multi_head_self_attention_forward,
            multi_head_self_attention_backward,
            multi_head_latent_attention_forward,
            multi_head_latent_attention_backward,
            multi_head_latent_self_attention_forward,
            multi_head_latent_self_attention_backward,
        )
    }
    for name, function in kernels.items():  # the module's own, as kernels.kernel_functions asks
        function.__module__, function.__qualname__ = module, name
    return kernels
