"""A trained run's test split translated by numpy_transformer and by CTranslate2 (float32 and int8),
side by side: whether they translate alike, the BLEU of each, and the time each takes.

    python benchmarks/ctranslate2_bench.py RUN [--checkpoint best.npz] [--limit N] [--timed 500]
                                           [--threads 2] [--beam-width 4] [--repeats 1] [--json]

RUN is a run directory of a corpus (``train --data``) or task; its held-out test split is rebuilt
as ``numpy-transformer evaluate`` rebuilds it (``--limit``: its first N pairs), and the run is
written as a CTranslate2 model (export_ctranslate2) into a temporary directory. CTranslate2
translates the batches ``evaluate`` makes (100 sources sorted by length, each batch up to min(the
target table, 2 × its longest reference + 4) tokens), from the same token ids (their tokens).

The decodings:

* greedy: evaluate's (``--strategy greedy``) and CTranslate2's beam_size 1;
* beam: ``beam_search(beam_width=W, length_penalty=1, style="transformers", early_stopping=True)``,
  the search CTranslate2 runs (translate_batch(beam_size=W, length_penalty=1, min_decoding_length=0,
  return_end_token=True)), against CTranslate2's;
* evaluate's beam: ours as ``evaluate`` decodes a subword run by default (style "default", an ended
  translation keeping its place in the beam), which CTranslate2 has no setting for: its BLEU and
  time beside CTranslate2's beam.

Ours is evaluation.evaluate itself, with every translation returned (``examples``): its BLEU is
``numpy-transformer evaluate``'s. Reported for each decoding: the BLEU of each (evaluate's: sacrebleu,
13a), the share of sentences CTranslate2 float32 translates exactly as ours (the same text) and the
share int8 translates as float32; then the seconds each takes over the first ``--timed`` test pairs
(evaluate's batches of them), on ``--threads`` cores (OpenBLAS for ours; CTranslate2's
intra_threads, one translator), in turns, the median of ``--repeats``, and ours ÷ CTranslate2's.
Only the search is timed: tokenizing, detokenizing and scoring are not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


KEYS = ("ours", "float32", "int8")  # the contenders: ours, CTranslate2 float32 and int8
SHARES = ("float32_identical_to_ours", "int8_identical_to_float32")
SECONDS = tuple(f"{key}_s" for key in KEYS)
RATIOS = ("ours_over_float32", "ours_over_int8")


def evaluate_batches(model: Any, task: Any, pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """evaluate's batches of ``pairs``: the indices, the padded ids and mask, the tokens, max_len."""
    from numpy_transformer.backend import to_numpy

    pad = task.ids.pad
    by_length = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))
    batches = []
    for start in range(0, len(pairs), 100):
        indices = by_length[start : start + 100]
        batch = task.batch([pairs[i] for i in indices])
        src = to_numpy(batch.src)
        batches.append(
            {
                "indices": indices,
                "src": batch.src,
                "src_mask": batch.src_mask,
                "tokens": [[task.src_vocab.itos[i] for i in row if i != pad] for row in src.tolist()],
                "max_len": min(model.tgt_pos.seq_len, int(batch.tgt_out.shape[1]) * 2 + 4),
            }
        )
    return batches


def up_to_end(ids: list[int], pad: int, eos: int) -> list[int]:
    ids = [i for i in ids if i != pad]
    return ids[: ids.index(eos) + 1] if eos in ids else ids


class Ours:
    def __init__(self, model: Any, task: Any, search: Any, settings: dict[str, Any]) -> None:
        self.model, self.task, self.search, self.settings = model, task, search, settings

    def translate(self, batch: dict[str, Any]) -> list[list[int]]:
        from numpy_transformer.backend import to_numpy

        ids = self.task.ids
        out = self.search(
            self.model,
            batch["src"],
            batch["src_mask"],
            batch["max_len"],
            ids.bos,
            ids.eos,
            pad_id=ids.pad,
            **self.settings,
        )
        return [up_to_end(row, ids.pad, ids.eos) for row in to_numpy(out).tolist()]


class CTranslate2:
    def __init__(self, translator: Any, task: Any, beams: int) -> None:
        self.translator, self.task, self.beams = translator, task, beams

    def translate(self, batch: dict[str, Any]) -> list[list[int]]:
        results = self.translator.translate_batch(
            batch["tokens"],
            beam_size=self.beams,
            length_penalty=1.0,
            max_decoding_length=batch["max_len"],
            min_decoding_length=0,
            return_end_token=True,
        )
        stoi = self.task.tgt_vocab.stoi
        return [[stoi[token] for token in result.hypotheses[0]] for result in results]


def run_all(contender: Any, batches: list[dict[str, Any]], count: int) -> tuple[float, list[list[int]]]:
    """(seconds, the translations in the pairs' order) of ``contender`` over ``batches``."""
    outputs: list[list[int]] = [[] for _ in range(count)]
    seconds = 0.0
    for batch in batches:
        start = time.perf_counter()
        translated = contender.translate(batch)
        seconds += time.perf_counter() - start
        for index, ids in zip(batch["indices"], translated):
            outputs[index] = ids
    return seconds, outputs


def detokenized(task: Any, outputs: list[list[int]]) -> list[str]:
    """The text of each translation, as evaluate makes it."""
    return [task.tokenizer.detokenize(task.tgt_vocab.decode(ids)) for ids in outputs]


def bleu(task: Any, hypotheses: list[str], references: list[str]) -> float:
    from sacrebleu.metrics import BLEU

    metric = BLEU(tokenize="char" if task.tokenizer.name == "char" else "13a")  # as evaluate scores
    return float(metric.corpus_score(hypotheses, [references]).score)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", help="the run directory")
    parser.add_argument("--checkpoint", default="best.npz", help="the run's checkpoint (default best.npz)")
    parser.add_argument("--limit", type=int, default=None, help="the first N test pairs only")
    parser.add_argument("--timed", type=int, default=500, help="the first N test pairs are timed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "24")
    import ctranslate2

    from numpy_transformer.machine import blas_threads
    from numpy_transformer.translator.decoding import beam_search, greedy_decode
    from numpy_transformer.translator.evaluation import evaluate
    from numpy_transformer.translator.huggingface import export_ctranslate2
    from numpy_transformer.translator.run.checkpoint import load_checkpoint, restore_model_and_task

    checkpoint = Path(args.run) / args.checkpoint
    arrays, meta = load_checkpoint(checkpoint)
    model, task = restore_model_and_task(checkpoint, arrays, meta)
    pairs = task.test[: args.limit] if args.limit else task.test
    references = [target for _, target in pairs]
    batches, timed = evaluate_batches(model, task, pairs), evaluate_batches(model, task, pairs[: args.timed])
    width = args.beam_width
    decodings: dict[
        str, tuple[Any, dict[str, Any], int | None]
    ] = {  # ours, its settings, CTranslate2's beams
        "greedy": (greedy_decode, {}, 1),
        f"beam {width}": (
            beam_search,
            {"beam_width": width, "length_penalty": 1.0, "style": "transformers", "early_stopping": True},
            width,
        ),
        f"evaluate's beam {width}": (beam_search, {"beam_width": width, "length_penalty": 1.0}, None),
    }
    rows = []
    with tempfile.TemporaryDirectory() as temporary, blas_threads(args.threads):
        export_ctranslate2(model, (task.src_vocab, task.tgt_vocab), Path(temporary) / "ct2")
        translators = {
            compute: ctranslate2.Translator(
                str(Path(temporary) / "ct2"),
                device="cpu",
                compute_type=compute,
                intra_threads=args.threads,
                inter_threads=1,
            )
            for compute in ("float32", "int8")
        }
        for name, (search, settings, beams) in decodings.items():
            metrics = evaluate(model, task, pairs, strategy=search, examples=len(pairs), **settings)
            texts = {"ours": [example["translation"] for example in metrics["examples"]]}
            contenders: dict[str, Any] = {"ours": Ours(model, task, search, settings)}
            if beams is not None:
                contenders |= {compute: CTranslate2(t, task, beams) for compute, t in translators.items()}
            for key in list(contenders)[1:]:
                texts[key] = detokenized(task, run_all(contenders[key], batches, len(pairs))[1])
            row: dict[str, Any] = {
                "decoding": name,
                "sentences": len(pairs),
                "evaluate_bleu": metrics["bleu"],
                **{f"{key}_bleu": bleu(task, text, references) for key, text in texts.items()},
            }
            if row["ours_bleu"] != metrics["bleu"]:
                raise SystemExit(
                    f"{name}: this script's BLEU {row['ours_bleu']} is not evaluate's {metrics['bleu']}"
                )
            if beams is not None:
                agree = [a == b for a, b in zip(texts["ours"], texts["float32"])]
                row |= {
                    "float32_identical_to_ours": sum(agree) / len(agree),
                    "differing_sentences": [i for i, same in enumerate(agree) if not same],
                    "int8_identical_to_float32": sum(a == b for a, b in zip(texts["int8"], texts["float32"]))
                    / len(pairs),
                }
            print(f"{name}: BLEU {row['ours_bleu']:.2f}, compared", file=sys.stderr, flush=True)
            rows.append(row)
            if not timed:  # --timed 0: no timing
                continue
            for contender in contenders.values():  # warm up, untimed
                run_all(contender, timed[:1], len(pairs))
            times: dict[str, list[float]] = {key: [] for key in contenders}
            for _ in range(args.repeats):
                for key, contender in contenders.items():
                    seconds, _ = run_all(contender, timed, len(pairs))
                    times[key].append(seconds)
                    print(f"{name}, {key}: {seconds:.2f} s", file=sys.stderr, flush=True)
            row |= {f"{key}_s": statistics.median(values) for key, values in times.items()}
            if beams is not None:
                row |= {
                    "ours_over_float32": row["ours_s"] / row["float32_s"],
                    "ours_over_int8": row["ours_s"] / row["int8_s"],
                }
    report = {
        "run": str(args.run),
        "sentences": len(pairs),
        "timed_sentences": len(pairs[: args.timed]),
        "threads": args.threads,
        "ctranslate2": ctranslate2.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "rows": rows,
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(
        f"{len(pairs)} test sentences; {len(pairs[: args.timed])} timed on {args.threads} threads; "
        f"CTranslate2 {ctranslate2.__version__}\n"
        "| decoding | BLEU ours / CT2 float32 / int8 | float32 = ours | int8 = float32 "
        "| ours s | CT2 float32 s | CT2 int8 s | ours ÷ float32 | ours ÷ int8 |\n|---|---|---|---|---|---|---|---|---|"
    )
    for row in rows:
        cells = [
            row["decoding"],
            " / ".join(f"{row[f'{key}_bleu']:.2f}" for key in KEYS if f"{key}_bleu" in row),
        ]
        cells += [f"{row[name]:.1%}" if name in row else "" for name in SHARES]
        cells += [f"{row[name]:.2f}" if name in row else "" for name in SECONDS]
        cells += [f"{row[name]:.1f}" if name in row else "" for name in RATIOS]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
