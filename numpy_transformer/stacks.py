"""How the layers compose: the residual connection around each sublayer, the encoder and decoder
blocks it makes, and the stacks of N blocks with their final layer norms (the modules of layers.py
put together, named as in the same design).

A block's backward is its forward read in reverse, one line per step; the connections carry the
skip path's gradient between a sublayer's exit and its enter. A stack hands each block the norm its
output goes into next (the next block's first, or the stack's final one), and backwards the dropout
its input's gradient goes through next (the previous block's last), so that where the backend fuses
them a block's last add and the next norm take one launch, as the connections inside a block do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .backend import Array
from .kernels import fused_layer
from .layers import AttentionBlock, Dropout, FeedForwardBlock, LayerNormalization
from .module import Module, ModuleList


class ResidualConnection(Module):
    """Pre-norm ``x + dropout(sublayer(norm(x)))`` (the from-scratch design) or post-norm
    ``norm(x + dropout(sublayer(x)))`` (paper).

    A block runs its sublayer between the two halves, so both halves and their backwards are
    steps of the block:

        y = residual.enter(x)         pre-norm: norm(x)              post-norm: x
        y = sublayer.forward(y)
        x = residual.exit(y)          pre-norm: x + dropout(y)       post-norm: norm(x + dropout(y))

        dy = residual.exit_backward(dout)
        dy = sublayer.backward(dy)
        dx = residual.enter_backward(dy)   adds the gradient that came along the skip path

    Where the next step is another connection's enter, a block calls ``exit_entering(y, following)``:
    the two, in one launch in pre-norm where the backend fuses the dropout, the add and the norm; and
    backwards ``enter_backward_exiting(dy, preceding)`` for an enter_backward and the preceding
    connection's exit_backward. Across blocks, ``exit(y, following)`` and ``enter_backward(dy,
    preceding)`` take the norm and the dropout of the step beyond the block (input_norm, output_dropout).
    """

    def __init__(
        self,
        features: int,
        dropout: float,
        norm_first: bool = True,
        *,
        dtype: Any = "float32",
        rng: Any = None,
    ) -> None:
        super().__init__(dtype, rng)
        self.norm_first = norm_first
        self.norm = LayerNormalization(features, dtype=dtype, rng=self.rng)
        self.dropout = Dropout(dropout, dtype=dtype, rng=self.rng)
        self._skip: Array | None = None  # the forward's x, until exit adds it
        self._dskip: Array | None = None  # the gradient along the skip path, until enter_backward adds it

    @property
    def input_norm(self) -> LayerNormalization | None:
        """The norm enter applies to its input as it is: pre-norm's; None in post-norm."""
        return self.norm if self.norm_first else None

    @property
    def output_dropout(self) -> Dropout | None:
        """The dropout whose backward takes the gradient of exit's output as it is: pre-norm's; None in
        post-norm, where the norm's backward comes first."""
        return self.dropout if self.norm_first else None

    def enter(self, x: Array) -> Array:
        """The sublayer's input: norm(x) in pre-norm, x itself in post-norm. (B, T, D) -> (B, T, D)."""
        self._skip = x
        return self.norm.forward(x) if self.norm_first else x

    def exit(self, y: Array, following: LayerNormalization | None = None) -> Array:
        """Add the sublayer's output y to the skip path: x + dropout(y), normalised after in post-norm.
        ``following``: the norm the output goes into next; in pre-norm, the sum and that norm in one
        launch where the backend fuses them (kernels.fused_layer), the norm's forward then its result."""
        x, self._skip = self._skip, None
        if x is None:
            raise ValueError("ResidualConnection.exit was called before enter")
        fuse = following is not None and self.norm_first and self.dropout.training and self.dropout.p
        kernel = fused_layer("dropout_add_norm") if fuse else None
        if kernel is not None:
            assert following is not None
            return following.forward_added(y, x, self.dropout, kernel)
        total = self.dropout.forward_added(y, x)
        return total if self.norm_first else self.norm.forward(total)

    def exit_entering(self, y: Array, following: ResidualConnection) -> Array:
        """``following.enter(self.exit(y))``, the next connection's sublayer input: in pre-norm the sum
        and its layer norm in one launch where the backend fuses them."""
        return following.enter(self.exit(y, following.input_norm))

    def exit_backward(self, dout: Array) -> Array:
        """The gradient reaching the sublayer's output; the skip path's share is kept for enter_backward."""
        self._dskip = dout if self.norm_first else self.norm.backward(dout)
        return self.dropout.backward(self._dskip)

    def enter_backward_exiting(self, dy: Array, preceding: ResidualConnection) -> Array:
        """``preceding.exit_backward(self.enter_backward(dy))``, the gradient reaching the preceding
        connection's sublayer: in pre-norm the norm's backward, the skip gradient's add and the preceding
        dropout's backward in one launch where the backend fuses them."""
        return preceding.exit_backward(self.enter_backward(dy, preceding.output_dropout))

    def enter_backward(self, dy: Array, preceding: Dropout | None = None) -> Array:
        """dx = the gradient through the sublayer's input (through norm in pre-norm) + the skip path's.
        ``preceding``: the dropout whose backward takes dx next; in pre-norm, the two in one launch where
        the backend fuses them (kernels.fused_layer), the dropout's backward then its result."""
        dskip, self._dskip = self._dskip, None
        if dskip is None:
            raise ValueError("ResidualConnection.enter_backward was called before exit_backward")
        return self.norm.backward_added(dy, dskip, preceding) if self.norm_first else dy + dskip


class EncoderBlock(Module):
    """Self-attention then feed-forward, each inside a residual connection."""

    def __init__(
        self,
        features: int,
        self_attention_block: AttentionBlock,
        feed_forward_block: FeedForwardBlock,
        dropout: float,
        norm_first: bool = True,
        *,
        dtype: Any = "float32",
        rng: Any = None,
    ) -> None:
        super().__init__(dtype, rng)
        self.self_attention_block = self_attention_block
        self.feed_forward_block = feed_forward_block
        self.residual_connections = _residuals(2, features, dropout, norm_first, self)

    def forward(self, x: Array, src_mask: Array | None, following: LayerNormalization | None = None) -> Array:
        """``following``: the norm the output goes into next (a stack's, see ResidualConnection.exit)."""
        attention, feed_forward = self.self_attention_block, self.feed_forward_block
        around_attention, around_feed_forward = self.residual_connections
        y = around_attention.enter(x)
        y = attention.forward(y, mask=src_mask)
        y = around_attention.exit_entering(y, around_feed_forward)
        y = feed_forward.forward(y)
        return around_feed_forward.exit(y, following)

    def backward(self, dout: Array, preceding: Dropout | None = None) -> Array:
        """``preceding``: the dropout dx goes through next (a stack's, see enter_backward)."""
        attention, feed_forward = self.self_attention_block, self.feed_forward_block
        around_attention, around_feed_forward = self.residual_connections
        dy = around_feed_forward.exit_backward(dout)
        dy = feed_forward.backward(dy)
        dy = around_feed_forward.enter_backward_exiting(dy, around_attention)
        dy = attention.backward(dy)
        return around_attention.enter_backward(dy, preceding)


class DecoderBlock(Module):
    """Masked self-attention, cross-attention over the encoder output, feed-forward; each residual."""

    def __init__(
        self,
        features: int,
        self_attention_block: AttentionBlock,
        cross_attention_block: AttentionBlock,
        feed_forward_block: FeedForwardBlock,
        dropout: float,
        norm_first: bool = True,
        *,
        dtype: Any = "float32",
        rng: Any = None,
    ) -> None:
        super().__init__(dtype, rng)
        self.self_attention_block = self_attention_block
        self.cross_attention_block = cross_attention_block
        self.feed_forward_block = feed_forward_block
        self.residual_connections = _residuals(3, features, dropout, norm_first, self)

    def forward(
        self,
        x: Array,
        encoder_output: Array,
        src_mask: Array | None,
        tgt_mask: Array | None,
        following: LayerNormalization | None = None,
    ) -> Array:
        """``following``: the norm the output goes into next (a stack's, see ResidualConnection.exit)."""
        attention, cross_attention, feed_forward = (
            self.self_attention_block,
            self.cross_attention_block,
            self.feed_forward_block,
        )
        around_attention, around_cross_attention, around_feed_forward = self.residual_connections
        y = around_attention.enter(x)
        y = attention.forward(y, mask=tgt_mask)
        y = around_attention.exit_entering(y, around_cross_attention)
        y = cross_attention.forward(y, encoder_output, mask=src_mask)
        y = around_cross_attention.exit_entering(y, around_feed_forward)
        y = feed_forward.forward(y)
        return around_feed_forward.exit(y, following)

    def backward(self, dout: Array, preceding: Dropout | None = None) -> tuple[Array, Array]:
        """Returns (dx, d_encoder_output); ``preceding``: the dropout dx goes through next (a stack's,
        see ResidualConnection.enter_backward)."""
        attention, cross_attention, feed_forward = (
            self.self_attention_block,
            self.cross_attention_block,
            self.feed_forward_block,
        )
        around_attention, around_cross_attention, around_feed_forward = self.residual_connections
        dy = around_feed_forward.exit_backward(dout)
        dy = feed_forward.backward(dy)
        dy = around_feed_forward.enter_backward_exiting(dy, around_cross_attention)
        dy, d_encoder_output = cross_attention.backward(dy)
        dy = around_cross_attention.enter_backward_exiting(dy, around_attention)
        dy = attention.backward(dy)
        return around_attention.enter_backward(dy, preceding), d_encoder_output


def _residuals(
    count: int, features: int, dropout: float, norm_first: bool, owner: Module
) -> ModuleList[ResidualConnection]:
    return ModuleList(
        [
            ResidualConnection(features, dropout, norm_first, dtype=owner.dtype, rng=owner.rng)
            for _ in range(count)
        ]
    )


class Encoder(Module):
    """N encoder blocks, then a final layer normalisation (``final_norm=False``: none, as Marian's
    post-norm encoder, whose blocks end in a norm already)."""

    def __init__(
        self,
        features: int,
        layers: ModuleList[EncoderBlock],
        final_norm: bool = True,
        *,
        dtype: Any = "float32",
        rng: Any = None,
    ) -> None:
        super().__init__(dtype, rng)
        self.layers = layers
        self.norm = LayerNormalization(features, dtype=dtype, rng=self.rng) if final_norm else None

    def forward(self, x: Array, mask: Array | None) -> Array:
        for layer, following in zip(self.layers, _norms_after(self.layers, self.norm)):
            x = layer.forward(x, mask, following)
        return x if self.norm is None else self.norm.forward(x)

    def backward(self, dout: Array) -> Array:
        dropouts = _dropouts_before(self.layers)
        dout = dout if self.norm is None else self.norm.backward(dout, dropouts[-1])
        for layer, preceding in reversed(list(zip(self.layers, dropouts))):
            dout = layer.backward(dout, preceding)
        return dout


class Decoder(Module):
    """N decoder blocks, then a final layer normalisation (``final_norm=False``: none, as Marian's)."""

    def __init__(
        self,
        features: int,
        layers: ModuleList[DecoderBlock],
        final_norm: bool = True,
        *,
        dtype: Any = "float32",
        rng: Any = None,
    ) -> None:
        super().__init__(dtype, rng)
        self.layers = layers
        self.norm = LayerNormalization(features, dtype=dtype, rng=self.rng) if final_norm else None

    def forward(
        self, x: Array, encoder_output: Array, src_mask: Array | None, tgt_mask: Array | None
    ) -> Array:
        for layer, following in zip(self.layers, _norms_after(self.layers, self.norm)):
            x = layer.forward(x, encoder_output, src_mask, tgt_mask, following)
        return x if self.norm is None else self.norm.forward(x)

    def backward(self, dout: Array) -> tuple[Array, Array]:
        """Returns (dx, d_encoder_output): every layer's cross-attention adds to the latter."""
        dropouts = _dropouts_before(self.layers)
        dout = dout if self.norm is None else self.norm.backward(dout, dropouts[-1])
        d_encoder_output = None
        for layer, preceding in reversed(list(zip(self.layers, dropouts))):
            dout, d_layer_encoder_output = layer.backward(dout, preceding)
            d_encoder_output = (
                d_layer_encoder_output
                if d_encoder_output is None
                else d_encoder_output + d_layer_encoder_output
            )
        return dout, d_encoder_output


def _norms_after(
    layers: Iterable[EncoderBlock | DecoderBlock], final_norm: LayerNormalization | None
) -> list[LayerNormalization | None]:
    """The norm each block's output goes into next: the next block's first connection's (pre-norm), and
    after the last block the stack's final one."""
    return [layer.residual_connections[0].input_norm for layer in list(layers)[1:]] + [final_norm]


def _dropouts_before(layers: Iterable[EncoderBlock | DecoderBlock]) -> list[Dropout | None]:
    """The dropout each block's input gradient goes through next: none for the first block's, the
    previous block's last connection's (pre-norm) for the others'; and one more, the last block's,
    for the gradient out of the stack's final norm."""
    return [None] + [layer.residual_connections[-1].output_dropout for layer in layers]
