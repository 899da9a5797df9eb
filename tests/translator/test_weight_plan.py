"""plan_weights' stages from a header alone (no file is read): every parameter placed, each copy of
an embedding checked, the attention biases of a model without them planned as zeros, saved position
tables placed, and what does not fit refused by name."""

from pathlib import Path

import pytest
from marian_files import SIZES, marian_config

from numpy_transformer.model import build_from_config
from numpy_transformer.translator.huggingface import PretrainedError
from numpy_transformer.translator.huggingface.config_json import model_shape
from numpy_transformer.translator.huggingface.loading import plan_weights
from numpy_transformer.translator.huggingface.safetensors_reader import TensorEntry
from numpy_transformer.translator.huggingface.weights import marian_names

V = 30
PATH = Path("model.safetensors")  # named in the messages; never opened


def header(config: dict) -> dict[str, TensorEntry]:
    """The tensors a Marian file of ``config`` holds, as read_header gives them (no bytes behind them)."""
    model = build_from_config(model_shape(config, "float32", PATH), seed=0)
    names = marian_names(SIZES["layers"])
    tensors = {}
    for ours, parameter in model.named_parameters():
        if ours == "projection_layer.proj.bias":
            name, shape = "final_logits_bias", (1, V)
        else:
            name, shape = "model." + names[ours][0], parameter.data.shape
        tensors[name] = TensorEntry(PATH, name, "F32", tuple(shape), 0, 0)
    return tensors


def plan(config: dict, tensors: dict[str, TensorEntry]):
    return plan_weights(config, tensors, PATH, model_shape(config, "float32", PATH))


def test_every_parameter_is_placed_under_marians_name():
    config = marian_config(V)
    tensors = header(config)
    planned = plan(config, tensors)
    model = build_from_config(model_shape(config, "float32", PATH), seed=0)
    assert set(planned.parameters) == {name for name, _ in model.named_parameters()}
    assert planned.parameters["src_embed.embedding.weight"].name == "model.shared.weight"
    assert planned.parameters["projection_layer.proj.bias"].name == "final_logits_bias"
    assert planned.positions == {} and planned.zeros == []


def test_a_model_without_attention_biases_plans_them_as_zeros():
    config = marian_config(V, numpy_transformer={"attention_bias": False})
    tensors = header(marian_config(V))  # the file holds Marian's biases all the same
    planned = plan(config, tensors)
    zeros = sorted(entry.name for entry in planned.zeros)
    attention_blocks = SIZES["layers"] * 3  # the encoder's self-attention, the decoder's self and cross
    assert len(zeros) == attention_blocks * 4 and all(name.endswith("_proj.bias") for name in zeros)
    assert not any(
        name.endswith(("w_q.bias", "w_k.bias", "w_v.bias", "w_o.bias")) for name in planned.parameters
    )


def test_a_saved_position_table_is_placed_and_every_embedding_copy_checked():
    config = marian_config(V)
    tensors = header(config)
    table = "model.encoder.embed_positions.weight"
    tensors[table] = TensorEntry(PATH, table, "F32", (SIZES["positions"], SIZES["d_model"]), 0, 0)
    assert plan(config, tensors).positions["encoder"].name == table
    copy = "model.decoder.embed_tokens.weight"  # a copy of the shared embedding, of another shape
    tensors[copy] = TensorEntry(PATH, copy, "F32", (V + 1, SIZES["d_model"]), 0, 0)
    with pytest.raises(
        PretrainedError, match=rf"tensor '{copy}' has shape \[{V + 1}, 16\].* give \[{V}, 16\]"
    ):
        plan(config, tensors)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda tensors: [tensors.pop(name) for name in list(tensors) if ".layers.1." in name],
            r"holds no tensor 'encoder.layers.1.\*', which config.json \(encoder_layers 2\) needs: "
            r"the file holds 1 layers",
        ),
        (
            lambda tensors: tensors.pop("model.encoder.layers.0.fc1.weight"),
            r"holds no tensor 'encoder.layers.0.fc1.weight', which config.json \(encoder_layers 2, "
            r"tie_word_embeddings true\) needs",
        ),
        (
            lambda tensors: tensors.update(unused=TensorEntry(PATH, "unused", "F32", (1,), 0, 0)),
            r"holds tensors config.json has no place for: unused \(encoder_layers 2;",
        ),
    ],
    ids=["a missing layer", "a missing tensor", "a tensor without a place"],
)
def test_what_does_not_fit_is_refused_by_name(damage, message):
    config = marian_config(V)
    tensors = header(config)
    damage(tensors)
    with pytest.raises(PretrainedError, match=r"^model.safetensors: " + message):
        plan(config, tensors)
