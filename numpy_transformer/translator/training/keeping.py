"""A run's dev evaluations and the checkpoints they keep: each evaluation's score decides
(EvaluationState.judge) what is saved (the checkpoint, best.npz when it is the best), whether the
learning rate is cut on a plateau and whether patience has run out; at the end of the run its last
checkpoints are averaged and best.npz holds the better of the average and the best single one."""

from __future__ import annotations

from typing import Any

from ..corpora import printable
from ..evaluation import format_metrics
from ..run.checkpoint import (
    average_checkpoints,
    load_checkpoint,
    load_meta,
    model_from_checkpoint,
    save_checkpoint,
)
from ..run.directory import RunFiles
from .protocol import Training
from .step import check_weights


class Keeper:
    """Evaluates the ``trainer``'s model on dev and keeps the checkpoints the scores decide, in its run
    directory ``run`` (None: a run that writes nothing), saying so through ``bar``: the trainer's
    EvaluationState and the run's files are what it changes."""

    def __init__(self, trainer: Training, run: RunFiles | None, bar: Any) -> None:
        self.trainer, self.run, self.bar = trainer, run, bar

    def evaluate(self) -> dict[str, Any]:
        """Score the dev pairs and do what the score decides (EvaluationState.judge): save the checkpoint
        (and best.npz when it is the best), cut the learning rate on a plateau, stop when patience runs out.
        Weights that are NaN or infinite are not scored (TrainingDiverged)."""
        trainer, run, bar = self.trainer, self.run, self.bar
        # weights gone NaN or infinite with every gradient finite (an update that overflowed) stop the
        # run here: scored, they would give a dev line of NaN and NumPy's warnings of it first
        check_weights(trainer.model, trainer.step)
        metrics = trainer.dev_metrics(trainer.model, trainer.config.eval_examples)
        record = {"step": trainer.step, "split": "dev", **metrics}
        bar.write(format_metrics(f"step {trainer.step} dev", metrics, trainer.config.label_smoothing))
        for example in metrics.get("examples", []):
            bar.write(
                f"  source     {printable(example['source'])}\n  reference  {printable(example['reference'])}\n"
                f"  model      {printable(example['translation'])}"
            )
        evaluations = trainer.evaluations
        scheduled = trainer.schedule(trainer.step + 1)
        verdict = evaluations.judge(metrics["bleu"], metrics["loss"], trainer.config, scheduled)
        if verdict.cut:  # under MPI the next step's all-reduce gives every rank rank 0's lr_scale
            lr = trainer.learning_rate(trainer.step + 1)
            floor = " (its floor)" if lr == trainer.config.lr_floor else ""
            bar.write(
                f"dev BLEU has not improved for {evaluations.evals_since_best} evaluations: the learning rate "
                f"is cut to {evaluations.lr_scale:g} times the schedule's, {lr:.2e} now{floor}"
            )
        if run:
            run.log(record)
            saved = run.save_evaluated(
                trainer.run_state(), trainer.save, verdict.best, trainer.config.checkpoints_kept
            )
            evaluations.kept = saved.kept
        if verdict.stop:
            where = f", in {run.best_path}" if run else ""
            bar.write(
                f"stopping early: dev BLEU has not improved for {evaluations.evals_since_best} evaluations "
                f"(best {evaluations.best_bleu:.2f}{where})"
            )
            trainer.requests.request("patience")  # under MPI: every rank stops after one step more
        return record

    def average(self, records: list[dict[str, Any]]) -> None:
        """At the end of the run: score on dev the average of its last ``average_last`` evaluation
        checkpoints of its second half (EvaluationState.to_average); best.npz becomes the average when it
        is better than what best.npz holds (the best single checkpoint; EvaluationState.keep_best), and its metadata
        says which it holds (``best``). Then only the last ``keep_checkpoints`` evaluation checkpoints stay
        on disk."""
        trainer, run, bar = self.trainer, self.run, self.bar
        assert run is not None, "a run that writes nothing has no checkpoints to average"
        evaluations = trainer.evaluations
        chosen = evaluations.to_average(trainer.step, trainer.config.average_last, run.directory)
        if trainer.config.averages and len(chosen) >= 2 and run.best_path.is_file():
            paths, steps = [run.directory / name for name in chosen], list(chosen.values())
            arrays, meta = average_checkpoints(paths)
            metrics = trainer.dev_metrics(model_from_checkpoint(paths[-1], arrays, meta))
            best_meta, single, single_loss = (
                load_meta(run.best_path),
                evaluations.best_bleu,
                evaluations.best_loss,
            )
            earlier_average = best_meta.get("best", {}).get("kept") == "average"  # a resumed run's
            held = (
                "the earlier average"
                if earlier_average
                else f"the best single checkpoint (step {best_meta['step']})"
            )
            better = evaluations.keep_best(metrics["bleu"], metrics["loss"])
            choice = {
                "kept": "average" if better else "checkpoint",
                "average": {"steps": steps, "bleu": metrics["bleu"]},
                "checkpoint": {"step": best_meta["step"], "bleu": single},
            }
            smoothing = trainer.config.label_smoothing
            bar.write(
                format_metrics(f"average of steps {', '.join(map(str, steps))} dev", metrics, smoothing)
            )
            if better:
                above = (
                    f"is above that of {held}, {single:.2f}"
                    if metrics["bleu"] > single
                    else f"is that of {held}, at a lower dev loss: {metrics['loss']:.4f} against {single_loss:.4f}"
                )
                bar.write(f"best.npz holds the average: its dev BLEU {metrics['bleu']:.2f} {above}")
                save_checkpoint(
                    run.best_path,
                    arrays,
                    {
                        **meta,
                        "best_bleu": evaluations.best_bleu,
                        "best_loss": evaluations.best_loss,
                        "best": choice,
                    },
                )
            else:
                if metrics["bleu"] != single:
                    why = f"the average scores {metrics['bleu']:.2f}"
                elif single_loss is not None:
                    not_lower = f"{metrics['loss']:.4f} against {single_loss:.4f}"
                    why = f"the average scores the same at a dev loss not lower, {not_lower}"
                else:  # a run saved before checkpoints recorded best.npz's loss: a tie keeps it
                    why = "the average scores the same, and best.npz's dev loss is not recorded to compare"
                bar.write(f"best.npz keeps {held}, dev BLEU {single:.2f}: {why}")
                if not earlier_average:  # which says so already
                    save_checkpoint(
                        run.best_path, load_checkpoint(run.best_path)[0], {**best_meta, "best": choice}
                    )
            record = {
                "step": trainer.step,
                "split": "dev-average",
                "steps": steps,
                "kept": choice["kept"],
                **metrics,
            }
            run.log(record)
            records.append(record)
        evaluations.kept = run.keep_last(
            trainer.run_state(), trainer.save, trainer.config.keep_checkpoints
        ).kept
