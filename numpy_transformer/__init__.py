"""numpy_transformer: the encoder-decoder Transformer in NumPy, every backward written by hand."""

from typing import Any

from . import _starting  # noqa: F401  (first: Ctrl-C while the command's modules load)
from .backend import get_array_module, set_backend
from .gradient_checking import assert_gradients, assert_module_gradients, gradcheck
from .kernels import get_kernels, set_kernels
from .layers import (
    Dropout,
    Embedding,
    FeedForwardBlock,
    InputEmbeddings,
    LayerNormalization,
    Linear,
    MultiHeadAttentionBlock,
    MultiHeadLatentAttentionBlock,
    PositionalEncoding,
    ProjectionLayer,
)
from .machine import tune_cpu
from .model import (
    Transformer,
    TransformerConfig,
    build_transformer,
    causal_mask,
    check_ids_on_host,
    loss_and_backward,
    make_src_mask,
    make_tgt_mask,
)
from .module import Module, ModuleList, Parameter
from .stacks import Decoder, DecoderBlock, Encoder, EncoderBlock, ResidualConnection

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """The toolkit's ``load_pretrained``, imported on first use so that the model loads alone."""
    if name == "load_pretrained":
        from .translator.huggingface import load_pretrained

        return load_pretrained
    raise AttributeError(f"module 'numpy_transformer' has no attribute {name!r}")


__all__ = [
    "Decoder",
    "DecoderBlock",
    "Dropout",
    "Embedding",
    "Encoder",
    "EncoderBlock",
    "FeedForwardBlock",
    "InputEmbeddings",
    "LayerNormalization",
    "Linear",
    "Module",
    "ModuleList",
    "MultiHeadAttentionBlock",
    "MultiHeadLatentAttentionBlock",
    "Parameter",
    "PositionalEncoding",
    "ProjectionLayer",
    "ResidualConnection",
    "Transformer",
    "TransformerConfig",
    "assert_gradients",
    "assert_module_gradients",
    "build_transformer",
    "causal_mask",
    "check_ids_on_host",
    "get_array_module",
    "get_kernels",
    "gradcheck",
    "load_pretrained",
    "loss_and_backward",
    "make_src_mask",
    "make_tgt_mask",
    "set_backend",
    "set_kernels",
    "tune_cpu",
]
