"""The blocks' textbook (numpy_transformer/workbook/blocks.py) proven equal to the model: the same
weights, the same batch, the same dropout masks give the same loss and every gradient, for
multi-head and latent attention, pre-norm and post-norm, dropout off and on."""

import copy

import numpy as np
import pytest

from numpy_transformer.model import build_transformer, loss_and_backward, make_src_mask, make_tgt_mask
from numpy_transformer.workbook import blocks


def model_parameters(model):
    """The model's parameters under blocks.py's keys (encoder_decoder_forward's params): each a
    Parameter, whose ``data`` is the weight and ``grad`` its gradient. The attentions' stacked
    matrices ([W_q; W_k; W_v], or [W_q; W_c] and [W_kd; W_vd]) are the blocks' w_qkv, or
    w_q_compress and w_kv_decompress; residual connection j's norm is ln{j+1}; the target table is
    also the projection's weight (tied)."""
    found = {
        "src_table": model.src_embed.embedding.weight,
        "tgt_table": model.tgt_embed.embedding.weight,
        "proj_bias": model.projection_layer.proj.bias,
    }
    assert model.projection_layer.proj.weight is model.tgt_embed.embedding.weight  # tied

    def attention(block, prefix):
        if hasattr(block, "_w_qkv"):
            assert block._b_qkv is None and block.w_o.bias is None  # bias-free, the model's default
            return {f"{prefix}w_qkv": block._w_qkv, f"{prefix}w_o": block.w_o.weight}
        return {
            f"{prefix}w_q_compress": block._w_q_compress,
            f"{prefix}w_kv_decompress": block._w_kv_decompress,
            f"{prefix}w_o": block.w_o.weight,
        }

    def common(layer, prefix):
        feed_forward = layer.feed_forward_block
        named = {
            f"{prefix}w1": feed_forward.linear_1.weight,
            f"{prefix}b1": feed_forward.linear_1.bias,
            f"{prefix}w2": feed_forward.linear_2.weight,
            f"{prefix}b2": feed_forward.linear_2.bias,
        }
        for j, residual in enumerate(layer.residual_connections):
            named |= {
                f"{prefix}ln{j + 1}_gamma": residual.norm.gamma,
                f"{prefix}ln{j + 1}_beta": residual.norm.beta,
            }
        return named

    for i, layer in enumerate(model.encoder.layers):
        found |= attention(layer.self_attention_block, f"enc{i}_") | common(layer, f"enc{i}_")
    for i, layer in enumerate(model.decoder.layers):
        found |= attention(layer.self_attention_block, f"dec{i}_self_")
        found |= attention(layer.cross_attention_block, f"dec{i}_cross_") | common(layer, f"dec{i}_")
    for stack, prefix in ((model.encoder, "enc_norm_"), (model.decoder, "dec_norm_")):
        found |= {f"{prefix}gamma": stack.norm.gamma, f"{prefix}beta": stack.norm.beta}
    return found


SRC = np.array([[3, 1, 4, 1, 5], [2, 6, 5, 0, 0]])
TGT_IN = np.array([[1, 2, 7, 4], [1, 3, 3, 0]])
TGT_OUT = np.array([[2, 7, 4, 5], [3, 3, 6, 0]])


@pytest.mark.parametrize("dropout", [0.0, 0.2])
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
@pytest.mark.parametrize("attention", ["mha", "mla"])
def test_the_blocks_equal_the_model_every_gradient(kernels, attention, norm_first, dropout):
    model = build_transformer(
        9, 8, 6, 6, d_model=8, N=2, h=2, dropout=dropout, d_ff=12, attention=attention,
        norm_first=norm_first, dtype="float64", tie_embeddings=True, seed=5,
    )  # fmt: skip
    parameters = model_parameters(model)
    assert {id(p) for p in parameters.values()} >= {id(p) for p in model.parameters() if p.owner is p}
    params = {key: parameter.data.copy() for key, parameter in parameters.items()}
    assert set(params) == set(
        blocks.init_params(np.random.default_rng(0), 9, 8, 8, 12, 2, attention=attention)
    )
    rng = copy.deepcopy(model.rng)  # the generator in the model's state: the blocks draw the model's masks
    model.zero_grad()
    loss = loss_and_backward(
        model, SRC, TGT_IN, make_src_mask(SRC, 0), make_tgt_mask(TGT_IN, 0), TGT_OUT, 0, 0.1
    )
    theirs, cache = blocks.encoder_decoder_forward(
        SRC, TGT_IN, TGT_OUT, params, 2, 2, 0, 0.1, norm_first, dropout, rng
    )
    grads = blocks.encoder_decoder_backward(1.0, cache)
    assert abs(theirs - loss) <= 1e-12 * abs(loss)
    assert set(grads) == set(params)
    for key, parameter in parameters.items():
        np.testing.assert_allclose(grads[key], parameter.grad, rtol=1e-9, atol=1e-12, err_msg=key)
    if dropout:  # the masks were drawn: the generators are in the same state after them
        assert model.rng.bit_generator.state == rng.bit_generator.state
        assert cache.encoder.layers[0].dropout_1 is not None


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_the_blocks_equal_the_models_forward_and_backward(norm_first):
    """Transformer.forward and .backward (every position projected) give blocks.py's loss and gradients."""
    from numpy_transformer import functional

    model = build_transformer(9, 8, 6, 6, d_model=8, N=1, h=2, dropout=0.1, d_ff=12, norm_first=norm_first,
                              dtype="float64", tie_embeddings=True, seed=2)  # fmt: skip
    parameters = model_parameters(model)
    params = {key: parameter.data.copy() for key, parameter in parameters.items()}
    rng = copy.deepcopy(model.rng)
    model.zero_grad()
    logits = model.forward(SRC, TGT_IN, make_src_mask(SRC, 0), make_tgt_mask(TGT_IN, 0))
    loss, loss_cache = functional.cross_entropy_forward(logits, TGT_OUT, 0, 0.1)
    model.backward(functional.cross_entropy_backward(1.0, loss_cache))
    theirs, cache = blocks.encoder_decoder_forward(
        SRC, TGT_IN, TGT_OUT, params, 1, 2, 0, 0.1, norm_first, 0.1, rng
    )
    grads = blocks.encoder_decoder_backward(1.0, cache)
    assert abs(theirs - loss) <= 1e-12 * abs(loss)
    for key, parameter in parameters.items():
        np.testing.assert_allclose(grads[key], parameter.grad, rtol=1e-9, atol=1e-12, err_msg=key)


def test_textbook_gives_the_boundary_gradients_of_every_new_rung():
    """textbook(cache, dout) of the embedding with positions, the stacks, the projection with its loss
    and the whole model: what each backward returns, and the gradients where their pieces meet."""
    from numpy_transformer import functional
    from numpy_transformer.backend import make_rng
    from numpy_transformer.workbook import textbook

    rng = np.random.default_rng(4)
    params = blocks.init_params(rng, 9, 8, 8, 12, 2, attention="mla")
    x, cache = blocks.embedding_with_positions_forward(SRC, {"table": params["src_table"]}, 0.3, make_rng(1))
    dout = rng.standard_normal(x.shape)
    found = textbook(cache, dout)
    np.testing.assert_array_equal(found["dembedding"], functional.dropout_backward(dout, cache.dropout))
    np.testing.assert_array_equal(
        found["dtable"], blocks.embedding_with_positions_backward(dout, cache)["table"]
    )

    src_mask, tgt_mask = blocks.masks(SRC, TGT_IN, 0)
    memory, cache = blocks.encoder_stack_forward(x, params, src_mask, 2, 2, False, 0.2, make_rng(2))
    found = textbook(cache, dout)
    np.testing.assert_array_equal(found["dlayers[1]"], found["norm.dx"])
    np.testing.assert_array_equal(found["dx"], found["layers[0].dx"])
    assert "ddropout_1" not in found and "dlayers[1].dropout_1" in found  # the blocks' masks, by place

    y = rng.standard_normal((2, 4, 8))
    out, cache = blocks.decoder_stack_forward(y, memory, params, src_mask, tgt_mask, 2, 2, True, 0.0, None)
    found = textbook(cache, rng.standard_normal(out.shape))
    np.testing.assert_allclose(found["dmemory"], found["layers[0].dmemory"] + found["layers[1].dmemory"])
    np.testing.assert_array_equal(found["layers[1].dmemory"], found["layers[1].cross_attention.dx_kv"])

    _, cache = blocks.projection_loss_forward(out, TGT_OUT, {"weight": params["tgt_table"],
                                                                "bias": params["proj_bias"]}, 0, 0.1)  # fmt: skip
    found = textbook(cache, 0.5)
    np.testing.assert_array_equal(found["dprojection"], functional.cross_entropy_backward(0.5, cache.loss))
    assert found["dloss"] == 0.5 and found["dbias"].shape == (8,)

    _, cache = blocks.encoder_decoder_forward(
        SRC, TGT_IN, TGT_OUT, params, 2, 2, 0, 0.1, True, 0.1, make_rng(3)
    )
    found = textbook(cache, 1.0)
    tied = found["output.dparams"]["weight"] + found["tgt_embedding.dparams"]["table"]
    np.testing.assert_array_equal(found["dtgt_table"], tied)
    np.testing.assert_array_equal(found["dencoder"], found["decoder.dmemory"])
    np.testing.assert_array_equal(found["ddecoder"], found["output.dx"])
    assert found["doutput"] == 1.0 and "ddecoder.layers[1].norm_3" in found
