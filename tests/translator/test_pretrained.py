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
from numpy_transformer.translator.huggingface import PretrainedError, marian_special_ids
from numpy_transformer.translator.huggingface.weights import _state_dict

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
        ({"d_model": 16.5}, r"config.json: d_model is 16.5, expected a whole number >= 1"),
        ({"d_model": None}, r"config.json: d_model is None, expected a whole number >= 1"),
        ({"d_model": "16"}, r"config.json: d_model is '16', expected a whole number >= 1"),
        ({"encoder_ffn_dim": 0, "decoder_ffn_dim": 0}, r"config.json: encoder_ffn_dim is 0"),
        ({"pad_token_id": 40}, r"config.json: pad_token_id is 40, expected a token id in \[0, 40\)"),
        ({"eos_token_id": None}, r"config.json: eos_token_id is None"),
        ({"dropout": "0.1"}, r"config.json: dropout is '0.1', expected a number in \[0, 1\)"),
        ({"tie_word_embeddings": "no"}, r"config.json: tie_word_embeddings is 'no', expected true or false"),
        ({"encoder_attention_heads": 3, "decoder_attention_heads": 3}, r"d_model 16 is not divisible"),
        ({"max_position_embeddings": 10**9}, r"config.json: max_position_embeddings is 1000000000"),
        ({"activation_function": ["swish"]}, r"config.json: activation_function is \['swish'\]"),
    ],
)
def test_configurations_it_cannot_build_are_named(saved, tmp_path, change, message):
    _, directory = saved["float32"]
    config = json.loads((directory / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    (tmp_path / "model.safetensors").write_bytes((directory / "model.safetensors").read_bytes())
    with pytest.raises(PretrainedError, match=message):
        nt.load_pretrained(tmp_path)


def save_marian(model, directory, tensors=None):
    """``model`` saved by transformers, its tensors then replaced by ``tensors(dict) -> dict``."""
    from safetensors.numpy import load_file, save_file

    model.save_pretrained(directory)
    if tensors is not None:
        path = directory / "model.safetensors"
        save_file(tensors(load_file(str(path))), str(path))
    return directory


def test_an_untied_model_is_read_with_its_own_embeddings_and_projection(tmp_path):
    oracle = marian_oracle(tie_word_embeddings=False)
    with torch.no_grad():  # each matrix its own, so reading the wrong one shows
        for matrix in (oracle.lm_head.weight, oracle.model.encoder.embed_tokens.weight):
            matrix.add_(torch.randn_like(matrix))
    model = nt.load_pretrained(save_marian(oracle, tmp_path)).eval()
    assert model.config.tie_embeddings is False
    src, tgt, _ = batch()
    logits = model.forward(src, tgt, nt.make_src_mask(src, PAD), nt.causal_mask(tgt.shape[1]))
    assert relative_error(logits, oracle_logits(oracle, src, tgt)) <= 2e-6


def test_an_untied_model_without_its_projection_is_refused_naming_the_setting(tmp_path):
    oracle = marian_oracle(tie_word_embeddings=False)
    drop = lambda tensors: {k: v for k, v in tensors.items() if k != "lm_head.weight"}  # noqa: E731
    with pytest.raises(PretrainedError, match=r"no tensor 'lm_head.weight.*tie_word_embeddings is false"):
        nt.load_pretrained(save_marian(oracle, tmp_path, drop))


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda t: {
                **t,
                **{k.replace("layers.1", "layers.2"): v for k, v in t.items() if "layers.1." in k},
            },
            r"has no place for: model.decoder.layers.2.encoder_attn.k_proj.bias, .* and 37 more",
        ),
        (
            lambda t: {**t, "model.encoder.layernorm_embedding.weight": np.ones(16, np.float32)},
            r"has no place for: model.encoder.layernorm_embedding.weight",
        ),
        (
            lambda t: {**t, "model.encoder.layer_norm.bias": np.ones(16, np.float32)},
            r"has no place for: model.encoder.layer_norm.bias",
        ),
        (
            lambda t: {k: v for k, v in t.items() if "decoder.layers.1.fc2" not in k},
            r"holds no tensor 'decoder.layers.1.fc2.weight', 'decoder.layers.1.fc2.bias'",
        ),
        (
            lambda t: {**t, "model.encoder.layers.0.fc1.weight": np.ones((33, 16), np.float32)},
            r"do not fit config.json \(tensor 'model.encoder.layers.0.fc1.weight' has shape \[33, 16\]",
        ),
    ],
)
def test_tensors_without_a_place_or_missing_are_refused_by_name(tmp_path, change, message):
    with pytest.raises(PretrainedError, match=message):
        nt.load_pretrained(save_marian(marian_oracle(), tmp_path, change))


@pytest.mark.parametrize(
    "change",
    [
        {"d_model": 10**6, "encoder_attention_heads": 1, "decoder_attention_heads": 1},
        {"encoder_layers": 100_000, "decoder_layers": 100_000},
        {"encoder_ffn_dim": 10**8, "decoder_ffn_dim": 10**8},
        {"max_position_embeddings": 10**9},
        {"vocab_size": 10**8, "decoder_vocab_size": 10**8},
    ],
)
def test_absurd_sizes_are_refused_before_anything_is_allocated(saved, tmp_path, change):
    import tracemalloc

    _, directory = saved["float32"]
    config = json.loads((directory / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    (tmp_path / "model.safetensors").write_bytes((directory / "model.safetensors").read_bytes())
    tracemalloc.start()
    try:
        with pytest.raises(PretrainedError, match=r"config.json"):
            nt.load_pretrained(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6, f"{peak / 1e6:.0f} MB allocated before the refusal"


def test_an_unexpected_large_tensor_is_refused_from_the_header_without_being_read(tmp_path):
    import tracemalloc

    huge = lambda t: {**t, "model.unused": np.zeros(50_000_000, np.float32)}  # noqa: E731  200 MB
    directory = save_marian(marian_oracle(), tmp_path, huge)
    tracemalloc.start()
    try:
        with pytest.raises(PretrainedError, match=r"has no place for: model.unused"):
            nt.load_pretrained(directory)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6, f"{peak / 1e6:.0f} MB allocated"


def test_a_model_larger_than_the_memory_available_is_refused_before_it_is_built(tmp_path, monkeypatch):
    """As train does: estimated from the header and config.json; the estimate is not below the
    weights the model holds."""
    from numpy_transformer.translator.huggingface import loading

    directory = save_marian(marian_oracle(), tmp_path)
    model = nt.load_pretrained(directory)
    held = sum(parameter.data.nbytes for _, parameter in model.named_parameters())
    built = []
    monkeypatch.setattr(loading, "build_from_config", lambda *args, **kwargs: built.append(1))
    monkeypatch.setattr(loading, "available_memory", lambda: held)
    with pytest.raises(
        PretrainedError, match=r"model.safetensors: the model needs about [\d.,]+ MiB .* but only"
    ):
        nt.load_pretrained(directory)
    assert not built


def test_only_the_tensors_the_model_uses_are_read(tmp_path, monkeypatch):
    from numpy_transformer.translator.huggingface.safetensors_reader import TensorEntry

    oracle = marian_oracle(tie_word_embeddings=False)  # its file also holds model.shared.weight, unused
    directory = save_marian(oracle, tmp_path)
    read = []
    original = TensorEntry.read
    monkeypatch.setattr(TensorEntry, "read", lambda self: read.append(self.name) or original(self))
    nt.load_pretrained(directory)
    assert "model.shared.weight" not in read and len(read) == len(set(read))


def test_bfloat16_weights_are_widened_not_called_corrupt(tmp_path):
    oracle = marian_oracle().to(torch.bfloat16)
    model = nt.load_pretrained(save_marian(oracle, tmp_path)).eval()
    widened = oracle.to(torch.float32)
    with torch.no_grad():  # the position tables are computed, not weights: both sides use the exact one
        table = torch.tensor(F.sinusoidal_table(64, 16, np.float32, "split"))
        for side in (widened.model.encoder, widened.model.decoder):
            side.embed_positions.weight.copy_(table)
    src, tgt, _ = batch()
    logits = model.forward(src, tgt, nt.make_src_mask(src, PAD), nt.causal_mask(tgt.shape[1]))
    assert relative_error(logits, oracle_logits(widened, src, tgt)) <= 2e-6


def safetensors_bytes(header: bytes) -> bytes:
    return len(header).to_bytes(8, "little") + header


TWO_TENSORS = b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": '


@pytest.mark.parametrize(
    "data, message",
    [  # the safetensors library's reasons
        (b"\xff" * 16, r"header too large"),
        (safetensors_bytes(b"[1]"), r"invalid JSON in header: invalid type: sequence"),
        (safetensors_bytes(b"{x"), r"invalid JSON in header: key must be a string"),
        (
            safetensors_bytes(b'{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}'),
            r"file not fully covered",
        ),
        (
            safetensors_bytes(b'{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 4]}}'),
            r"invalid shape, data type, or offset for tensor",
        ),
        (
            safetensors_bytes(b'{"a": {"dtype": "Q9", "shape": [4], "data_offsets": [0, 4]}}'),
            r"unknown variant `Q9`",
        ),
        (  # b's bytes are a's: read, it would be a copy of a
            safetensors_bytes(TWO_TENSORS + b'{"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'),
            r"invalid offset for tensor `[ab]`",
        ),
        (  # 8 bytes of data, then 8 more (the test's) that no tensor holds
            safetensors_bytes(b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}') + b"\x00" * 8,
            r"file not fully covered",
        ),
    ],
)
def test_a_damaged_header_is_refused_naming_what_is_wrong(saved, tmp_path, data, message):
    _, directory = saved["float32"]
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    (tmp_path / "model.safetensors").write_bytes(data + b"\x00" * 8)
    with pytest.raises(
        PretrainedError, match=r"model.safetensors: corrupt or not a safetensors file .*" + message
    ):
        nt.load_pretrained(tmp_path)


def test_an_endless_config_json_is_read_within_a_bound(saved, tmp_path):
    (tmp_path / "config.json").write_bytes(b" " * (2 << 20) + b"{}")
    with pytest.raises(PretrainedError, match=r"config.json: larger than 1 MiB"):
        nt.load_pretrained(tmp_path)
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").symlink_to("/dev/zero")
    with pytest.raises(PretrainedError, match=r"config.json: not a regular file"):
        nt.load_pretrained(tmp_path)
