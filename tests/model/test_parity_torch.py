"""Parity with PyTorch autograd: same architecture, same weights, same numbers.

Skipped with a reason where PyTorch is not installed (.ci/run installs torch==2.13.0, the CPU
wheel on disk on these machines).
"""

import sys

import numpy as np
import pytest

import numpy_transformer as nt
from numpy_transformer.kernels import ops
from numpy_transformer.optim import Adam

torch = pytest.importorskip("torch", reason="PyTorch is an optional oracle: pip install torch==2.13.0")
from numpy_transformer.pytorch import (  # noqa: E402  (only once torch is there)
    build_torch_transformer,
    from_torch_model,
    to_torch_model,
    to_torch_state_dict,
)

RELATIVE = 1e-9
pytestmark = pytest.mark.usefixtures("kernels")  # every test on the fast kernels and on the textbook


def relative_error(ours, theirs):
    theirs = theirs.detach().numpy() if hasattr(theirs, "detach") else np.asarray(theirs)
    return float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-300))


def batch(seed=0):
    rng = np.random.default_rng(seed)
    src, tgt, labels = rng.integers(1, 11, (3, 7)), rng.integers(1, 13, (3, 6)), rng.integers(1, 13, (3, 6))
    src[0, 4:] = 0
    tgt[1, 3:] = 0
    labels[1, 3:] = 0
    return src, tgt, labels


def run_both(kind, norm_first, dtype="float64", tie=None):
    """``tie``: None, "target" (target embedding and projection) or "shared" (all three, one vocabulary)."""
    model = nt.build_transformer(
        13 if tie == "shared" else 11,
        13,
        7,
        6,
        d_model=8,
        N=2,
        h=2,
        d_ff=12,
        dropout=0.0,
        attention=kind,
        norm_first=norm_first,
        dtype=dtype,
        seed=3,
        tie_embeddings=tie is not None,
        shared_vocab=tie == "shared",
    )
    reference = to_torch_model(model)
    src, tgt, labels = batch()
    src_mask, tgt_mask = nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0)

    # ours, recording the gradient that reaches each embedding's output
    embedding_grads = {}
    for name in ("src_embed", "tgt_embed"):
        module = getattr(model, name)
        original = module.backward
        module.backward = lambda d, original=original, name=name: (
            embedding_grads.__setitem__(name, d.copy()),
            original(d),
        )[1]
    logits = model.forward(src, tgt, src_mask, tgt_mask)
    loss, cache = ops.cross_entropy_forward(logits, labels, pad_id=0, label_smoothing=0.1)
    model.zero_grad()
    model.backward(ops.cross_entropy_backward(1.0, cache))

    # PyTorch autograd
    torch_embedding_outputs = {}

    def keep_output(name):
        def hook(module, args, out):  # returns None: the output itself is left alone
            out.retain_grad()
            torch_embedding_outputs[name] = out

        return hook

    for name in ("src_embed", "tgt_embed"):
        getattr(reference, name).register_forward_hook(keep_output(name))
    torch_logits = reference(*(torch.from_numpy(a) for a in (src, tgt, src_mask, tgt_mask)))
    torch_loss = torch.nn.functional.cross_entropy(
        torch_logits.reshape(-1, 13),
        torch.from_numpy(labels).reshape(-1),
        ignore_index=0,
        label_smoothing=0.1,
    )
    torch_loss.backward()
    return (
        model,
        reference,
        (logits, loss, embedding_grads),
        (torch_logits, torch_loss, torch_embedding_outputs),
    )


@pytest.mark.parametrize(
    "kind, norm_first, tie",
    [
        ("mha", True, None),
        ("mha", False, None),
        ("mla", True, None),
        ("mla", False, None),
        ("mha", True, "target"),
        ("mla", False, "shared"),  # a tied matrix's gradient sums its uses'
    ],
)
def test_float64_logits_loss_and_every_gradient(kind, norm_first, tie):
    model, reference, ours, theirs = run_both(kind, norm_first, tie=tie)
    logits, loss, embedding_grads = ours
    torch_logits, torch_loss, torch_embeddings = theirs
    assert relative_error(logits, torch_logits) <= RELATIVE
    assert abs(loss - torch_loss.item()) <= RELATIVE * abs(torch_loss.item())
    torch_params = dict(reference.named_parameters())
    assert set(torch_params) == {name for name, _ in model.named_parameters()}
    for name, parameter in model.named_parameters():
        assert relative_error(parameter.grad, torch_params[name].grad) <= RELATIVE, name
    for name in ("src_embed", "tgt_embed"):
        assert relative_error(embedding_grads[name], torch_embeddings[name].grad) <= RELATIVE, name

    # one Adam step with the paper's settings, on both sides
    Adam(model, lr=1e-3, betas=(0.9, 0.98), eps=1e-9).step()
    torch.optim.Adam(reference.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9).step()
    for name, parameter in model.named_parameters():
        assert relative_error(parameter.data, torch_params[name]) <= RELATIVE, name


def test_float32_within_first_principles_tolerance():
    """Both sides round every operation to float32 (unit roundoff u = 2^-24 = 6e-8). A logit here
    passes through about 40 dependent operations (2 + 2 layers of attention, feed-forward and norm,
    each a few dot products of length <= 12, whose rounding grows like sqrt(12) u), so the two
    computations may differ by about 40 * sqrt(12) * u = 8e-6 relative; we allow 1e-4 for logits
    and loss. Gradients go through the same operations twice (and divisions by layer-norm standard
    deviations), so 1e-3 relative to the largest entry of each gradient."""
    model, reference, ours, theirs = run_both("mha", True, dtype="float32")
    assert relative_error(ours[0], theirs[0]) <= 1e-4
    assert abs(ours[1] - theirs[1].item()) <= 1e-4 * abs(theirs[1].item())
    torch_params = dict(reference.named_parameters())
    for name, parameter in model.named_parameters():
        assert relative_error(parameter.grad, torch_params[name].grad) <= 1e-3, name


def test_weights_round_trip_through_pytorch():
    model = nt.build_transformer(11, 13, 7, 6, d_model=8, N=1, h=2, d_ff=12, attention="mla", seed=1)
    state = to_torch_state_dict(model)
    assert state["projection_layer.proj.weight"].shape == (13, 8)  # Linear weights are (out, in)
    reference = build_torch_transformer(model.config)
    reference.load_state_dict(state)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.mul_(2.0)
    from_torch_model(reference, model)
    np.testing.assert_array_equal(model.state_dict()["encoder.norm.gamma"], 2.0)


def test_clear_error_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    model = nt.build_transformer(11, 13, 7, 6, d_model=8, N=1, h=2, d_ff=12)
    with pytest.raises(RuntimeError, match=r"pip install torch==2.13.0"):
        to_torch_state_dict(model)
