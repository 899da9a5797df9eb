"""Marian (OPUS-MT) models read from the Hugging Face format equal transformers' MarianMTModel.

The oracle is a small randomly initialised MarianMTModel built here with ``transformers`` and
saved with ``save_pretrained`` (no network): the logits agree within float32 round-off, and
within 1e-12 in float64; greedy decoding gives the same tokens; one fine-tuning step's gradients
equal PyTorch autograd's. Skipped, with the reason, only where transformers cannot be imported.
"""

import json

import numpy as np
import pytest
from conftest import relative_error

import numpy_transformer as nt
from numpy_transformer import functional as F
from numpy_transformer.translator.decoding import greedy_decode
from numpy_transformer.translator.pretrained import PretrainedError, _state_dict, marian_special_ids

torch = pytest.importorskip("torch", reason="PyTorch and transformers are the oracle for the Marian models")
transformers = pytest.importorskip("transformers", reason="transformers is the oracle for the Marian models")

V = 40  # vocabulary; Marian's padding (and decoder start) is its last id, end of sentence 0
PAD, EOS = V - 1, 0


def marian_oracle(dtype=torch.float32, seed=0, **overrides):
    options = {
        "vocab_size": V,
        "decoder_vocab_size": V,
        "d_model": 16,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 32,
        "decoder_ffn_dim": 32,
        "max_position_embeddings": 64,
        "pad_token_id": PAD,
        "eos_token_id": EOS,
        "decoder_start_token_id": PAD,
        "forced_eos_token_id": None,
        "activation_function": "swish",
        "scale_embedding": True,
        "dropout": 0.1,
        **overrides,
    }
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(transformers.MarianConfig(**options)).to(dtype).eval()
    with torch.no_grad():  # away from the initial zeros and ones, so every bias and norm matters
        for name, parameter in model.named_parameters():
            if "embed_positions" not in name:
                parameter.add_(torch.randn_like(parameter) * 0.2)
        model.final_logits_bias.normal_()
    return model


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{dtype name: (oracle, directory)} for float32 and float64 models of the same weights."""
    out = {}
    for dtype in (torch.float32, torch.float64):
        model = marian_oracle(dtype)
        if dtype == torch.float64:  # transformers computes its table in float32; give it the exact one
            table = torch.tensor(F.sinusoidal_table(64, 16, np.float64, "split"))
            with torch.no_grad():
                for side in (model.model.encoder, model.model.decoder):
                    side.embed_positions.weight.copy_(table)
        directory = tmp_path_factory.mktemp(f"marian-{dtype}".replace("torch.", ""))
        model.save_pretrained(directory)
        out[str(dtype).replace("torch.", "")] = (model, directory)
    return out


def batch():
    src = np.array(
        [[5, 6, 7, 8, EOS, PAD, PAD], [9, 10, 11, 12, 13, 14, EOS], [3, EOS, PAD, PAD, PAD, PAD, PAD]]
    )
    tgt = np.array([[PAD, 3, 4, 5, 6], [PAD, 6, 7, 8, 9], [PAD, 20, 21, 22, 23]])
    labels = np.array([[3, 4, 5, 6, EOS], [6, 7, 8, 9, EOS], [20, 21, EOS, PAD, PAD]])
    return src, tgt, labels


def oracle_logits(model, src, tgt):
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(src),
            attention_mask=torch.tensor(src != PAD),
            decoder_input_ids=torch.tensor(tgt),
        )
    return out.logits.double().numpy()


@pytest.mark.parametrize("dtype, tolerance", [("float32", 2e-6), ("float64", 1e-12)])
def test_logits_equal_marian(saved, dtype, tolerance):
    oracle, directory = saved[dtype]
    model = nt.load_pretrained(directory, dtype=dtype).eval()
    assert model.config.activation == "silu" and model.config.positions == "split"
    src, tgt, _ = batch()
    logits = model.forward(src, tgt, nt.make_src_mask(src, PAD), nt.causal_mask(tgt.shape[1]))
    expected = oracle_logits(oracle, src, tgt)
    assert logits.dtype == np.dtype(dtype)
    error = relative_error(logits, expected)
    assert error <= tolerance, f"relative error {error:.2e}"
    assert relative_error(logits[:, :, :-1], expected[:, :, 1:]) > 1e-2  # the check can fail


def test_greedy_decoding_equals_generate(saved):
    oracle, directory = saved["float64"]
    model = nt.load_pretrained(directory, dtype="float64").eval()
    ids = marian_special_ids(json.loads((directory / "config.json").read_text()))
    assert ids == {"pad_id": PAD, "eos_id": EOS, "bos_id": PAD}
    src, _, _ = batch()
    ours = greedy_decode(model, src, nt.make_src_mask(src, PAD), 12, ids["bos_id"], ids["eos_id"], pad_id=PAD)
    with torch.no_grad():
        theirs = oracle.generate(
            input_ids=torch.tensor(src),
            attention_mask=torch.tensor(src != PAD),
            num_beams=1,
            do_sample=False,
            max_length=13,
            min_length=0,
            bad_words_ids=[[PAD]],
        ).numpy()[:, 1:]  # without the start token
    for row, (mine, reference) in enumerate(zip(ours.tolist(), theirs.tolist())):
        reference = reference[: reference.index(EOS) + 1] if EOS in reference else reference
        mine = mine[: mine.index(EOS) + 1] if EOS in mine else mine
        assert mine == reference, f"row {row}"


def test_fine_tuning_gradients_equal_autograd(saved):
    """One step of the hand-written backward against autograd, in float64, dropout off."""
    oracle, directory = saved["float64"]
    model = nt.load_pretrained(directory, dtype="float64").eval()
    src, tgt, labels = batch()
    oracle.zero_grad()
    hf_labels = torch.tensor(np.where(labels == PAD, -100, labels))
    out = oracle(
        input_ids=torch.tensor(src),
        attention_mask=torch.tensor(src != PAD),
        decoder_input_ids=torch.tensor(tgt),
        labels=hf_labels,
    )
    out.loss.backward()
    model.zero_grad()
    # the start token is the padding id, so the target mask is the causal one alone, as transformers'
    logits = model.forward(src, tgt, nt.make_src_mask(src, PAD), nt.causal_mask(tgt.shape[1]))
    loss, cache = F.cross_entropy_forward(logits, labels, pad_id=PAD)
    model.backward(F.cross_entropy_backward(1.0, cache))
    assert loss == pytest.approx(out.loss.item(), rel=1e-12)
    autograd = {name: p.grad.numpy() for name, p in oracle.named_parameters() if p.grad is not None}
    autograd["final_logits_bias"] = np.zeros((1, V))  # a buffer in transformers: never trained there
    expected = _state_dict(autograd, 2, directory)
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert set(grads) == set(expected)
    scale = max(np.abs(value).max() for value in expected.values())  # errors against the largest gradient
    for name, grad in grads.items():
        if name == "projection_layer.proj.bias":  # ours is trained: its gradient is the logits' summed
            np.testing.assert_allclose(
                grad, (cache.probs - np.eye(V)[cache.targets])[cache.valid].sum(0) / cache.n_valid, atol=1e-14
            )
            continue
        error = np.abs(grad - expected[name]).max() / scale
        assert error <= 1e-10, f"{name}: error {error:.2e} of the largest gradient"
    # softmax ignores what every key shares, so the key bias has no gradient, on both sides
    assert np.abs(grads["encoder.layers.0.self_attention_block.w_k.bias"]).max() <= 1e-12 * scale


def test_a_pickled_checkpoint_is_refused_with_the_conversion(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(marian_oracle().config.to_dict()))
    (tmp_path / "pytorch_model.bin").write_bytes(b"PK\x03\x04 not read")
    with pytest.raises(
        PretrainedError,
        match=r"pytorch_model.bin: a pickled checkpoint, which is never loaded .*save_pretrained",
    ):
        nt.load_pretrained(tmp_path)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "bart"}, r"model_type is 'bart', expected 'marian'"),
        ({"activation_function": "gelu"}, r"activation_function 'gelu' is not supported"),
        ({"scale_embedding": False}, r"scale_embedding is false"),
        ({"decoder_layers": 3}, r"encoder_layers=2 and decoder_layers=3 differ"),
    ],
)
def test_configurations_it_cannot_build_are_named(saved, tmp_path, change, message):
    _, directory = saved["float32"]
    config = json.loads((directory / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    (tmp_path / "model.safetensors").write_bytes((directory / "model.safetensors").read_bytes())
    with pytest.raises(PretrainedError, match=message):
        nt.load_pretrained(tmp_path)
