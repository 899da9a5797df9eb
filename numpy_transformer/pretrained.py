"""Pretrained Marian (OPUS-MT) translators, read from a local Hugging Face model directory.

``load_pretrained(DIR)`` reads ``config.json`` and ``model.safetensors`` (through the ``safetensors``
library's NumPy API: nothing is unpickled) and returns an ordinary :class:`Transformer` built with
the options Marian's architecture needs (post-norm blocks without final norms, SiLU feed-forward,
biased attention projections, sines-then-cosines positions, one embedding matrix for the source,
the target and the projection, and ``final_logits_bias`` as the projection's bias). Its token ids
are Marian's own (``vocab.json``): ``marian_special_ids`` gives the padding, the end of sentence
and the decoder's start token (Marian starts decoding from the padding id).

Nothing here reaches the network: the user downloads a model once (README, "Start from a
pretrained translator").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy

from .model import Transformer, build_transformer

WEIGHTS = "model.safetensors"
PICKLED = ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")
ACTIVATION_NAMES = {
    "swish": "silu",
    "silu": "silu",
    "relu": "relu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
}
CONVERT = (
    'python -c "from transformers import MarianMTModel as M; '
    "M.from_pretrained('{dir}').save_pretrained('{dir}', safe_serialization=True)\""
)


class PretrainedError(ValueError):
    """A model directory that cannot be read as a Marian translator: the message names the file
    and the problem, and what to do where there is something to do."""


def read_config(directory: str | Path) -> dict[str, Any]:
    """The directory's ``config.json``, checked to be a Marian model this package can build."""
    path = Path(directory) / "config.json"
    if not Path(directory).is_dir():
        raise PretrainedError(f"{directory}: not a directory (expected a Hugging Face model directory)")
    if not path.is_file():
        raise PretrainedError(f"{path}: no such file (a Hugging Face model directory holds config.json)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PretrainedError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(config, dict) or config.get("model_type") != "marian":
        found = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise PretrainedError(f"{path}: model_type is {found!r}, expected 'marian' (an OPUS-MT model)")
    pairs = (
        ("encoder_layers", "decoder_layers"),
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    )
    for encoder_key, decoder_key in pairs:
        if config.get(encoder_key) != config.get(decoder_key):
            raise PretrainedError(
                f"{path}: {encoder_key}={config.get(encoder_key)!r} and {decoder_key}={config.get(decoder_key)!r} "
                "differ; this package builds encoders and decoders of one shape"
            )
    activation = config.get("activation_function", "swish")
    if activation not in ACTIVATION_NAMES:
        raise PretrainedError(
            f"{path}: activation_function {activation!r} is not supported (expected one of "
            f"{', '.join(sorted(ACTIVATION_NAMES))})"
        )
    if not config.get("scale_embedding", False):
        raise PretrainedError(
            f"{path}: scale_embedding is false, but this package always scales embeddings by sqrt(d_model)"
        )
    if config.get("normalize_before", False):
        raise PretrainedError(f"{path}: normalize_before is true; Marian's blocks are post-norm")
    vocab = config.get("vocab_size")
    decoder_vocab = config.get("decoder_vocab_size") or vocab
    if decoder_vocab != vocab or not config.get("share_encoder_decoder_embeddings", True):
        raise PretrainedError(
            f"{path}: separate source and target vocabularies (decoder_vocab_size {decoder_vocab}, "
            f"vocab_size {vocab}) are not supported yet: only models with one shared vocabulary"
        )
    return config


def marian_special_ids(config: dict[str, Any]) -> dict[str, int]:
    """pad, eos and the decoder's start token (``decoder_start_token_id``, Marian's padding id)."""
    pad = int(config["pad_token_id"])
    return {
        "pad_id": pad,
        "eos_id": int(config["eos_token_id"]),
        "bos_id": int(config.get("decoder_start_token_id", pad)),
    }


def read_weights(directory: str | Path) -> dict[str, numpy.ndarray]:
    """The tensors of ``model.safetensors`` as NumPy arrays; a directory with only a pickled
    checkpoint is refused with the command that converts it."""
    path = Path(directory) / WEIGHTS
    if not path.is_file():
        pickled = [name for name in PICKLED if (Path(directory) / name).is_file()]
        if pickled:
            raise PretrainedError(
                f"{Path(directory) / pickled[0]}: a pickled checkpoint, which is never loaded (unpickling can run "
                f"any code); convert it once to {WEIGHTS} with: {CONVERT.format(dir=directory)}"
            )
        raise PretrainedError(f"{path}: no such file")
    try:
        from safetensors.numpy import load_file
    except ImportError as error:
        raise PretrainedError(
            "reading model.safetensors needs the safetensors library: pip install 'numpy_transformer[pretrained]'"
        ) from error
    try:
        return load_file(str(path))
    except Exception as error:  # the library's own error type for a corrupt file
        raise PretrainedError(
            f"{path}: corrupt or not a safetensors file ({type(error).__name__}: {error})"
        ) from error


def _state_dict(weights: dict[str, numpy.ndarray], layers: int, path: Path) -> dict[str, numpy.ndarray]:
    """numpy_transformer's parameter names -> Marian's tensors (tied embeddings: one matrix)."""

    def get(*names: str) -> numpy.ndarray:
        for name in names:
            for prefix in ("", "model."):
                if prefix + name in weights:
                    return weights[prefix + name]
        raise PretrainedError(f"{path}: holds no tensor {names[0]!r}")

    def attention(ours: str, theirs: str) -> dict[str, numpy.ndarray]:
        return {
            f"{ours}.{mine}.{part}": get(f"{theirs}.{marian}_proj.{hf}")
            for mine, marian in (("w_q", "q"), ("w_k", "k"), ("w_v", "v"), ("w_o", "out"))
            for part, hf in (("weight", "weight"), ("bias", "bias"))
        }

    def norm(ours: str, theirs: str) -> dict[str, numpy.ndarray]:
        return {f"{ours}.gamma": get(f"{theirs}.weight"), f"{ours}.beta": get(f"{theirs}.bias")}

    def feed_forward(ours: str, theirs: str) -> dict[str, numpy.ndarray]:
        return {
            f"{ours}.linear_{i}.{part}": get(f"{theirs}.fc{i}.{part}")
            for i in (1, 2)
            for part in ("weight", "bias")
        }

    state = {
        "src_embed.embedding.weight": get("shared.weight", "encoder.embed_tokens.weight", "lm_head.weight"),
        "projection_layer.proj.bias": get("final_logits_bias").reshape(-1),
    }
    for i in range(layers):
        ours, theirs = f"encoder.layers.{i}", f"encoder.layers.{i}"
        state |= attention(f"{ours}.self_attention_block", f"{theirs}.self_attn")
        state |= norm(f"{ours}.residual_connections.0.norm", f"{theirs}.self_attn_layer_norm")
        state |= feed_forward(f"{ours}.feed_forward_block", theirs)
        state |= norm(f"{ours}.residual_connections.1.norm", f"{theirs}.final_layer_norm")
        ours, theirs = f"decoder.layers.{i}", f"decoder.layers.{i}"
        state |= attention(f"{ours}.self_attention_block", f"{theirs}.self_attn")
        state |= norm(f"{ours}.residual_connections.0.norm", f"{theirs}.self_attn_layer_norm")
        state |= attention(f"{ours}.cross_attention_block", f"{theirs}.encoder_attn")
        state |= norm(f"{ours}.residual_connections.1.norm", f"{theirs}.encoder_attn_layer_norm")
        state |= feed_forward(f"{ours}.feed_forward_block", theirs)
        state |= norm(f"{ours}.residual_connections.2.norm", f"{theirs}.final_layer_norm")
    return state


def load_pretrained(directory: str | Path, dtype: str = "float32") -> Transformer:
    """The Marian model in ``directory`` (``config.json``, ``model.safetensors``) as a Transformer.

    Its ids are Marian's vocabulary's (see marian_special_ids); its configuration (``model.config``)
    is an ordinary one, so it saves, translates, evaluates and trains as any other model.
    """
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    directory = Path(directory)
    config = read_config(directory)
    weights = read_weights(directory)
    layers, width = int(config["encoder_layers"]), int(config["d_model"])
    vocab, length = int(config["vocab_size"]), int(config["max_position_embeddings"])
    model = build_transformer(
        vocab,
        vocab,
        length,
        length,
        d_model=width,
        N=layers,
        h=int(config["encoder_attention_heads"]),
        dropout=float(config.get("dropout", 0.1)),
        d_ff=int(config["encoder_ffn_dim"]),
        norm_first=False,
        dtype=dtype,
        seed=0,
        tie_embeddings=True,
        shared_vocab=True,
        activation=ACTIVATION_NAMES[config.get("activation_function", "swish")],
        attention_bias=True,
        positions="split",
        final_norm=False,
        padding_idx=int(config["pad_token_id"]),  # as transformers' nn.Embedding(padding_idx=pad_token_id)
    )
    path = directory / WEIGHTS
    for side in ("encoder", "decoder"):  # a saved positional table must be the one the model computes
        for name in (f"model.{side}.embed_positions.weight", f"{side}.embed_positions.weight"):
            if name in weights:
                table = getattr(model, "src_pos" if side == "encoder" else "tgt_pos").pe
                saved = weights[name].astype(numpy.float64)
                if saved.shape != table.shape or numpy.abs(saved - table).max() > 1e-6:
                    raise PretrainedError(
                        f"{path}: its {name} is not the sines-then-cosines table Marian computes"
                    )
    try:
        model.load_state_dict(_state_dict(weights, layers, path))
    except ValueError as error:
        raise PretrainedError(f"{path}: the weights do not fit config.json ({error})") from error
    return model


class MarianTokenizer:
    """Marian's subwords: ``source.spm`` splits the source, ``target.spm`` the target (SentencePiece
    models, through the ``sentencepiece`` library), and ``vocab.json`` maps each piece to the
    model's id (a piece it lacks is ``<unk>``), as transformers' MarianTokenizer does. A leading
    language code (``>>fra<<``) is one token. No punctuation normalisation is applied (transformers
    applies Moses' only where sacremoses is installed).
    """

    def __init__(self, directory: str | Path) -> None:
        directory = Path(directory)
        try:
            import sentencepiece
        except ImportError as error:
            raise PretrainedError(
                "Marian's tokenizer needs the sentencepiece library: pip install 'numpy_transformer[pretrained]'"
            ) from error
        for name in ("source.spm", "target.spm", "vocab.json"):
            if not (directory / name).is_file():
                raise PretrainedError(f"{directory / name}: no such file (a Marian model directory holds it)")
        try:
            vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise PretrainedError(f"{directory / 'vocab.json'}: not valid JSON ({error})") from error
        if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
            raise PretrainedError(f"{directory / 'vocab.json'}: expected an object of piece -> integer id")
        for special in ("</s>", "<unk>", "<pad>"):
            if special not in vocab:
                raise PretrainedError(f"{directory / 'vocab.json'}: has no {special!r} entry")
        self.vocab: dict[str, int] = vocab
        self.pieces = {index: piece for piece, index in vocab.items()}
        self.eos_id: int = vocab["</s>"]
        self.unk_id: int = vocab["<unk>"]
        self.pad_id: int = vocab["<pad>"]
        self.source, self.target = (
            sentencepiece.SentencePieceProcessor(model_file=str(directory / name))
            for name in ("source.spm", "target.spm")
        )

    def _encode(self, text: str, model: Any) -> list[int]:
        code: list[str] = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2 :]
        pieces = code + model.encode(text, out_type=str)
        return [self.vocab.get(piece, self.unk_id) for piece in pieces] + [self.eos_id]

    def encode_source(self, text: str) -> list[int]:
        """The source sentence's ids, ``</s>`` last."""
        return self._encode(text, self.source)

    def encode_target(self, text: str) -> list[int]:
        """The target sentence's ids (what fine-tuning predicts), ``</s>`` last."""
        return self._encode(text, self.target)

    def decode(self, ids: list[int]) -> str:
        """The target text of ``ids``, without ``</s>``, ``<pad>`` and ``<unk>`` (transformers'
        ``decode(ids, skip_special_tokens=True)``)."""
        pieces = [
            self.pieces[i]
            for i in ids
            if i not in (self.eos_id, self.pad_id, self.unk_id) and i in self.pieces
        ]
        return str(self.target.decode_pieces(pieces)).replace("\u2581", " ").strip()
