"""Translating with a model of opus-mt-en-de's shapes: numpy_transformer against transformers' generate().

    python benchmarks/translate_bench.py [--sentences 64] [--batch 16] [--new-tokens 40] [--repeats 2]
                                         [--threads 2] [--skip-memory] [--json]

A random MarianMTModel of opus-mt-en-de's shapes (d_model 512, 6 + 6 layers, 8 heads, ffn 2048,
vocabulary 58,101: 74 M parameters) is built with transformers offline, saved with
save_pretrained to a temporary directory and read back with numpy_transformer's load_pretrained;
both translate the same short random sources (5 to 20 tokens, <eos> last), ``--batch`` at a time,
greedy and with 4 beams (transformers' beam search: ``beam_search(style="transformers")``), up to
``--new-tokens`` tokens, float32, on the same ``--threads`` (torch.set_num_threads; OpenBLAS
likewise). The contenders take turns; every output is asserted identical to generate()'s. Peak
memory is each contender's whole process (VmHWM) loading the model and translating the
sources, each in a fresh process, the two libraries never imported together.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EOS = 0  # Marian: </s> 0, <pad> (the decoder's start) last
SHAPES: dict[str, Any] = {
    "vocab_size": 58101,
    "decoder_vocab_size": 58101,
    "d_model": 512,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "encoder_attention_heads": 8,
    "decoder_attention_heads": 8,
    "encoder_ffn_dim": 2048,
    "decoder_ffn_dim": 2048,
    "max_position_embeddings": 512,
    "pad_token_id": 58100,
    "eos_token_id": EOS,
    "decoder_start_token_id": 58100,
    "forced_eos_token_id": None,  # our decoders never force <eos> at the last place
    "activation_function": "swish",
    "scale_embedding": True,
    "normalize_before": False,
    "share_encoder_decoder_embeddings": True,
    "dropout": 0.1,
}
PAD: int = SHAPES["pad_token_id"]


def write_model(directory: Path) -> None:
    """A random MarianMTModel of opus-mt-en-de's shapes, saved as transformers saves it."""
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.MarianMTModel(transformers.MarianConfig(**SHAPES)).eval()
    with torch.no_grad():  # away from the initial zeros and ones, so every bias and norm matters
        for name, parameter in model.named_parameters():
            if "embed_positions" not in name:
                parameter.add_(torch.randn_like(parameter) * 0.02)
    model.save_pretrained(directory)


def sources(sentences: int) -> list[list[int]]:
    import numpy as np

    rng = np.random.default_rng(0)
    return [[*rng.integers(2, PAD, int(rng.integers(4, 20))).tolist(), EOS] for _ in range(sentences)]


def batches(src: list[list[int]], size: int):
    """(ids (B, S) padded, mask (B, S)) ``size`` sources at a time, in order."""
    import numpy as np

    for start in range(0, len(src), size):
        rows = src[start : start + size]
        ids = np.full((len(rows), max(map(len, rows))), PAD, dtype=np.int64)
        for row, sentence in zip(ids, rows):
            row[: len(sentence)] = sentence
        yield ids, (ids != PAD)[:, None, None, :]  # (B, 1, 1, S): make_src_mask's shape


def generate_options(beams: int, new_tokens: int) -> dict:
    """generate()'s settings that match our greedy_decode / beam_search(style="transformers")."""
    return {
        "num_beams": beams,
        "do_sample": False,
        "max_length": new_tokens + 1,  # transformers counts the start token
        "min_length": 0,
        "length_penalty": 1.0,
        "early_stopping": False,
        "bad_words_ids": [[PAD]],  # as OPUS-MT's generation configs: <pad> is never emitted
        "forced_eos_token_id": None,
        "num_return_sequences": 1,
    }


class Theirs:
    def __init__(self, directory: Path, threads: int) -> None:
        import torch
        import transformers

        torch.set_num_threads(threads)
        self.torch = torch
        self.model = transformers.MarianMTModel.from_pretrained(directory).eval()

    def translate(self, src: list[list[int]], batch: int, beams: int, new_tokens: int) -> list[list[int]]:
        out = []
        with self.torch.inference_mode():
            for ids, mask in batches(src, batch):
                generated = self.model.generate(
                    input_ids=self.torch.tensor(ids),
                    attention_mask=self.torch.tensor(mask[:, 0, 0]),
                    **generate_options(beams, new_tokens),
                ).numpy()
                out += [up_to_end(row[1:]) for row in generated.tolist()]  # without the start token
        return out


class Ours:
    def __init__(self, directory: Path, gradients: bool = False) -> None:
        import numpy_transformer as nt

        self.nt = nt
        self.model = nt.load_pretrained(directory).eval()
        if gradients:  # the gradient buffer made, as every model had one before it was made on first use
            assert self.model.flat is not None
            self.model.flat.grad.fill(0)

    def translate(self, src: list[list[int]], batch: int, beams: int, new_tokens: int) -> list[list[int]]:
        from numpy_transformer.translator.decoding import beam_search, greedy_decode

        xp, out = self.nt.backend.get_array_module(), []
        for ids, mask in batches(src, batch):
            ids, mask = xp.asarray(ids), xp.asarray(mask)  # on the GPU too (gpu_check.py)
            if beams == 1:
                result = greedy_decode(self.model, ids, mask, new_tokens, PAD, EOS, pad_id=PAD)
            else:
                result = beam_search(
                    self.model,
                    ids,
                    mask,
                    new_tokens,
                    PAD,
                    EOS,
                    beam_width=beams,
                    pad_id=PAD,
                    style="transformers",
                )
            out += [up_to_end(row) for row in result.tolist()]
        return out


def up_to_end(ids: list[int]) -> list[int]:
    ids = [i for i in ids if i != PAD]
    return ids[: ids.index(EOS) + 1] if EOS in ids else ids


def speed(directory: Path, args: argparse.Namespace) -> list[dict]:
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "24")
    from numpy_transformer.machine import blas_threads

    src = sources(args.sentences)
    theirs, ours = Theirs(directory, args.threads), Ours(directory)
    rows = []
    with blas_threads(args.threads):
        for beams in (1, 4):
            times: dict[str, list[float]] = {"ours": [], "theirs": []}
            outputs: dict[str, list[list[int]]] = {}
            for contender in (theirs, ours):  # warm up: a short untimed call
                contender.translate(src[:2], 2, beams, 2)
            for _ in range(args.repeats):
                for name, contender in (("theirs", theirs), ("ours", ours)):
                    start = time.perf_counter()
                    outputs[name] = contender.translate(src, args.batch, beams, args.new_tokens)
                    times[name].append(time.perf_counter() - start)
                    print(f"beams {beams} {name}: {times[name][-1]:.2f} s", file=sys.stderr, flush=True)
            differ = [i for i, (a, b) in enumerate(zip(outputs["ours"], outputs["theirs"])) if a != b]
            assert not differ, f"beams {beams}: sentences {differ} differ from generate()'s"
            ours_s, theirs_s = statistics.median(times["ours"]), statistics.median(times["theirs"])
            rows.append(
                {
                    "beams": beams,
                    "ours_s": ours_s,
                    "theirs_s": theirs_s,
                    "ratio": ours_s / theirs_s,
                    "tokens": sum(map(len, outputs["ours"])),
                    "ours_all_s": times["ours"],
                    "theirs_all_s": times["theirs"],
                }
            )
    return rows


def high_water(field: str = "VmHWM") -> int:
    """This process's peak resident memory in KiB: VmHWM, the high-water mark of its own address space
    (``field`` "VmRSS": what it holds now). ru_maxrss would not do: Linux carries it across fork and
    exec, so a child started by this benchmark, which holds a model itself, would report at least
    the benchmark's own peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_memory(directory: Path, args: argparse.Namespace) -> dict[str, float]:
    """Each contender's process peak (MiB): load the model, translate the sources with 4 beams."""
    out = {}
    loads = {
        "ours": f"Ours({str(directory)!r})",
        "ours_with_gradients": f"Ours({str(directory)!r}, gradients=True)",
        "theirs": f"Theirs({str(directory)!r}, {args.threads})",
    }
    for name, load in loads.items():
        code = (
            f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); "
            "from translate_bench import Ours, Theirs, sources, high_water; "
            f"loaded = {load}; "
            "after_load = high_water(); "
            f"loaded.translate(sources({args.sentences}), {args.batch}, 4, {args.new_tokens}); "
            "import gc; gc.collect(); "
            "print(after_load, high_water(), high_water('VmRSS'))"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ}
        )
        after_load, peak, resident = map(int, result.stdout.split()[-3:])
        out[f"{name}_after_load_mib"], out[f"{name}_peak_mib"] = after_load / 1024, peak / 1024
        out[f"{name}_resident_mib"] = resident / 1024  # held once translated: the model and what stays
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary) / "opus-mt-en-de-shapes"
        write_model(directory)
        result: dict[str, Any] = {
            "speed": [] if args.skip_speed else speed(directory, args),
            "memory": {} if args.skip_memory else peak_memory(directory, args),
        }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(
        f"{args.sentences} sentences, {args.batch} a batch, up to {args.new_tokens} tokens, {args.threads} threads"
    )
    for row in result["speed"]:
        print(
            f"  beams {row['beams']}: ours {row['ours_s']:.2f} s, transformers {row['theirs_s']:.2f} s, "
            f"ratio {row['ratio']:.3f}, {row['tokens']} tokens, identical"
        )
    memory = result["memory"]
    for name in ("ours", "ours_with_gradients", "theirs") if memory else ():
        print(
            f"  {name}: peak {memory[name + '_peak_mib']:.0f} MiB (loading: {memory[name + '_after_load_mib']:.0f}), "
            f"resident after translating {memory[name + '_resident_mib']:.0f} MiB"
        )


if __name__ == "__main__":
    main()
