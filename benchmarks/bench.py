"""numpy_transformer vs PyTorch, side by side in one run on the same cores.

    python benchmarks/bench.py                    # every configuration, table on stdout
    python benchmarks/bench.py --configs tiny small --json
    python benchmarks/bench.py --scaling          # training step time and memory vs sequence length

For each configuration: one full training step (zero grads, forward, label-smoothed loss,
backward, Adam), median of --repeats runs after warm-up, alternating the two frameworks (steps
timed in back-to-back pairs, as a training loop runs them; numpy_transformer splits the batch into
row shards on threads where parallel.auto_threads says so, as its Trainer does); analytic
matrix-multiply FLOPs and the fraction of the float32 matmul peak measured in the same run;
greedy decoding of 32 tokens at batch 1 and 32 (numpy_transformer's cached decoding vs the
from-scratch design's uncached PyTorch loop); peak resident memory of a training step, each measured in a fresh
process; the same training step on the textbook (``set_kernels("reference")``), timed in the
same alternation, so the table shows what the kernels buy. Without PyTorch the absolute numbers
are still printed. Like the command line, it runs with tune_cpu's settings.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# as the command line does (cli.restart_with_openblas_timeout): OpenBLAS reads its idle threads'
# spin time only when NumPy loads it
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "24")

import numpy as np

import numpy_transformer as nt
from numpy_transformer.optim import Adam
from numpy_transformer.presets import BASE, LABEL_SMOOTHING, SMALL, TINY
from numpy_transformer.translator.decoder_cache import DecoderCache
from numpy_transformer.translator.decoding import decoding_blas_threads, greedy_decode
from numpy_transformer.translator.thread_parallel import DataParallel, auto_threads

if hasattr(nt, "tune_cpu"):  # earlier revisions (see compare_revisions.py) tuned the allocator on import
    nt.tune_cpu()

# name: its model's preset (every size lives in numpy_transformer.presets); the corpus run's is the
# 15-minute --data run's model: SMALL without dropout, as sizes_for_corpus gives it at 2,000 pairs
# a minute and more
PRESETS = {
    "tiny": TINY,
    "small": SMALL,
    "corpus": replace(SMALL, dropout=0.0),
    "seed": BASE,
    "base": BASE,
}
# name: (src vocab, tgt vocab, batch, S); the corpus run's 4,000-unit vocabularies (about 3,000 /
# 3,600 used), 64 pairs a batch, bucketed by length to about 12 subword tokens
DATA = {
    "tiny": (100, 100, 32, 16),
    "small": (1000, 1000, 32, 32),
    "corpus": (3000, 3600, 64, 12),
    "seed": (2000, 1000, 10, 8),
    "base": (8000, 8000, 32, 64),
}
# name: (src vocab, tgt vocab, d_model, N, h, d_ff, batch, S): the form an earlier revision's bench.py
# writes, in which compare_revisions.py hands it a configuration it lacks
CONFIGS = {
    name: (
        src,
        tgt,
        PRESETS[name].d_model,
        PRESETS[name].N,
        PRESETS[name].h,
        PRESETS[name].d_ff,
        batch,
        length,
    )
    for name, (src, tgt, batch, length) in DATA.items()
}
RUNS = [
    ("tiny", "mha"),
    ("small", "mha"),
    ("small", "mla"),
    ("corpus", "mha"),
    ("seed", "mha"),
    ("base", "mha"),
    ("base", "mla"),
]
DECODE_TOKENS = 32
PAD, BOS, EOS = 0, 1, 2


def model_config(name: str, attention: str, seq_len: int | None = None) -> dict:
    src_vocab, tgt_vocab, d_model, n_layers, heads, d_ff, _, length = CONFIGS[name]
    length = seq_len or length
    table = max(length, DECODE_TOKENS) + 1
    return {
        "src_vocab_size": src_vocab,
        "tgt_vocab_size": tgt_vocab,
        "src_seq_len": table,
        "tgt_seq_len": table,
        "d_model": d_model,
        "N": n_layers,
        "h": heads,
        # a configuration compare_revisions.py hands in (added after this revision): the presets' dropout
        "dropout": PRESETS.get(name, SMALL).dropout,
        "d_ff": d_ff,
        "attention": attention,
        "norm_first": True,
        "dtype": "float32",
    }


def matmul_flops(config: dict, batch: int, src_len: int, tgt_len: int) -> float:
    """Matrix-multiply FLOPs of one training step: 2mnk per forward product, x3 with its backward."""
    d, f, n, v = config["d_model"], config["d_ff"], config["N"], config["tgt_vocab_size"]
    latent = d // 4

    def projections(q_rows: int, kv_rows: int) -> float:  # Q, K, V (or MLA's path) and the output projection
        if config["attention"] == "mla":
            kv = 2 * kv_rows * d * latent + 2 * kv_rows * latent * 2 * d
        else:
            kv = 2 * kv_rows * d * 2 * d
        return 2 * q_rows * d * d + kv + 2 * q_rows * d * d

    def attention(q_rows: int, kv_len: int) -> float:  # scores and weighted values, all heads
        return 2 * 2 * q_rows * kv_len * d

    src_rows, tgt_rows = batch * src_len, batch * tgt_len
    ffn = lambda rows: 2 * 2 * rows * d * f  # noqa: E731
    encoder = n * (projections(src_rows, src_rows) + attention(src_rows, src_len) + ffn(src_rows))
    decoder = n * (
        projections(tgt_rows, tgt_rows)
        + attention(tgt_rows, tgt_len)
        + projections(tgt_rows, src_rows)
        + attention(tgt_rows, src_len)
        + ffn(tgt_rows)
    )
    return 3.0 * (encoder + decoder + 2 * tgt_rows * d * v)


def matmul_peak() -> dict:
    """Best float32 A @ B GFLOP/s for n = 1024 and 2048 on this machine, now."""
    rng = np.random.default_rng(0)
    result = {}
    for n in (1024, 2048):
        a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
        a @ b
        times = []
        for _ in range(5 if n == 1024 else 3):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        result[n] = 2 * n**3 / min(times) / 1e9
    return result


def make_data(config: dict, batch: int, length: int) -> tuple:
    rng = np.random.default_rng(0)
    src = rng.integers(3, config["src_vocab_size"], (batch, length))
    tgt = rng.integers(3, config["tgt_vocab_size"], (batch, length))
    labels = rng.integers(3, config["tgt_vocab_size"], (batch, length))
    src[: batch // 4, length * 3 // 4 :] = PAD  # a quarter of the batch padded
    tgt[: batch // 4, length * 3 // 4 :] = PAD
    labels[: batch // 4, length * 3 // 4 :] = PAD
    return src, tgt, labels


class NumpyRunner:
    name = "numpy_transformer"

    def __init__(self, config: dict, batch: int, length: int, threads: int | None = None) -> None:
        self.model = nt.build_transformer(**config).train()
        self.optimizer = Adam(self.model, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        self.src, self.tgt, self.labels = make_data(config, batch, length)
        self.src_mask, self.tgt_mask = nt.make_src_mask(self.src, PAD), nt.make_tgt_mask(self.tgt, PAD)
        self.model.projection_layer.proj.bias.data[EOS] = -1e4  # never stop early: decode all 32 tokens
        # as the Trainer does: the batch split into row shards on their own threads when worth it
        self.threads = auto_threads(self.model, batch, length) if threads is None else threads
        self.parallel = DataParallel(self.model, self.threads)

    def train_step(self) -> None:
        self.optimizer.zero_grad()
        self.parallel.loss_and_backward(
            self.src, self.tgt, self.src_mask, self.tgt_mask, self.labels, PAD, LABEL_SMOOTHING
        )
        self.optimizer.step()

    def decode(self, batch: int) -> None:
        src = self.src[:batch]
        # MLA decodes absorbed: attention runs over the cached latent, never decompressing it
        absorbed = self.model.config.attention == "mla"
        greedy_decode(self.model, src, nt.make_src_mask(src, PAD), DECODE_TOKENS, BOS, EOS, absorbed=absorbed)


class TextbookRunner(NumpyRunner):
    """The same model and batch on the textbook (set_kernels("reference")): what the kernels buy."""

    name = "textbook"

    def __init__(self, config: dict, batch: int, length: int, threads: int | None = None) -> None:
        with nt.kernels.using_kernels("reference"):  # Adam chooses its update when it is made
            super().__init__(config, batch, length, threads)

    def train_step(self) -> None:
        with nt.kernels.using_kernels("reference"):
            super().train_step()


class StreamingFloor:
    """What no cached greedy decoding can beat: encode the source and build the cache, then per token
    multiply one row per sequence by every weight a step reads, nothing else (no attention, norms,
    or argmax). At batch 1 these products stream the weights from memory; their time bounds the step."""

    name = "floor"

    def __init__(self, numpy_runner: NumpyRunner) -> None:
        self.runner = numpy_runner

    def decode(self, batch: int) -> None:
        model, src = self.runner.model, self.runner.src[:batch]
        absorbed = model.config.attention == "mla"
        with model.evaluating(), decoding_blas_threads(model, batch):
            cache = DecoderCache(model, model.encode(src, None), None, DECODE_TOKENS, absorbed)
            weights = cache.step_weights()
            self.weight_bytes = cache.step_weight_nbytes
            rows = {
                width: np.ones((batch, width), dtype=np.float32) for width in {w.shape[0] for w in weights}
            }
            for _ in range(DECODE_TOKENS):
                for weight in weights:
                    rows[weight.shape[0]].dot(weight)


class TorchRunner:
    name = "pytorch"

    def __init__(self, config: dict, batch: int, length: int, device: str = "cpu") -> None:
        """``device`` "cuda": the model and batch on the GPU, each step ended by a synchronisation."""
        import torch

        from numpy_transformer.pytorch import build_torch_transformer

        self.torch = torch
        self.device = device
        self.model = build_torch_transformer(config).to(device).train()
        for p in self.model.parameters():
            if p.dim() > 1:
                torch.nn.init.xavier_uniform_(p)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        self.loss = torch.nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=LABEL_SMOOTHING)
        src, tgt, labels = make_data(config, batch, length)
        self.src, self.tgt, self.labels = (torch.from_numpy(a).to(device) for a in (src, tgt, labels))
        self.src_mask = (self.src != PAD)[:, None, None, :]
        self.tgt_mask = (self.tgt != PAD)[:, None, None, :] & torch.tril(
            torch.ones(length, length, dtype=torch.bool, device=device)
        )
        with torch.no_grad():
            self.model.projection_layer.proj.bias[EOS] = -1e4
        self.vocab = config["tgt_vocab_size"]

    def train_step(self) -> None:
        self.optimizer.zero_grad()
        logits = self.model(self.src, self.tgt, self.src_mask, self.tgt_mask)
        self.loss(logits.reshape(-1, self.vocab), self.labels.reshape(-1)).backward()
        self.optimizer.step()
        if self.device == "cuda":  # a timing without it would end before the GPU's work does
            self.torch.cuda.synchronize()

    def decode(self, batch: int) -> None:
        """The from-scratch design's greedy loop: re-run the decoder over the whole prefix at every step."""
        torch = self.torch
        self.model.eval()
        with torch.no_grad():
            src = self.src[:batch]
            src_mask = (src != PAD)[:, None, None, :]
            memory = self.model.encode(src, src_mask)
            tokens = torch.full((batch, 1), BOS, dtype=torch.long)
            for _ in range(DECODE_TOKENS):
                mask = torch.tril(torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool))
                out = self.model.decode(memory, src_mask, tokens, mask)
                next_token = self.model.project(out[:, -1]).argmax(dim=-1, keepdim=True)
                tokens = torch.cat([tokens, next_token], dim=1)
        self.model.train()


def have_torch() -> bool:
    try:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        return True
    except ImportError:
        return False


def timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


SETTLE_S = 0.25
"""Pause before each framework's turn. BLAS and OpenMP threads keep spinning after their last
operation (OpenBLAS's default: 2^28 cycles, about 0.1 s), so without it the framework timed second
pays for the first one's spinning threads: that alone once made PyTorch's tiny step look 2x slower."""
TRAIN_BACK_TO_BACK = 2  # training steps are timed in pairs after an untimed one, as a training loop runs them


def alternate(runners: list, method: str, repeats: int, warmup: int, *args, back_to_back: int = 1) -> dict:
    """Median and min-max of each runner's seconds, measured in turn so both see the same machine.

    Each turn: a pause, then ``back_to_back`` timed calls in a row. With more than one, the turn
    starts with an untimed call, so the timed ones run as in a training loop, straight after a step
    of their own framework (this matters: on these shared machines a call right after an idle pause
    measured up to 20% slower, and more so when both cores are in use).
    """
    for runner in runners:
        for _ in range(warmup):
            getattr(runner, method)(*args)
    samples = {runner.name: [] for runner in runners}
    for _ in range(-(-repeats // back_to_back)):
        for runner in runners:
            time.sleep(SETTLE_S)
            if back_to_back > 1:
                getattr(runner, method)(*args)
            samples[runner.name] += [timed(getattr(runner, method), *args) for _ in range(back_to_back)]
    return {
        name: {"median_s": statistics.median(s), "min_s": min(s), "max_s": max(s)}
        for name, s in samples.items()
    }


def memory_probe(framework: str, name: str, attention: str, seq_len: int | None) -> dict:
    """Run in a fresh process: RSS before the first step, and the process peak after three steps."""
    config = model_config(name, attention, seq_len)
    batch, length = CONFIGS[name][6], seq_len or CONFIGS[name][7]
    runner = (NumpyRunner if framework == "numpy" else TorchRunner)(config, batch, length)
    with open("/proc/self/statm") as statm:
        before = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    for _ in range(3):
        runner.train_step()
    # VmHWM belongs to this address space; ru_maxrss would carry the parent's peak across fork/exec
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    return {
        "rss_before_step_mb": before / 2**20,
        "peak_rss_mb": peak / 2**20,
        "step_increase_mb": max(peak - before, 0) / 2**20,
    }


def probe(framework: str, name: str, attention: str, seq_len: int | None = None) -> dict:
    command = [sys.executable, __file__, "--probe", framework, name, attention, str(seq_len or 0)]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def ratio(mine: float, theirs: float) -> float:
    return mine / theirs if theirs else float("nan")


def run_config(
    name: str, attention: str, peak: float, repeats: int, use_torch: bool, decode: bool, textbook: bool
) -> dict:
    config = model_config(name, attention)
    batch, length = CONFIGS[name][6], CONFIGS[name][7]
    runners = [NumpyRunner(config, batch, length)] + (
        [TorchRunner(config, batch, length)] if use_torch else []
    )
    flops = matmul_flops(config, batch, length, length)
    textbook_runners = [TextbookRunner(config, batch, length)] if textbook else []
    train = alternate(runners + textbook_runners, "train_step", repeats, 2, back_to_back=TRAIN_BACK_TO_BACK)
    row = {
        "config": name,
        "attention": attention,
        "batch": batch,
        "seq_len": length,
        "matmul_gflop_per_step": flops / 1e9,
        "numpy_threads": runners[0].threads,
        "train": train,
    }
    mine = train["numpy_transformer"]["median_s"]
    row["numpy_gflops"] = flops / mine / 1e9
    row["numpy_fraction_of_peak"] = row["numpy_gflops"] / peak
    row["numpy_target_tokens_per_s"] = batch * length / mine
    if decode:
        floor = StreamingFloor(runners[0])
        row["decode"] = {
            b: alternate(runners + [floor] * (b == 1), "decode", max(3, repeats // 2), 1, b)
            for b in (1, min(32, batch))
        }
        row["decode_step_weight_mb"] = floor.weight_bytes / 1e6
    row["memory"] = {"numpy_transformer": probe("numpy", name, attention)}
    if use_torch:
        row["memory"]["pytorch"] = probe("torch", name, attention)
        theirs = train["pytorch"]["median_s"]
        row["ratio_train"] = ratio(mine, theirs)
        if textbook:
            row["ratio_train_textbook"] = ratio(train["textbook"]["median_s"], theirs)
        row["pytorch_gflops"] = flops / theirs / 1e9
        if decode:
            row["ratio_decode"] = {
                b: ratio(d["numpy_transformer"]["median_s"], d["pytorch"]["median_s"])
                for b, d in row["decode"].items()
            }
            batch_one = row["decode"][1]
            row["ratio_decode_floor"] = ratio(
                batch_one["floor"]["median_s"], batch_one["pytorch"]["median_s"]
            )
        row["ratio_peak_memory"] = ratio(
            row["memory"]["numpy_transformer"]["peak_rss_mb"], row["memory"]["pytorch"]["peak_rss_mb"]
        )
    return row


def scaling(repeats: int, use_torch: bool) -> list[dict]:
    rows = []
    for length in (16, 32, 64, 128, 256):
        config = model_config("small", "mha", length)
        batch = CONFIGS["small"][6]
        runners = [NumpyRunner(config, batch, length)] + (
            [TorchRunner(config, batch, length)] if use_torch else []
        )
        train = alternate(runners, "train_step", repeats, 1, back_to_back=TRAIN_BACK_TO_BACK)
        row = {
            "seq_len": length,
            "numpy_threads": runners[0].threads,
            "train": train,
            "memory": {"numpy_transformer": probe("numpy", "small", "mha", length)},
        }
        if use_torch:
            row["memory"]["pytorch"] = probe("torch", "small", "mha", length)
            row["ratio_train"] = ratio(train["numpy_transformer"]["median_s"], train["pytorch"]["median_s"])
        rows.append(row)
    return rows


def print_table(result: dict) -> None:
    peak = result["matmul_peak_gflops"]
    print(f"float32 matmul peak: {peak['1024']:.1f} GFLOP/s (n=1024), {peak['2048']:.1f} GFLOP/s (n=2048)")
    print(
        f"{'config':<12}{'shards':>7}{'numpy ms':>10}{'(min-max)':>16}{'torch ms':>10}{'ratio':>7}"
        f"{'GFLOP/s':>9}{'of peak':>8}"
        f"{'tok/s':>9}{'dec b1 r':>9}{'floor r':>8}{'dec b32 r':>10}{'mem MB n/t':>13}{'textbook r':>11}"
    )
    for row in result["runs"]:
        t = row["train"]
        mine, theirs = t["numpy_transformer"], t.get("pytorch")
        decode = row.get("ratio_decode", {})
        mem = row["memory"]
        spread = f"({mine['min_s'] * 1e3:.1f}-{mine['max_s'] * 1e3:.1f})"
        print(
            f"{row['config'] + '/' + row['attention']:<12}{row['numpy_threads']:>7}"
            f"{mine['median_s'] * 1e3:>10.1f}{spread:>16}"
            f"{(theirs['median_s'] * 1e3 if theirs else float('nan')):>10.1f}"
            f"{row.get('ratio_train', float('nan')):>7.2f}"
            f"{row['numpy_gflops']:>9.1f}{row['numpy_fraction_of_peak']:>8.0%}{row['numpy_target_tokens_per_s']:>9.0f}"
            f"{decode.get(1, float('nan')):>9.3f}{row.get('ratio_decode_floor', float('nan')):>8.3f}"
            f"{decode.get(min(32, row['batch']), float('nan')):>10.3f}"
            f"{mem['numpy_transformer']['peak_rss_mb']:>7.0f}/"
            f"{mem.get('pytorch', {}).get('peak_rss_mb', float('nan')):<5.0f}"
            f"{row.get('ratio_train_textbook', float('nan')):>11.2f}"
        )
    for row in result.get("scaling", []):
        t = row["train"]
        theirs = t.get("pytorch", {}).get("median_s", float("nan"))
        mem = row["memory"]
        print(
            f"small/mha S={row['seq_len']:<4} shards {row['numpy_threads']}  "
            f"numpy {t['numpy_transformer']['median_s'] * 1e3:8.1f} ms  torch {theirs * 1e3:8.1f} ms  "
            f"ratio {row.get('ratio_train', float('nan')):.2f}  "
            f"step memory +{mem['numpy_transformer']['step_increase_mb']:.0f} MB"
            f" / torch +{mem.get('pytorch', {}).get('step_increase_mb', float('nan')):.0f} MB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configs", nargs="*", default=None, help="subset of: tiny small corpus seed base")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-decode", action="store_true")
    parser.add_argument(
        "--scaling", action="store_true", help="also the sequence-length scaling table (small config)"
    )
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument(
        "--no-textbook", action="store_true", help="skip timing the textbook (set_kernels('reference'))"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--probe", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        framework, name, attention, seq_len = args.probe
        if framework == "torch":
            have_torch()
        print(json.dumps(memory_probe(framework, name, attention, int(seq_len) or None)))
        return
    use_torch = not args.no_torch and have_torch()
    peak = matmul_peak()
    runs = [(n, a) for n, a in RUNS if args.configs is None or n in args.configs]
    result = {
        "matmul_peak_gflops": {str(k): v for k, v in peak.items()},
        "torch": use_torch,
        "cores": os.cpu_count(),
        "runs": [
            run_config(
                n, a, max(peak.values()), args.repeats, use_torch, not args.no_decode, not args.no_textbook
            )
            for n, a in runs
        ],
    }
    if args.scaling:
        result["scaling"] = scaling(max(3, args.repeats // 2), use_torch)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(result)


if __name__ == "__main__":
    main()
