"""A tiny Marian (OPUS-MT) model directory in the Hugging Face format, made in a test.

``write_tokenizer`` trains two tiny SentencePiece models (sentencepiece's trainer) and writes
``source.spm``, ``target.spm`` and a ``vocab.json`` of their pieces, Marian's way: ``</s>`` 0,
``<unk>`` 1, ``<pad>`` last. ``write_model`` adds ``config.json`` and ``model.safetensors`` of
random weights without transformers (numpy_transformer's own model, written under Marian's tensor
names), for the tests that must run where transformers is not installed; the tests that compare
with transformers save its own MarianMTModel into a directory that ``write_tokenizer`` filled.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import numpy_transformer as nt
from numpy_transformer.translator.huggingface.weights import marian_names

PAIRS = [
    ("Open the file and save it.", "Öffnen Sie die Datei und speichern Sie sie."),
    ("The café is open.", "Das Café ist geöffnet."),
    ("Delete the items?", "Die Elemente löschen?"),
    ("Press the key to stop.", "Drücken Sie die Taste, um anzuhalten."),
    ("Save the file.", "Speichern Sie die Datei."),
    ("The file is open.", "Die Datei ist geöffnet."),
]
SIZES = {"d_model": 16, "layers": 2, "heads": 2, "ffn": 32, "positions": 64}


def write_tokenizer(directory: Path, pairs: list[tuple[str, str]] = PAIRS) -> int:
    """source.spm, target.spm and vocab.json in ``directory``; returns the vocabulary's size."""
    import sentencepiece

    directory.mkdir(parents=True, exist_ok=True)
    pieces: list[str] = []
    for side, texts in (("source", [s for s, _ in pairs]), ("target", [t for _, t in pairs])):
        corpus = directory / f"{side}.txt"
        corpus.write_text("\n".join(texts * 10) + "\n", encoding="utf-8")
        sentencepiece.SentencePieceTrainer.train(
            input=str(corpus),
            model_prefix=str(directory / side),
            vocab_size=40,
            character_coverage=1.0,
            minloglevel=2,
        )
        corpus.unlink()
        (directory / f"{side}.model").rename(directory / f"{side}.spm")
        (directory / f"{side}.vocab").unlink()
        processor = sentencepiece.SentencePieceProcessor(model_file=str(directory / f"{side}.spm"))
        pieces += [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return len(vocab)


def marian_config(vocab_size: int, **overrides: object) -> dict:
    """config.json's settings for a small Marian model: </s> 0, <pad> (the decoder's start) last."""
    return {
        "model_type": "marian",
        "vocab_size": vocab_size,
        "decoder_vocab_size": vocab_size,
        "d_model": SIZES["d_model"],
        "encoder_layers": SIZES["layers"],
        "decoder_layers": SIZES["layers"],
        "encoder_attention_heads": SIZES["heads"],
        "decoder_attention_heads": SIZES["heads"],
        "encoder_ffn_dim": SIZES["ffn"],
        "decoder_ffn_dim": SIZES["ffn"],
        "max_position_embeddings": SIZES["positions"],
        "pad_token_id": vocab_size - 1,
        "eos_token_id": 0,
        "decoder_start_token_id": vocab_size - 1,
        "forced_eos_token_id": None,
        "activation_function": "swish",
        "scale_embedding": True,
        "normalize_before": False,
        "share_encoder_decoder_embeddings": True,
        "dropout": 0.1,
        **overrides,
    }


def write_model(directory: Path, seed: int = 0) -> Path:
    """A tiny Marian model directory without transformers: the tokenizer, config.json and random
    weights in model.safetensors under Marian's names. Returns ``directory``."""
    from safetensors.numpy import save_file

    vocab_size = write_tokenizer(directory)
    config = marian_config(vocab_size)
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    model = nt.build_transformer(
        vocab_size,
        vocab_size,
        SIZES["positions"],
        SIZES["positions"],
        d_model=SIZES["d_model"],
        N=SIZES["layers"],
        h=SIZES["heads"],
        d_ff=SIZES["ffn"],
        norm_first=False,
        seed=seed,
        tie_embeddings=True,
        shared_vocab=True,
        activation="silu",
        attention_bias=True,
        positions="split",
        final_norm=False,
    )
    rng = np.random.default_rng(seed)
    tensors = {}
    for ours, value in model.state_dict().items():
        value = value + rng.standard_normal(value.shape).astype(value.dtype) * 0.2  # every bias matters
        if ours == "projection_layer.proj.bias":
            tensors["final_logits_bias"] = value.reshape(1, -1)
        else:
            tensors["model." + marian_names(SIZES["layers"])[ours][0]] = value
    tensors["model.shared.weight"][-1] = 0.0  # Marian's <pad> row, as transformers' conversion leaves it
    save_file(tensors, str(directory / "model.safetensors"))
    return directory
