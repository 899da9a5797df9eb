"""Cached vs uncached greedy decoding, and the cache's bytes per generated token.

    python benchmarks/decode_bench.py [--config small] [--lengths 16 64 256] [--batches 1 32] [--json]

The model is the benchmark's "small" configuration (d_model 128, N 2, h 4) unless --config says
otherwise, untrained, with <eos> made impossible so every run produces exactly the asked length.
Tokens per second count generated tokens (batch x length); cached and uncached runs alternate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from bench import CONFIGS, PAD

import numpy_transformer as nt
from numpy_transformer.translator.decoder_cache import DecoderCache
from numpy_transformer.translator.decoding import greedy_decode

BOS, EOS = 1, 2


def build(name: str, attention: str, max_len: int):
    src_vocab, tgt_vocab, d_model, n_layers, heads, d_ff, _, src_len = CONFIGS[name]
    model = nt.build_transformer(
        src_vocab,
        tgt_vocab,
        src_len,
        max_len + 1,
        d_model=d_model,
        N=n_layers,
        h=heads,
        d_ff=d_ff,
        attention=attention,
    ).eval()
    model.projection_layer.proj.bias.data[EOS] = -1e4
    return model


def seconds(function, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def speed(name: str, lengths: list[int], batches: list[int], repeats: int) -> list[dict]:
    rows = []
    model = build(name, "mha", max(lengths))
    src_len = CONFIGS[name][7]
    for batch in batches:
        src = np.random.default_rng(0).integers(3, CONFIGS[name][0], (batch, src_len))
        mask = nt.make_src_mask(src, PAD)
        for length in lengths:
            run = {
                cached: (
                    lambda cached=cached, src=src, mask=mask, length=length: greedy_decode(
                        model, src, mask, length, BOS, EOS, use_cache=cached
                    )
                )
                for cached in (True, False)
            }
            reps = repeats if length < 256 else max(1, repeats // 3)
            times = {True: [], False: []}
            for _ in range(reps):  # alternate, so both see the same machine
                for cached in (True, False):
                    times[cached].append(seconds(run[cached], 1))
            cached_s, uncached_s = statistics.median(times[True]), statistics.median(times[False])
            rows.append(
                {
                    "batch": batch,
                    "tokens": length,
                    "cached_tokens_per_s": batch * length / cached_s,
                    "uncached_tokens_per_s": batch * length / uncached_s,
                    "speedup": uncached_s / cached_s,
                    "cached_ms_per_step": cached_s / length * 1e3,
                    "uncached_ms_per_step": uncached_s / length * 1e3,
                }
            )
    return rows


def cache_bytes(name: str, length: int = 64) -> list[dict]:
    """Self-attention cache bytes per generated token and sequence, measured after ``length`` steps."""
    rows = []
    for attention, absorbed in (("mha", False), ("mla", False), ("mla", True)):
        model = build(name, attention, length)
        src = np.random.default_rng(0).integers(3, CONFIGS[name][0], (1, CONFIGS[name][7]))
        mask = nt.make_src_mask(src, PAD)
        cache = DecoderCache(model, model.encode(src, mask), mask, length, absorbed)
        tokens = np.full(1, BOS)
        for _ in range(length):
            tokens = cache.step(tokens).argmax(axis=-1)
        rows.append(
            {
                "attention": attention + (" absorbed" if absorbed else ""),
                "bytes_per_token": cache.self_attention_nbytes / length,
                "cross_bytes_per_source_token": cache.cross_attention_nbytes / CONFIGS[name][7],
            }
        )
    for row in rows:
        row["ratio_to_mha"] = row["bytes_per_token"] / rows[0]["bytes_per_token"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default="small", choices=sorted(CONFIGS))
    parser.add_argument("--lengths", type=int, nargs="*", default=[16, 64, 256])
    parser.add_argument("--batches", type=int, nargs="*", default=[1, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {
        "config": args.config,
        "speed": speed(args.config, args.lengths, args.batches, args.repeats),
        "cache": cache_bytes(args.config),
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"greedy decoding, {args.config} config, tokens/s (generated tokens = batch x length)")
    print(
        f"{'batch':>6}{'tokens':>8}{'cached tok/s':>14}{'uncached tok/s':>16}{'speed-up':>10}{'ms/step c/u':>16}"
    )
    for r in result["speed"]:
        print(
            f"{r['batch']:>6}{r['tokens']:>8}{r['cached_tokens_per_s']:>14.0f}{r['uncached_tokens_per_s']:>16.0f}"
            f"{r['speedup']:>9.1f}x{r['cached_ms_per_step']:>8.2f}/{r['uncached_ms_per_step']:<7.2f}"
        )
    print("self-attention cache per generated token (keys and values together), per sequence")
    for r in result["cache"]:
        print(
            f"  {r['attention']:<14}{r['bytes_per_token']:>8.0f} bytes  ({r['ratio_to_mha']:.3f} of MHA)   "
            f"cross-attention: {r['cross_bytes_per_source_token']:.0f} bytes per source token"
        )


if __name__ == "__main__":
    main()
