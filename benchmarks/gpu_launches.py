"""The kernels a GPU step launches, counted without a GPU: the step run on the CuPy stand-in.

    python benchmarks/gpu_launches.py --config base             # one configuration of bench.py
    python benchmarks/gpu_launches.py --config base --attention mla --fused all

The stand-in (tests/support/cupy_standin.py) counts every kernel CuPy 14 would launch for what the
package calls, the way CuPy launches them (tests/support/cupy_launches.py: a 3-D product on its
batched path, a mean as two kernels, a fused kernel as one), and every device-to-host
synchronisation. For one training step (the Trainer's own: the batch copied to the device and its
masks made, zero grads, the step's dropout generator, forward, label-smoothed loss, backward, the
gradient norm and its clipping, the loss and the norm read, Adam; after a first step that builds what
later ones reuse) and one token of cached greedy decoding (the launches of 32 tokens less those of 16,
over 16), it prints the launches by family and the synchronisations by kind; the last line is
``launches per training step: N, syncs: S``.

``--fused NAMES`` switches fused kernels on (their NumPy twins run on the stand-in, one launch each):
``all``, ``none`` (the default, as a GPU run without the variable) or names joined by commas; it sets
NUMPY_TRANSFORMER_FUSED for the run.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests" / "support")]

import bench  # noqa: E402
import cupy_launches  # noqa: E402
import cupy_standin  # noqa: E402

import numpy_transformer as nt  # noqa: E402
from numpy_transformer import backend, kernels  # noqa: E402
from numpy_transformer.kernels import cuda_fused  # noqa: E402
from numpy_transformer.translator.batches import Batch, batch_of_arrays  # noqa: E402
from numpy_transformer.translator.config import TrainConfig  # noqa: E402
from numpy_transformer.translator.decoding import greedy_decode  # noqa: E402
from numpy_transformer.translator.training import Trainer  # noqa: E402
from numpy_transformer.translator.vocabulary import SpecialIds  # noqa: E402

DECODE_TOKENS = (16, 32)  # a decoding step: the launches of the second less the first, per token
# the Trainer's settings: bench.py's optimiser (Adam, the paper's betas), its label smoothing, the
# default gradient clipping
TRAINING = {"task": "copy", "steps": 2, "lr": 1e-4, "optimizer": "adam", "weight_decay": 0.0}
TRAINING |= {"schedule": "constant", "warmup": 1, "label_smoothing": 0.1, "clip": 1.0}
SMALL = {"width": 4, "vocab": 40, "batch": 8, "length": 8}  # small_shapes: per head width, vocabularies...


def count_launches(name: str, attention: str = "mha", small_shapes: bool = False) -> dict:
    """Launches and synchronisations of one training step and one decoding token of ``name``/``attention``,
    on the stand-in (installed for the call, the previous backend restored after).

    ``small_shapes``: the configuration's structure (layers, heads, attention, dropout, a quarter of the
    batch padded) with every size small (SMALL): the same launches, since CuPy launches per operation
    whatever its size, in a fraction of the time (tests/model/test_launches.py holds the two equal)."""
    previous = backend.get_array_module()
    xp = backend.set_backend(cupy_standin.make_module())
    try:
        config = bench.model_config(name, attention)
        batch, length = bench.CONFIGS[name][6], bench.CONFIGS[name][7]
        if small_shapes:
            d_model = config["h"] * SMALL["width"]
            vocab, batch, length = SMALL["vocab"], SMALL["batch"], SMALL["length"]
            config = {**config, "d_model": d_model, "d_ff": 2 * d_model}
            config.update(src_vocab_size=vocab, tgt_vocab_size=vocab)
        model = nt.build_transformer(**config)
        host = bench.make_data(config, batch, length)
        trainer = Trainer(model, BenchTask(host), TrainConfig(**TRAINING, batch_size=batch))
        trainer.train_step()
        training = _counted(trainer.train_step)
        model.projection_layer.proj.bias.data[bench.EOS] = -1e4  # never stop early: decode every token
        model.eval()
        one = xp.asarray(host[0][:1])
        one_mask = nt.make_src_mask(one, bench.PAD)
        absorbed = attention == "mla"
        decodes = [
            _counted(
                lambda n=n: greedy_decode(model, one, one_mask, n, bench.BOS, bench.EOS, absorbed=absorbed)
            )
            for n in DECODE_TOKENS
        ]
        short, long = decodes
        per_token = {
            "launches": (long["launches"] - short["launches"]) / (DECODE_TOKENS[1] - DECODE_TOKENS[0]),
            "syncs": (long["syncs"] - short["syncs"]) / (DECODE_TOKENS[1] - DECODE_TOKENS[0]),
        }
        return {"config": name, "attention": attention, "training": training, "decoding": per_token}
    finally:
        backend.set_backend(previous)


class BenchTask:
    """What the Trainer asks of its task, for bench.py's batch: the same batch every step, made on the
    host and copied to the device as the toolkit's batches are (batches.batch_of_arrays)."""

    ids = SpecialIds(pad=bench.PAD, bos=bench.BOS, eos=bench.EOS)

    def __init__(self, host: tuple) -> None:
        self.host = host

    def train_batch(self, step: int, batch_size: int, *args: object) -> Batch:
        return batch_of_arrays(*self.host, self.ids)


def _counted(call) -> dict:
    """The launches and synchronisations of ``call``, and the launches after its last synchronisation
    (all of them where it has none): 0 where a step reads the device at its very end."""
    cupy_launches.LAUNCHES.clear()
    cupy_standin.SYNCS.clear()
    cupy_standin.SYNCED_AT.clear()
    call()
    launches = cupy_launches.total()
    return {
        "launches": launches,
        "by_family": dict(cupy_launches.LAUNCHES.most_common()),
        "syncs": sum(cupy_standin.SYNCS.values()),
        "syncs_by_kind": dict(cupy_standin.SYNCS),
        "launches_after_last_sync": launches - (cupy_standin.SYNCED_AT or [0])[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", required=True, choices=sorted(bench.CONFIGS))
    parser.add_argument("--attention", default="mha", choices=["mha", "mla"])
    parser.add_argument(
        "--fused", default=None, help="fused kernels on: all, none or NAME,NAME (default: none)"
    )
    args = parser.parse_args()
    if args.fused is not None:
        os.environ[cuda_fused.ENV_VAR] = args.fused
    # before any work: a bad name would otherwise surface as a traceback in the first step
    try:
        cuda_fused.switched_on()
    except ValueError as refused:
        if args.fused is None:  # the environment's own value
            parser.error(str(refused))
        parser.error(
            f"argument --fused: expected all, none or fused kernel names joined by commas, of "
            f"{', '.join(cuda_fused.KERNELS)}; got {args.fused!r}"
        )
    try:
        backend.environment_choice(kernels.ENV_VAR, kernels.KERNEL_SETS, "fast")
    except ValueError as refused:
        parser.error(str(refused))
    result = count_launches(args.config, args.attention)
    training, decoding = result["training"], result["decoding"]
    print(f"{args.config}/{args.attention}: one training step on the CuPy stand-in")
    for family, launches in training["by_family"].items():
        print(f"  {launches:>6}  {family}")
    print(f"  syncs by kind: {training['syncs_by_kind'] or 'none'}")
    print(f"  launches after the last sync: {training['launches_after_last_sync']}")
    print(
        f"decoding, one token of cached greedy decoding at batch 1: {decoding['launches']:g} launches, "
        f"{decoding['syncs']:g} syncs"
    )
    print(f"launches per training step: {training['launches']}, syncs: {training['syncs']}")


if __name__ == "__main__":
    main()
