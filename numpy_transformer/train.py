"""Training and evaluation of translation models, with checkpoints that resume exactly."""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from .backend import (
    available_memory,
    blas_threads,
    get_array_module,
    resolve_dtype,
    step_rng,
    to_numpy,
    tune_cpu,
)
from .checkpoint import (
    FILENAME,
    CheckpointError,
    load_checkpoint,
    resolve_path,
    save_checkpoint,
    split_prefix,
)
from .data import (
    BOS_ID,
    BPE_VOCAB_SIZE,
    EOS_ID,
    MAX_LENGTH,
    PAD_ID,
    TOKENIZERS,
    BPETokenizer,
    TranslationTask,
    Vocab,
    make_task,
    pad,
)
from .decoding import greedy_decode
from .distributed import Communicator, FlatGradients, weights_checksum
from .kernels import ops
from .model import Transformer, build_transformer, make_src_mask, parameter_count
from .optim import (
    Adam,
    AdamW,
    ConstantSchedule,
    NoamSchedule,
    WarmupCosineSchedule,
    clip_grad_norm,
    global_grad_norm,
)
from .parallel import DataParallel, auto_threads, mask_rows
from .rundir import BEST_NAME, KEPT_PATTERN


class TrainingDiverged(RuntimeError):
    """The loss or a gradient became NaN or infinite."""


@dataclass
class TrainConfig:
    """Everything that decides a run besides the model's own configuration."""

    task: str | None = "numbers-en-fr"
    data: str | None = None
    tokenizer: str | None = None
    steps: int | None = 3000  # None: chosen from the corpus's size (auto_steps)
    batch_size: int = 64
    batch_tokens: int | None = None  # batches of about this many target tokens instead of batch_size pairs
    accumulate: int = 1  # micro-batches whose gradients add up to one optimiser step
    lr: float = 1e-3
    schedule: str = "cosine"
    warmup: int = 200
    factor: float = 1.0
    min_lr: float = 0.0
    optimizer: str = "adam"
    weight_decay: float = 0.0
    clip: float = 1.0
    label_smoothing: float = 0.1
    bucket_steps: int = 20
    eval_every: int = 500
    eval_size: int = 200
    log_every: int = 50
    keep_checkpoints: int = (
        0  # also keep the last N evaluation checkpoints (step-0000500.npz ...) for averaging
    )
    patience: int = 0  # stop when dev BLEU has not improved for this many evaluations (0: never)
    seed: int = 0
    max_length: int = MAX_LENGTH  # a corpus pair with more tokens on a side is left out
    vocab_size: int = BPE_VOCAB_SIZE  # subword units of --tokenizer bpe
    shared_vocab: bool = False  # one vocabulary for source and target
    threads: int = 0  # row shards run at once (parallel.DataParallel); 0: auto_threads decides per batch

    def __post_init__(self) -> None:
        if self.data is not None:  # a run is resumed, evaluated and plotted from any working directory
            self.data = str(Path(self.data).resolve())
        for name in ("keep_checkpoints", "patience"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name.replace('_', '-')} must be an integer >= 0, got {value!r}")
        optional = [name for name in ("steps", "batch_tokens") if getattr(self, name) is not None]
        for name in (
            "batch_size",
            "eval_every",
            "log_every",
            "eval_size",
            "max_length",
            "accumulate",
            *optional,
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, int) or self.vocab_size < 256:
            raise ValueError(
                f"vocab-size must be an integer >= 256 (the byte units and their merges), got {self.vocab_size!r}"
            )
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a positive number, got {self.lr!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {sorted(SCHEDULES)}, got {self.schedule!r}")
        if self.optimizer not in ("adam", "adamw"):
            raise ValueError(f"optimizer must be 'adam' or 'adamw', got {self.optimizer!r}")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 0:
            raise ValueError(f"threads must be an integer >= 0 (0: automatic), got {self.threads!r}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label-smoothing must be in [0, 1), got {self.label_smoothing!r}")


AUTO_EPOCHS = 10  # passes over a corpus that auto_steps aims for
AUTO_STEPS = (
    1000,
    4000,
)  # its fewest and most steps: 4000 default steps take about 10 minutes on 2 cores (README)


def auto_steps(task: TranslationTask, config: TrainConfig) -> int:
    """Steps for about AUTO_EPOCHS passes over a corpus's training pairs, within AUTO_STEPS; a
    generated task (no fixed set of pairs) gets TrainConfig's default."""
    pairs = getattr(task, "train_pairs", None)
    if pairs is None:
        return TrainConfig.steps
    per_batch = (
        config.batch_size if config.batch_tokens is None else task.pairs_per_batch(config.batch_tokens)
    )
    return min(
        max(round(AUTO_EPOCHS * len(pairs) / (per_batch * config.accumulate)), AUTO_STEPS[0]), AUTO_STEPS[1]
    )


SCHEDULES = {
    "constant": lambda c, d_model: ConstantSchedule(c.lr),
    "noam": lambda c, d_model: NoamSchedule(d_model, c.warmup, c.factor),
    "cosine": lambda c, d_model: WarmupCosineSchedule(c.lr, c.warmup, c.steps, c.min_lr),
}


def masked_token_accuracy(logits: Any, targets: Any) -> tuple[int, int]:
    """(correct, counted) argmax predictions over non-pad targets."""
    valid = targets != PAD_ID
    return int(((logits.argmax(axis=-1) == targets) & valid).sum()), int(valid.sum())


class Trainer:
    """Owns a model, its task, optimiser and schedule; trains, evaluates, saves and resumes.

    With a Communicator (``comm``, an MPI run of several ranks: numpy_transformer.distributed)
    every rank trains its slice of each global batch and the gradients are summed across ranks;
    rank 0 alone logs, evaluates and saves.
    """

    def __init__(
        self,
        model: Transformer,
        task: TranslationTask,
        config: TrainConfig,
        step: int = 0,
        comm: Communicator | None = None,
    ) -> None:
        self.model, self.task, self.config, self.step, self.comm = model, task, config, step, comm
        if comm is not None and config.batch_size < comm.size:
            raise ValueError(
                f"batch-size {config.batch_size} is smaller than the {comm.size} ranks: each needs a row"
            )
        if (
            comm is not None and config.accumulate > 1
        ):  # each micro-batch would be all-reduced on top of the last
            raise ValueError(
                f"accumulate {config.accumulate} is not supported on {comm.size} MPI ranks: the ranks already "
                "add their batches' gradients; use a larger --batch-size or more ranks"
            )
        tune_cpu()  # the process-wide allocator setting a training loop wants (see backend.tune_cpu)
        self.cores = comm.cores_per_rank() if comm else None  # None: every core of the machine
        cores = os.cpu_count() or 1
        if config.threads > cores:  # a replica of the model per thread, for no speed: refused before any work
            raise ValueError(f"threads {config.threads} exceeds this machine's {cores} cores")
        if config.optimizer == "adamw":
            self.optimizer: Adam = AdamW(
                model, lr=config.lr, weight_decay=config.weight_decay, threads=self.cores
            )
        else:
            self.optimizer = Adam(model, lr=config.lr, threads=self.cores)
        self.schedule = SCHEDULES[config.schedule](config, model.config["d_model"])
        self._stop_requested = False  # Ctrl-C here
        self._stopping = False  # Ctrl-C here, or on any rank: the loop ends after this step
        self._parallel: dict[int, DataParallel] = {}
        self.best_bleu = -1.0  # the best dev BLEU of this run so far (its checkpoint: best.npz)
        self.evals_since_best = 0  # evaluations since it, for config.patience
        self._stopped_early = False
        self._flat = (
            FlatGradients(model.parameters(), extras=2) if comm else None
        )  # + weighted loss, stop flag

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def create(
        cls, config: TrainConfig, model_args: dict[str, Any], comm: Communicator | None = None
    ) -> Trainer:
        task = make_task(
            config.task,
            config.data,
            config.seed,
            config.tokenizer,
            config.max_length,
            **({"vocab_size": config.vocab_size, "shared_vocab": config.shared_vocab} if config.data else {}),
        )
        if config.steps is None:
            config = replace(config, steps=auto_steps(task, config))
        src_len, tgt_len = task.max_lengths(task.dev + task.test + task.length_pairs(config.seed))
        model_args = {
            "src_seq_len": 2 * src_len + 8,
            "tgt_seq_len": 2 * tgt_len + 8,
            "shared_vocab": task.src_vocab is task.tgt_vocab,
            **model_args,
        }
        sizes = {"src_vocab_size": len(task.src_vocab), "tgt_vocab_size": len(task.tgt_vocab), **model_args}
        rows = (
            config.batch_size if config.batch_tokens is None else -(-config.batch_tokens // tgt_len)
        )  # the longest batch
        check_memory(sizes, rows, src_len, tgt_len, config.threads or 1)
        model = build_transformer(len(task.src_vocab), len(task.tgt_vocab), seed=config.seed, **model_args)
        return cls(model, task, config, comm=comm)

    @classmethod
    def resume(
        cls,
        path: str | Path,
        steps: int | None = None,
        comm: Communicator | None = None,
        threads: int | None = None,
    ) -> Trainer:
        """Restore model, optimiser, step and random state; the task is rebuilt from its recipe.

        ``steps`` may raise the run's total number of steps and ``threads`` change its row shards;
        everything else is as saved. A run
        saved by K ranks resumes on K ranks only (its batches' slices and dropout masks depend on K).
        """
        arrays, meta = load_checkpoint(path)
        saved_ranks, ranks = int(meta.get("ranks", 1)), comm.size if comm else 1
        if saved_ranks != ranks:
            raise ValueError(
                f"checkpoint {resolve_path(path)} was trained on {saved_ranks} rank(s) and this run has {ranks}: "
                f"resume it with mpiexec -n {saved_ranks}"
                + ("" if saved_ranks > 1 else " or without mpiexec")
            )
        changed = {
            **({"steps": steps} if steps else {}),
            **({"threads": threads} if threads is not None else {}),
        }
        config = TrainConfig(**{**meta["train"], **changed})
        model, task = restore_model_and_task(path, arrays, meta)
        trainer = cls(model, task, config, step=int(meta["step"]), comm=comm)
        trainer.best_bleu = float(meta.get("best_bleu", -1.0))
        trainer.evals_since_best = int(meta.get("evals_since_best", 0))
        try:
            trainer.optimizer.load_state_dict({**split_prefix(arrays, "optim"), **meta["optimizer"]})
        except (ValueError, KeyError) as error:
            raise CheckpointError(
                f"checkpoint {resolve_path(path)}: optimizer state does not fit ({error})"
            ) from error
        return trainer

    # -- one step ---------------------------------------------------------------------------

    def train_step(self) -> dict[str, float]:
        """One optimiser step on the batch of the current step; returns loss, lr, grad norm, tokens.

        With ``accumulate`` K the step's batch is K micro-batches, one after another; each one's
        gradient is weighted by its share of the step's target tokens, so their sum is the gradient
        of the mean loss over all of them, as one K-times larger batch would give.
        """
        config, model = self.config, self.model
        batches = [
            self.task.train_batch(
                self.step * config.accumulate + k, config.batch_size, config.bucket_steps, config.batch_tokens
            )
            for k in range(config.accumulate)
        ]
        tokens = sum(batch.n_tokens for batch in batches)
        model.train()
        self.optimizer.zero_grad()
        if self.comm is None:
            loss = 0.0
            for k, batch in enumerate(batches):
                model.set_rng(step_rng(config.seed, self.step, k))
                share = batch.n_tokens / max(tokens, 1)
                loss += share * self._loss_and_backward(batch, slice(None), share)
        else:
            model.set_rng(step_rng(config.seed, self.step, self.comm.rank))
            loss = self._distributed_loss_and_backward(batches[0])
        grad_norm = clip_grad_norm(model, config.clip) if config.clip > 0 else global_grad_norm(model)
        self._check_finite(loss, grad_norm)
        lr = self.schedule(self.step + 1)
        self.optimizer.step(lr)
        self.step += 1
        return {"loss": loss, "lr": lr, "grad_norm": grad_norm, "tokens": tokens}

    def _loss_and_backward(self, batch: Any, rows: slice, weight: float) -> float:
        """Forward and backward of ``rows`` of the batch, its gradient scaled by ``weight``; the rows' mean loss."""
        config, model = self.config, self.model
        src, tgt_in, labels = batch.src[rows], batch.tgt_in[rows], batch.tgt_out[rows]
        shards = config.threads or auto_threads(
            model, src.shape[0], max(src.shape[1], tgt_in.shape[1]), self.cores
        )
        if shards not in self._parallel:
            self._parallel[shards] = DataParallel(model, shards)
        size = batch.src.shape[0]
        return self._parallel[shards].loss_and_backward(
            src,
            tgt_in,
            mask_rows(batch.src_mask, rows, size),
            mask_rows(batch.tgt_mask, rows, size),
            labels,
            PAD_ID,
            config.label_smoothing,
            weight,
        )

    def _distributed_loss_and_backward(self, batch: Any) -> float:
        """This rank's rows with the weight n_k / N, then one all-reduce of the gradients, the loss
        and the stop flags: every rank leaves with the whole batch's gradient and mean loss."""
        comm, flat = self.comm, self._flat
        rows = comm.rows(batch.src.shape[0])
        total, mine = int((batch.tgt_out != PAD_ID).sum()), int((batch.tgt_out[rows] != PAD_ID).sum())
        loss = 0.0
        with blas_threads(self.cores):
            if (
                mine or not total
            ):  # a rank whose rows hold no target token adds nothing (no tokens at all: an error)
                loss = self._loss_and_backward(batch, rows, mine / max(total, 1))
            comm.allreduce_sum(flat.pack([loss * mine / max(total, 1), float(self._stop_requested)]))
        loss, stops = flat.unpack()
        self._stopping = stops > 0
        return loss

    def _check_finite(self, loss: float, grad_norm: float) -> None:
        """Stop before the update if the loss or any gradient is NaN/inf, naming the first bad parameter."""
        if math.isfinite(loss) and math.isfinite(grad_norm):
            return
        xp = get_array_module()
        for name, parameter in self.model.named_parameters():
            if not bool(xp.isfinite(parameter.grad).all()):
                raise TrainingDiverged(
                    f"step {self.step + 1}: the gradient of {name} is NaN or infinite (loss {loss})"
                )
        if not math.isfinite(loss):
            raise TrainingDiverged(f"step {self.step + 1}: the loss is {loss}")

    # -- the loop ---------------------------------------------------------------------------

    def fit(self, out_dir: str | Path | None = None, progress: bool = True) -> list[dict[str, Any]]:
        """Train until ``config.steps``; log, evaluate and checkpoint along the way.

        Ctrl-C finishes the current step, saves, and returns. A NaN/inf raises TrainingDiverged
        and leaves the last good checkpoint in place. Under MPI only rank 0 writes, shows progress
        and evaluates; every rank compares its weights' checksum with the others' at each log step.
        """
        root = self.comm is None or self.comm.rank == 0
        out = Path(out_dir) if out_dir and root else None
        if out:
            out.mkdir(parents=True, exist_ok=True)
        log_file = (out / "log.jsonl").open("a") if out else None
        records: list[dict[str, Any]] = []
        bar = _progress(self.config.steps, self.step, progress and root)
        previous_handler = signal.signal(signal.SIGINT, self._request_stop)
        window_tokens, window_start, started = 0, time.perf_counter(), time.perf_counter()
        try:
            while self.step < self.config.steps and not self._stopping:
                stats = self.train_step()
                window_tokens += stats["tokens"]
                bar.update(1)
                if self.step % self.config.log_every == 0 or self.step == self.config.steps:
                    now = time.perf_counter()
                    record = {
                        "step": self.step,
                        "loss": stats["loss"],
                        "lr": stats["lr"],
                        "grad_norm": stats["grad_norm"],
                        "tokens_per_s": window_tokens / max(now - window_start, 1e-9),
                        "elapsed_s": now - started,
                    }
                    window_tokens, window_start = 0, now
                    bar.set_postfix(
                        loss=f"{stats['loss']:.3f}",
                        lr=f"{stats['lr']:.2e}",
                        tok_s=f"{record['tokens_per_s']:.0f}",
                    )
                    self._log(record, records, log_file)
                    if self.comm is not None:
                        self.comm.check_same(weights_checksum(self.model.parameters()), "weights")
                if root and (self.step % self.config.eval_every == 0 or self.step == self.config.steps):
                    metrics = self.evaluate(self.task.dev[: self.config.eval_size])
                    self._log({"step": self.step, "split": "dev", **metrics}, records, log_file)
                    bar.write(_format_metrics(f"step {self.step} dev", metrics))
                    improved = metrics["bleu"] > self.best_bleu
                    self.best_bleu = max(self.best_bleu, metrics["bleu"])
                    self.evals_since_best = 0 if improved else self.evals_since_best + 1
                    if out:
                        self._save_evaluated(out, improved)
                    if self.config.patience and self.evals_since_best >= self.config.patience:
                        bar.write(
                            f"stopping early: dev BLEU has not improved for {self.evals_since_best} evaluations "
                            f"(best {self.best_bleu:.2f}{', in ' + str(out / BEST_NAME) if out else ''})"
                        )
                        self._stop_requested = self._stopped_early = (
                            True  # under MPI every rank stops after one step more
                        )
                        self._stopping = self.comm is None
            if self._stopping and out:
                self.save(out)
                if not self._stopped_early:
                    bar.write(f"interrupted: saved step {self.step} to {out / 'model.npz'}")
        finally:
            signal.signal(signal.SIGINT, previous_handler)
            bar.close()
            if log_file:
                log_file.close()
        return records

    def _save_evaluated(self, out: Path, improved: bool) -> None:
        """The last checkpoint; the best by dev BLEU beside it; the last keep_checkpoints ones by step."""
        self.save(out)
        if improved:
            self.save(out / BEST_NAME)
        if self.config.keep_checkpoints:
            self.save(out / f"step-{self.step:07d}.npz")
            for old in sorted(out.glob(KEPT_PATTERN))[: -self.config.keep_checkpoints]:
                old.unlink()

    def _request_stop(self, signum: int, frame: Any) -> None:
        if self._stop_requested:  # a second Ctrl-C stops at once
            raise KeyboardInterrupt
        self._stop_requested = True
        print(
            "\nstopping after this step, then saving (Ctrl-C again: stop at once without saving)",
            file=sys.stderr,
            flush=True,
        )
        if self.comm is None:  # under MPI the ranks agree on stopping in the step's all-reduce
            self._stopping = True

    @staticmethod
    def _log(record: dict[str, Any], records: list, log_file: Any) -> None:
        records.append(record)
        if log_file:
            log_file.write(json.dumps(record) + "\n")
            log_file.flush()

    # -- evaluation ---------------------------------------------------------------------------

    def evaluate(self, pairs: Sequence[tuple[str, str]], batch_size: int = 100) -> dict[str, float]:
        return evaluate(self.model, self.task, pairs, self.config.label_smoothing, batch_size)

    # -- checkpoints --------------------------------------------------------------------------

    def save(self, out: str | Path) -> Path:
        """Write the checkpoint atomically; weights that are NaN or infinite are never written (TrainingDiverged)."""
        model, task = self.model, self.task
        xp = get_array_module()
        if not bool(xp.isfinite(model.flat.data).all()):  # one transfer; then the names, only if needed
            bad = next(name for name, p in model.named_parameters() if not bool(xp.isfinite(p.data).all()))
            raise TrainingDiverged(f"step {self.step}: the weights of {bad} are NaN or infinite; not saved")
        arrays = {f"param/{name}": value for name, value in model.state_dict().items()}
        optimizer_state = self.optimizer.state_dict()
        arrays.update({f"optim/{k}": v for k, v in optimizer_state.items() if k.startswith(("m.", "v."))})
        meta = {
            "model": model.config,
            "step": self.step,
            "train": asdict(self.config),
            "optimizer": {k: v for k, v in optimizer_state.items() if not k.startswith(("m.", "v."))},
            "task": task_recipe(task, self.config),
            "ranks": self.comm.size if self.comm else 1,
            "best_bleu": self.best_bleu,
            "evals_since_best": self.evals_since_best,
            "src_vocab": task.src_vocab.itos,
            "tgt_vocab": task.tgt_vocab.itos,
        }
        out = Path(out)
        return save_checkpoint(out if out.suffix == ".npz" else out / FILENAME, arrays, meta)


def training_memory(
    config: dict[str, Any], batch_size: int, src_len: int, tgt_len: int, threads: int = 1
) -> int:
    """About the bytes one training step holds, estimated from the sizes before anything is built.

    Weights, gradients and Adam's two moments (4 copies of every parameter), a gradient per extra
    thread's replica, and the forward caches of a batch of the longest pairs: per layer and token
    the projections, attention's probabilities (with dropout) over every key, the feed-forward
    hidden layer (with ReLU and dropout), and the logits with their softmax and gradient.
    """
    d, d_ff, n, heads = config["d_model"], config["d_ff"], config["N"], config.get("h", 8)
    itemsize = get_array_module().dtype(resolve_dtype(config.get("dtype", "float32"))).itemsize
    weights = parameter_count(config) * (4 + 2 * (threads - 1))
    encoder_token = n * (10 * d + 3 * d_ff + 3 * heads * src_len) + 2 * d
    decoder_token = (
        n * (19 * d + 3 * d_ff + 3 * heads * (tgt_len + src_len)) + 2 * d + 3 * config["tgt_vocab_size"]
    )
    return itemsize * (weights + batch_size * (src_len * encoder_token + tgt_len * decoder_token))


def check_memory(
    config: dict[str, Any], batch_size: int, src_len: int, tgt_len: int, threads: int = 1
) -> None:
    """Refuse, before anything is built, a run whose training_memory exceeds the memory available."""
    needed, available = training_memory(config, batch_size, src_len, tgt_len, threads), available_memory()
    if available is not None and needed > available:
        raise ValueError(
            f"a training step of this model needs about {needed / 2**30:.1f} GiB (d_model {config['d_model']}, "
            f"N {config['N']}, d_ff {config['d_ff']}, batch_size {batch_size}, pairs of up to {src_len} source and "
            f"{tgt_len} target tokens, {threads} thread(s)), but only {available / 2**30:.1f} GiB is available: "
            "use a smaller --batch-size or model, or fewer --threads"
        )


def task_recipe(task: TranslationTask, config: TrainConfig) -> dict[str, Any]:
    """How to rebuild the task: a generated task by name, a corpus by its absolute path and content hash."""
    recipe = {
        "task": config.task if config.data is None else None,
        "data": None,
        "seed": config.seed,
        "tokenizer": task.tokenizer.name,
    }
    if config.data is not None:
        path = Path(config.data).resolve()
        recipe.update(
            data=str(path),
            data_sha256=file_sha256(path),
            max_length=config.max_length,
            vocab_size=config.vocab_size,
            shared_vocab=config.shared_vocab,
        )
    if isinstance(task.tokenizer, BPETokenizer):  # the learned subwords themselves, as the library's JSON
        recipe["tokenizer_json"] = task.tokenizer.serialized
    return recipe


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


META_FIELDS = {
    "model": dict,
    "step": int,
    "train": dict,
    "optimizer": dict,
    "task": dict,
    "src_vocab": list,
    "tgt_vocab": list,
}


def check_meta(path: str | Path, meta: dict) -> None:
    """Raise a CheckpointError naming the file and the field when the metadata is not what a run saves."""
    for field, kind in META_FIELDS.items():
        if not isinstance(meta.get(field), kind) or isinstance(meta.get(field), bool):
            raise CheckpointError(
                f"checkpoint {resolve_path(path)}: its metadata field {field!r} is missing or not a "
                f"{kind.__name__} (got {type(meta.get(field)).__name__})"
            )
    for side in ("src", "tgt"):
        vocab, size = meta[f"{side}_vocab"], meta["model"].get(f"{side}_vocab_size")
        if len(vocab) != size or not all(isinstance(token, str) for token in vocab):
            raise CheckpointError(
                f"checkpoint {resolve_path(path)}: its {side}_vocab holds {len(vocab)} entries, but the "
                f"model's {side}_vocab_size is {size!r}"
            )


def model_from_checkpoint(path: str | Path, arrays: dict, meta: dict) -> Transformer:
    """The saved model: built from its configuration, its weights loaded, checked by name and shape."""
    check_meta(path, meta)
    try:
        model = build_transformer(**meta["model"], seed=0)
        model.load_state_dict(split_prefix(arrays, "param"))
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(
            f"checkpoint {resolve_path(path)}: the weights do not fit its model configuration ({error})"
        ) from error
    return model


def task_from_recipe(recipe: dict[str, Any]) -> TranslationTask:
    """Rebuild the task a checkpoint was trained on (generated tasks regenerate; files are re-read).

    A corpus must be the very file the run trained on: a file changed since, or another file at
    that path, is refused by name rather than scored or trained on.
    """
    expected = recipe.get("data_sha256")
    if recipe["data"] is not None and expected is not None:
        path = Path(recipe["data"])
        if not path.is_file():
            raise ValueError(f"the run trained on {path}, which no longer exists")
        if file_sha256(path) != expected:
            raise ValueError(
                f"the run trained on {path}, but that file has changed since (its sha256 differs)"
            )
    vocabulary = {key: recipe[key] for key in ("vocab_size", "shared_vocab") if key in recipe}
    if "tokenizer_json" in recipe:
        vocabulary["serialized_tokenizer"] = recipe["tokenizer_json"]
    return make_task(
        recipe["task"],
        recipe["data"],
        recipe["seed"],
        recipe["tokenizer"],
        recipe.get("max_length", MAX_LENGTH),
        **vocabulary,
    )


def restore_model_and_task(path: str | Path, arrays: dict, meta: dict) -> tuple[Transformer, TranslationTask]:
    """Rebuild the model and the task, with the saved vocabularies (dropout needs no saved state: see step_rng)."""
    model = model_from_checkpoint(path, arrays, meta)
    task = task_from_recipe(meta["task"])
    if task.src_vocab.itos != meta["src_vocab"] or task.tgt_vocab.itos != meta["tgt_vocab"]:
        task.src_vocab, task.tgt_vocab = (
            Vocab.from_list(meta["src_vocab"]),
            Vocab.from_list(meta["tgt_vocab"]),
        )
    return model, task


def average_checkpoints(paths: Sequence[str | Path]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(arrays, meta) of a checkpoint whose weights are the mean of the given checkpoints' (run
    directories or .npz files), as the paper averages its last checkpoints. They must hold one model
    configuration, tokenizer and vocabularies; the optimiser state and metadata are the last one's,
    with ``averaged_from`` naming them all. The mean is taken in float64."""
    if not paths:
        raise ValueError("average needs at least one checkpoint")
    loaded = [(resolve_path(path), *load_checkpoint(path)) for path in paths]
    first_path, _, first_meta = loaded[0]
    for path, _, meta in loaded:
        check_meta(path, meta)
        for field in ("model", "src_vocab", "tgt_vocab"):
            if meta[field] != first_meta[field]:
                raise ValueError(
                    f"checkpoint {path} has another {field} than {first_path}: only checkpoints of one "
                    "model can be averaged"
                )
        if meta["task"].get("tokenizer_json") != first_meta["task"].get("tokenizer_json"):
            raise ValueError(f"checkpoint {path} has another tokenizer than {first_path}")
    _, arrays, meta = loaded[-1]
    arrays = dict(arrays)
    for name in [name for name in arrays if name.startswith("param/")]:
        total = sum(checkpoint[name].astype("float64") for _, checkpoint, _ in loaded)  # host arrays
        arrays[name] = (total / len(loaded)).astype(arrays[name].dtype)
    return arrays, {**meta, "averaged_from": [str(path) for path, _, _ in loaded]}


def load_for_inference(path: str | Path) -> tuple[Transformer, Any, Vocab, Vocab]:
    """(model in eval mode, tokenizer, source vocab, target vocab) without rebuilding the task."""
    arrays, meta = load_checkpoint(path)
    model = model_from_checkpoint(path, arrays, meta)
    try:
        recipe = meta["task"]
        tokenizer = (
            BPETokenizer(recipe["tokenizer_json"])
            if recipe["tokenizer"] == BPETokenizer.name
            else TOKENIZERS[recipe["tokenizer"]]()
        )
        src_vocab, tgt_vocab = Vocab.from_list(meta["src_vocab"]), Vocab.from_list(meta["tgt_vocab"])
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(
            f"checkpoint {resolve_path(path)}: its tokenizer or vocabularies are unusable ({error})"
        ) from error
    return model.eval(), tokenizer, src_vocab, tgt_vocab


def translate_ids(
    model: Transformer, src_ids: Sequence[Sequence[int]], max_len: int | None = None, **decode_options: Any
) -> list[list[int]]:
    """Greedy (or any strategy's) translation of id sequences, batched."""
    src = pad(src_ids)
    max_len = max_len or model.tgt_pos.seq_len
    strategy = decode_options.pop("strategy", greedy_decode)
    out = strategy(model, src, make_src_mask(src, PAD_ID), max_len, BOS_ID, EOS_ID, **decode_options)
    return [list(map(int, row)) for row in to_numpy(out)]


def evaluate(
    model: Transformer,
    task: TranslationTask,
    pairs: Sequence[tuple[str, str]],
    label_smoothing: float = 0.0,
    batch_size: int = 100,
    **decode_options: Any,
) -> dict[str, float]:
    """Teacher-forced loss and token accuracy; exact match, BLEU and chrF of the translations.

    The translations are greedy unless ``decode_options`` say otherwise, as translate_ids takes
    them (``strategy=beam_search, beam_width=4, length_penalty=0.6``, ``no_repeat_ngram``...).
    """
    import sacrebleu

    strategy = decode_options.pop("strategy", greedy_decode)
    loss_sum, correct, counted, hypotheses = 0.0, 0, 0, []
    with model.evaluating():
        for start in range(0, len(pairs), batch_size):
            batch = task.batch(pairs[start : start + batch_size])
            logits = model.forward(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
            loss, _ = ops.cross_entropy_forward(logits, batch.tgt_out, PAD_ID, label_smoothing)
            right, seen = masked_token_accuracy(logits, batch.tgt_out)
            loss_sum, correct, counted = loss_sum + loss * seen, correct + right, counted + seen
            max_len = min(model.tgt_pos.seq_len, int(batch.tgt_out.shape[1]) * 2 + 4)
            translated = strategy(model, batch.src, batch.src_mask, max_len, BOS_ID, EOS_ID, **decode_options)
            for ids in to_numpy(translated):
                hypotheses.append(task.tokenizer.detokenize(task.tgt_vocab.decode(ids)))
    references = [target for _, target in pairs]
    bleu_tokenize = (
        "char" if task.tokenizer.name == "char" else "13a"
    )  # a char task has no spaces to split words on
    return {
        "loss": loss_sum / max(counted, 1),
        "token_accuracy": correct / max(counted, 1),
        "exact_match": sum(h == r for h, r in zip(hypotheses, references)) / max(len(pairs), 1),
        "bleu": sacrebleu.corpus_bleu(hypotheses, [references], tokenize=bleu_tokenize).score,
        "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
        "n": len(pairs),
    }


def _format_metrics(title: str, metrics: dict[str, float]) -> str:
    return (
        f"{title}: loss {metrics['loss']:.4f}  token acc {metrics['token_accuracy']:.4f}  "
        f"exact {metrics['exact_match']:.4f}  BLEU {metrics['bleu']:.2f}  chrF {metrics['chrf']:.2f}  (n={metrics['n']})"
    )


class _NoBar:
    def update(self, n: int) -> None: ...
    def set_postfix(self, **kwargs: Any) -> None: ...
    def write(self, text: str) -> None:
        print(text, flush=True)

    def close(self) -> None: ...


def _progress(total: int, initial: int, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        print(
            "tqdm is not installed (pip install 'numpy_transformer[train]'): training without a progress bar"
        )
        return _NoBar()
    return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)
