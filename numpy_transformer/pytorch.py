"""Exchange weights with PyTorch, and the equivalent PyTorch model (an optional oracle).

PyTorch is imported only inside these functions; without it they raise a clear error. The
PyTorch model mirrors numpy_transformer module for module, with the same parameter names, so
``state_dict`` entries map one to one (``Linear`` weights are (out, in) on both sides).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .model import Transformer, TransformerConfig


def _torch() -> Any:
    try:
        import torch
    except ImportError as error:
        raise RuntimeError(
            "this needs PyTorch, which numpy_transformer does not depend on; install the CPU build with: "
            "pip install torch==2.13.0"
        ) from error
    return torch


def to_torch_state_dict(model: Transformer, dtype: Any = None) -> dict[str, Any]:
    """{name: torch.Tensor} of the model's weights (dtype: the model's unless given)."""
    torch = _torch()
    return {name: torch.tensor(value, dtype=dtype) for name, value in model.state_dict().items()}


def from_torch_state_dict(model: Transformer, state: dict[str, Any]) -> None:
    """Load a PyTorch state dict (names as in numpy_transformer) into the model, checked by name and shape."""
    model.load_state_dict({name: tensor.detach().cpu().numpy() for name, tensor in state.items()})


def build_torch_transformer(settings: TransformerConfig | Mapping[str, Any]) -> Any:
    """The same architecture as ``build_transformer(**config)``, written in plain PyTorch."""
    config = TransformerConfig.of(settings)
    torch = _torch()
    nn: Any = torch.nn  # the classes below subclass nn.Module, known only at run time
    functional = torch.nn.functional
    dtype = getattr(torch, config.dtype)
    d_model, heads, dropout = config.d_model, config.h, config.dropout
    norm_first = config.norm_first

    class LayerNormalization(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gamma = nn.Parameter(torch.ones(d_model))
            self.beta = nn.Parameter(torch.zeros(d_model))

        def forward(self, x: Any) -> Any:
            return functional.layer_norm(x, (d_model,), self.gamma, self.beta, 1e-5)

    def attend(q: Any, k: Any, v: Any, mask: Any, drop: Any) -> Any:
        batch, d_k = q.shape[0], d_model // heads
        q, k, v = (t.view(batch, -1, heads, d_k).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, -1e9)
        out = drop(scores.softmax(dim=-1)) @ v
        return out.transpose(1, 2).reshape(batch, -1, d_model)

    class MultiHeadAttentionBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for name in ("w_q", "w_k", "w_v", "w_o"):
                setattr(self, name, nn.Linear(d_model, d_model, bias=False))
            self.dropout = nn.Dropout(dropout)

        def forward(self, q: Any, kv: Any, mask: Any) -> Any:
            return self.w_o(attend(self.w_q(q), self.w_k(kv), self.w_v(kv), mask, self.dropout))

    class MultiHeadLatentAttentionBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            latent = d_model // 4
            self.w_q = nn.Linear(d_model, d_model, bias=False)
            self.w_kv_compress = nn.Linear(d_model, latent, bias=False)
            self.w_k_decompress = nn.Linear(latent, d_model, bias=False)
            self.w_v_decompress = nn.Linear(latent, d_model, bias=False)
            self.w_o = nn.Linear(d_model, d_model, bias=False)
            self.dropout = nn.Dropout(dropout)

        def forward(self, q: Any, kv: Any, mask: Any) -> Any:
            c = self.w_kv_compress(kv)
            return self.w_o(
                attend(self.w_q(q), self.w_k_decompress(c), self.w_v_decompress(c), mask, self.dropout)
            )

    Attention = MultiHeadLatentAttentionBlock if config.attention == "mla" else MultiHeadAttentionBlock

    class FeedForwardBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear_1 = nn.Linear(d_model, config.d_ff)
            self.linear_2 = nn.Linear(config.d_ff, d_model)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x: Any) -> Any:
            return self.linear_2(self.dropout(torch.relu(self.linear_1(x))))

    class ResidualConnection(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = LayerNormalization()
            self.dropout = nn.Dropout(dropout)

        def forward(self, x: Any, sublayer: Any) -> Any:
            if norm_first:
                return x + self.dropout(sublayer(self.norm(x)))
            return self.norm(x + self.dropout(sublayer(x)))

    class EncoderBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.self_attention_block = Attention()
            self.feed_forward_block = FeedForwardBlock()
            self.residual_connections = nn.ModuleList([ResidualConnection() for _ in range(2)])

        def forward(self, x: Any, mask: Any) -> Any:
            x = self.residual_connections[0](x, lambda y: self.self_attention_block(y, y, mask))
            return self.residual_connections[1](x, self.feed_forward_block)

    class DecoderBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.self_attention_block = Attention()
            self.cross_attention_block = Attention()
            self.feed_forward_block = FeedForwardBlock()
            self.residual_connections = nn.ModuleList([ResidualConnection() for _ in range(3)])

        def forward(self, x: Any, memory: Any, src_mask: Any, tgt_mask: Any) -> Any:
            x = self.residual_connections[0](x, lambda y: self.self_attention_block(y, y, tgt_mask))
            x = self.residual_connections[1](x, lambda y: self.cross_attention_block(y, memory, src_mask))
            return self.residual_connections[2](x, self.feed_forward_block)

    class Stack(nn.Module):
        def __init__(self, block: Any) -> None:
            super().__init__()
            self.layers = nn.ModuleList([block() for _ in range(config.N)])
            self.norm = LayerNormalization()

    class InputEmbeddings(nn.Module):
        def __init__(self, vocab: int) -> None:
            super().__init__()
            self.embedding = nn.Embedding(vocab, d_model)

        def forward(self, ids: Any) -> Any:
            return self.embedding(ids) * math.sqrt(d_model)

    class PositionalEncoding(nn.Module):
        def __init__(self, length: int) -> None:
            super().__init__()
            position = torch.arange(length, dtype=torch.float64)[:, None]
            div_term = torch.exp(
                torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model)
            )
            pe = torch.zeros(length, d_model, dtype=torch.float64)
            pe[:, 0::2] = torch.sin(position * div_term)
            pe[:, 1::2] = torch.cos(position * div_term)[:, : d_model // 2]
            self.register_buffer("pe", pe.to(dtype), persistent=False)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x: Any) -> Any:
            return self.dropout(x + self.pe[: x.shape[1]])

    class ProjectionLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(d_model, config.tgt_vocab_size)

        def forward(self, x: Any) -> Any:
            return self.proj(x)

    class TorchTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = Stack(EncoderBlock)
            self.decoder = Stack(DecoderBlock)
            self.src_embed = InputEmbeddings(config.src_vocab_size)
            self.tgt_embed = InputEmbeddings(config.tgt_vocab_size)
            self.src_pos = PositionalEncoding(config.src_seq_len)
            self.tgt_pos = PositionalEncoding(config.tgt_seq_len)
            self.projection_layer = ProjectionLayer()
            if config.tie_embeddings:  # as build_transformer ties them
                self.tgt_embed.embedding.weight = self.projection_layer.proj.weight
                if config.shared_vocab:
                    self.src_embed.embedding.weight = self.projection_layer.proj.weight

        def encode(self, src: Any, src_mask: Any) -> Any:
            x = self.src_pos(self.src_embed(src))
            for layer in self.encoder.layers:
                x = layer(x, src_mask)
            return self.encoder.norm(x)

        def decode(self, memory: Any, src_mask: Any, tgt: Any, tgt_mask: Any) -> Any:
            x = self.tgt_pos(self.tgt_embed(tgt))
            for layer in self.decoder.layers:
                x = layer(x, memory, src_mask, tgt_mask)
            return self.decoder.norm(x)

        def project(self, x: Any) -> Any:
            return self.projection_layer(x)

        def forward(self, src: Any, tgt: Any, src_mask: Any, tgt_mask: Any) -> Any:
            return self.project(self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask))

    return TorchTransformer().to(dtype)


def to_torch_model(model: Transformer) -> Any:
    """An equivalent PyTorch model holding a copy of this model's weights."""
    torch_model = build_torch_transformer(model.config)
    missing, unexpected = torch_model.load_state_dict(to_torch_state_dict(model), strict=False)
    aliases = set(torch_model.state_dict()) - set(
        dict(torch_model.named_parameters())
    )  # tied weights' other names
    if unexpected or set(missing) != aliases:
        raise ValueError(
            f"the PyTorch model does not match: missing {sorted(set(missing) - aliases)}, unexpected {unexpected}"
        )
    return torch_model


def from_torch_model(torch_model: Any, model: Transformer) -> None:
    """Copy a PyTorch model's weights (same architecture) into ``model``; a tied weight once, by its first name."""
    from_torch_state_dict(model, dict(torch_model.named_parameters()))
