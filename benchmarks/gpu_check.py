"""The GPU path proven in one command: real CuPy on a CUDA GPU, one report.

    bash benchmarks/gpu_check.sh [OUT_DIR]           # install (no network needed), then everything below
    python benchmarks/gpu_check.py --out DIR         # the checks alone, on the GPU
    python benchmarks/gpu_check.py --dry-run --out DIR   # no GPU: every section on the CuPy stand-in, tiny sizes

Sections, each timed and recorded even when another fails:

- ``environment``: the device, its memory, CUDA, CuPy, NumPy and PyTorch versions, ``CUPY_TF32``;
- ``cupy_tests``: the real-CuPy tests (``CUPY_TESTS``: the pipeline, CuPy's documented differences
  from NumPy beside the stand-in's, the gradient checker on device arrays) under pytest, collected
  only in a dry run;
- ``kernels_on_device``: the kernels against the textbook (``set_kernels("reference")``) on the
  device in float64, logits and every gradient, bound ``KERNEL_BOUND``;
- ``cpu_vs_gpu``: the same model's logits and gradients on NumPy and on the device, float64 and
  float32, bounds ``CPU_GPU_BOUNDS`` (derived in ``tests/translator/test_cupy_gpu.py``);
- ``training_step``: ``bench.py``'s configurations, one training step (zero grads, forward,
  label-smoothed loss, backward, Adam) against PyTorch eager on the same device, timed in turns
  with a synchronisation before each clock read; each one's share of the float32 matrix-product
  peak measured in the same run; each allocator's device memory held after the steps;
- ``translate``: a random model of opus-mt-en-de's shapes (74 M parameters) translating with
  greedy and 4-beam search against transformers' ``generate()`` on the same device, outputs
  compared, device memory of each;
- ``numbers_en_fr``: ``numpy-transformer train --task numbers-en-fr --backend cupy``, then
  ``evaluate`` on the 1,000 unseen test numbers; wall time, steps, and when the dev set first
  reached exact match 1.0;
- ``fused_kernels`` and ``launch_counts`` (benchmarks/gpu_fused_check.py): each fused CUDA kernel
  against its NumPy twin on the device; CUPTI's kernels per step beside the stand-in's count, and the
  step against PyTorch eager's, with the fused kernels off and on.

The report is ``report.md`` and ``report.json`` in ``--out``; the exit status is 0 when every
section passed, 1 otherwise. ``--deadline-s`` stops a section that runs past the whole run's
time (its report says so) and skips the sections after it. A dry run says "no GPU" at its top and
proves the script itself, not the GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests" / "support")]

import bench  # noqa: E402
import gpu_fused_check  # noqa: E402
import numpy as np  # noqa: E402
import translate_bench  # noqa: E402

import numpy_transformer as nt  # noqa: E402
from numpy_transformer import backend  # noqa: E402
from numpy_transformer.kernels import ops, using_kernels  # noqa: E402
from numpy_transformer.optim import Adam  # noqa: E402

KERNEL_BOUND = 1e-12  # kernels vs textbook, float64, worst relative error of an array (as tests/conftest.py)
CPU_GPU_BOUNDS = {"float64": (1e-10, 1e-10), "float32": (1e-4, 1e-3)}  # (logits, gradients)
NUMBERS_EXACT_TARGET = 1.0
CUPY_TESTS = [  # the tests that run on real CuPy where a GPU is present (skipped, with the reason, elsewhere)
    "tests/translator/test_cupy_gpu.py",
    "tests/translator/test_cupy_behaviours.py",
    "tests/model/test_gradcheck_faults.py::test_the_checks_run_on_cupy_arrays",
]
DEFAULT_RUNS = bench.RUNS
DRY_RUNS = [("tiny", "mha"), ("tiny", "mla")]


class Device:
    """The array module under test and how to wait for it: real CuPy, or the stand-in in a dry run."""

    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        if dry_run:
            from cupy_standin import make_module

            self.xp = make_module()
            backend._load_cupy = lambda: (
                self.xp
            )  # as tests/translator/test_cupy_path.py: "cupy" is the stand-in
        else:
            import cupy

            self.xp = cupy
        backend.set_backend(self.xp)

    def synchronize(self) -> None:
        self.xp.cuda.Device().synchronize()

    def pool_bytes(self) -> int | None:
        """Bytes CuPy's memory pool holds now (freed blocks included: its high-water mark since freeing)."""
        pool = getattr(self.xp, "get_default_memory_pool", None)
        return pool().total_bytes() if pool else None

    def free_pool(self) -> None:
        gc.collect()
        pool = getattr(self.xp, "get_default_memory_pool", None)
        if pool:
            pool().free_all_blocks()


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max(|b|), over the whole array (as tests/conftest.py)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def logits_and_gradients(state: dict, attention: str, dtype: str) -> tuple[np.ndarray, dict]:
    """A small model's logits and every parameter's gradient for one fixed batch, on the backend in use."""
    model = nt.build_transformer(
        31, 37, 12, 12, d_model=32, N=2, h=4, d_ff=64, attention=attention, dropout=0.0, dtype=dtype
    )
    model.load_state_dict(state)
    xp = backend.get_array_module()
    rng = np.random.default_rng(1)
    src, tgt, labels = (xp.asarray(rng.integers(1, 31, (4, 12))) for _ in range(3))
    logits = model.forward(src, tgt, nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0))
    _loss, cache = ops.cross_entropy_forward(logits, labels, 0, 0.1)
    model.backward(ops.cross_entropy_backward(1.0, cache))
    return backend.to_numpy(logits), {name: backend.to_numpy(p.grad) for name, p in model.named_parameters()}


def worst(reference: tuple[np.ndarray, dict], other: tuple[np.ndarray, dict]) -> tuple[float, float, str]:
    """The logits' relative error and the worst gradient's, with that gradient's name."""
    gradients = {name: relative_error(other[1][name], grad) for name, grad in reference[1].items()}
    name = max(gradients, key=gradients.__getitem__)
    return relative_error(other[0], reference[0]), gradients[name], name


def initial_state(attention: str, dtype: str) -> dict:
    """Initial weights drawn on the host, so both backends start from the same numbers."""
    previous = backend.get_array_module()
    backend.set_backend("numpy")
    try:
        model = nt.build_transformer(
            31, 37, 12, 12, d_model=32, N=2, h=4, d_ff=64, attention=attention, dtype=dtype
        )
        return model.state_dict()
    finally:
        backend.set_backend(previous)


# ---------------------------------------------------------------------------------------------- sections


def section_environment(device: Device, args: argparse.Namespace) -> dict:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numpy_transformer": nt.__version__,
        "commit": commit(),
        "CUPY_TF32": os.environ.get("CUPY_TF32", "(unset: float32 products in full float32)"),
    }
    if device.dry_run:
        info["device"] = "no GPU: the CuPy stand-in (tests/support/cupy_standin.py), tiny sizes"
    else:
        cupy = device.xp
        properties = cupy.cuda.runtime.getDeviceProperties(0)
        free, total = cupy.cuda.Device().mem_info
        info.update(
            device=properties["name"].decode()
            if isinstance(properties["name"], bytes)
            else properties["name"],
            multiprocessors=properties["multiProcessorCount"],
            memory_gib=round(total / 2**30, 1),
            free_gib=round(free / 2**30, 1),
            cuda_runtime=cupy.cuda.runtime.runtimeGetVersion(),
            cuda_driver=cupy.cuda.runtime.driverGetVersion(),
            cupy=cupy.__version__,
        )
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_cuda"] = bool(torch.cuda.is_available())
    except ImportError:
        info["torch"] = None
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = None
    return {"ok": True, **info}


def section_cupy_tests(device: Device, args: argparse.Namespace) -> dict:
    command = [
        sys.executable,
        "-m",
        "pytest",
        *CUPY_TESTS,
        "-q",
        "-rs",
        "-p",
        "no:cacheprovider",
    ]
    if device.dry_run:
        command.append("--collect-only")
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    lines = (result.stdout + result.stderr).strip().splitlines()
    said = result.stdout.strip().splitlines()  # pytest's summary: its last line (a plugin may warn after it)
    summary = said[-1] if said else ""
    return {  # on a GPU nothing may be skipped: a skip would be a check not made
        "ok": result.returncode == 0 and (device.dry_run or "skipped" not in summary),
        "command": " ".join(command[1:]),
        "summary": summary,
        "tail": lines[-25:],
    }


def section_kernels_on_device(device: Device, args: argparse.Namespace) -> dict:
    rows = {}
    for attention in ("mha", "mla"):
        state = initial_state(attention, "float64")
        with using_kernels("reference"):
            textbook = logits_and_gradients(state, attention, "float64")
        kernels = logits_and_gradients(state, attention, "float64")
        logits, gradient, name = worst(textbook, kernels)
        rows[attention] = {"logits": logits, "worst_gradient": gradient, "worst_gradient_name": name}
    ok = all(r["logits"] <= KERNEL_BOUND and r["worst_gradient"] <= KERNEL_BOUND for r in rows.values())
    return {"ok": ok, "bound": KERNEL_BOUND, **rows}


def section_cpu_vs_gpu(device: Device, args: argparse.Namespace) -> dict:
    rows: dict[str, Any] = {}
    ok = True
    for dtype, (logits_bound, gradient_bound) in CPU_GPU_BOUNDS.items():
        for attention in ("mha", "mla"):
            state = initial_state(attention, dtype)
            backend.set_backend("numpy")
            on_cpu = logits_and_gradients(state, attention, dtype)
            backend.set_backend(device.xp)
            on_device = logits_and_gradients(state, attention, dtype)
            logits, gradient, name = worst(on_cpu, on_device)
            rows[f"{attention}/{dtype}"] = {
                "logits": logits,
                "worst_gradient": gradient,
                "worst_gradient_name": name,
                "bounds": [logits_bound, gradient_bound],
            }
            ok = ok and logits <= logits_bound and gradient <= gradient_bound
    return {"ok": ok, **rows}


def section_numbers_en_fr(device: Device, args: argparse.Namespace) -> dict:
    from numpy_transformer.translator.cli import main

    run = Path(tempfile.mkdtemp(prefix="numbers-gpu-"))
    train = ["train", "--task", "numbers-en-fr", "--backend", "cupy", "--out", str(run / "run")]
    if device.dry_run:
        train += ["--steps", "6", "--eval-every", "3", "--batch-size", "8", "--d-model", "16", "--d-ff", "32"]
    output = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(io.StringIO()):
        code = main(train)
    train_s = time.perf_counter() - start
    evaluate = io.StringIO()
    with contextlib.redirect_stdout(evaluate):
        evaluate_code = main(["evaluate", "--backend", "cupy", "--checkpoint", str(run / "run"), "--json"])
    metrics = json.loads(evaluate.getvalue().strip().splitlines()[-1])
    steps, elapsed, first_exact = 0, 0.0, None
    for line in (run / "run" / "log.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "elapsed_s" in record:
            steps, elapsed = record["step"], record["elapsed_s"]
        if (
            record.get("split") == "dev"
            and record.get("exact_match", 0) >= NUMBERS_EXACT_TARGET
            and first_exact is None
        ):
            first_exact = {"step": record["step"], "training_s": elapsed}
    result = {
        "command": "numpy-transformer " + " ".join(train),
        "exit_codes": [code, evaluate_code],
        "wall_s": train_s,
        "steps": steps,
        "training_s": elapsed,
        "test_exact_match": metrics["exact_match"],
        "test_bleu": metrics["bleu"],
        "test_chrf": metrics["chrf"],
        "test_n": metrics["n"],
        "dev_exact_1_first_at": first_exact,
    }
    result["ok"] = (
        code == 0
        and evaluate_code == 0
        and (device.dry_run or metrics["exact_match"] >= NUMBERS_EXACT_TARGET)
    )
    return result


class OursOnDevice:
    """bench.py's numpy_transformer step with its batch on the device; each call ends synchronised."""

    name = "numpy_transformer"

    def __init__(self, device: Device, config: dict, batch: int, length: int) -> None:
        xp = device.xp
        self.device = device
        self.model = nt.build_transformer(**config).train()
        self.optimizer = Adam(self.model, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        host = bench.make_data(config, batch, length)
        nt.check_ids_on_host(self.model, *host, bench.PAD)  # what the step on the device leaves to the host
        self.src, self.tgt, self.labels = (xp.asarray(a) for a in host)
        self.src_mask, self.tgt_mask = (
            nt.make_src_mask(self.src, bench.PAD),
            nt.make_tgt_mask(self.tgt, bench.PAD),
        )

    def train_step(self) -> None:
        self.optimizer.zero_grad()
        loss = nt.loss_and_backward(
            self.model,
            self.src,
            self.tgt,
            self.src_mask,
            self.tgt_mask,
            self.labels,
            bench.PAD,
            0.1,
            on_device=True,
        )
        self.optimizer.step()
        float(loss)  # the step's one synchronisation, at its end


def matmul_peak(device: Device, torch_where: str | None) -> dict:
    """Best float32 n x n products in TFLOP/s, CuPy's and PyTorch's, on the device now."""
    n = 256 if device.dry_run else 8192
    out = {}
    a = device.xp.asarray(np.random.default_rng(0).standard_normal((n, n), dtype=np.float32))

    def best(product: Callable[[], Any], wait: Callable[[], None]) -> float:
        product()
        wait()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            product()
            wait()
            times.append(time.perf_counter() - start)
        return 2 * n**3 / min(times) / 1e12

    out["cupy_tflops"] = best(lambda: a @ a, device.synchronize)
    if torch_where:
        import torch

        t = torch.from_numpy(backend.to_numpy(a)).to(torch_where)
        wait = torch.cuda.synchronize if torch_where == "cuda" else (lambda: None)
        out["torch_tflops"] = best(lambda: t @ t, wait)
        out["torch_allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
    out["n"] = n
    return out


def torch_device(device: Device) -> str | None:
    try:
        import torch
    except ImportError:
        return None
    if torch.cuda.is_available():
        return "cuda"
    return "cpu" if device.dry_run else None


def section_training_step(device: Device, args: argparse.Namespace) -> dict:
    where = torch_device(device)
    peak = matmul_peak(device, where)
    rows = []
    for name, attention in DRY_RUNS if device.dry_run else DEFAULT_RUNS:
        config = bench.model_config(name, attention)
        batch, length = bench.CONFIGS[name][6], bench.CONFIGS[name][7]
        device.free_pool()
        before = device.pool_bytes()
        runners: list[Any] = [OursOnDevice(device, config, batch, length)]
        if where:
            import torch

            if where == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            runners.append(bench.TorchRunner(config, batch, length, device=where))
        repeats = 2 if device.dry_run else args.repeats
        timings = bench.alternate(runners, "train_step", repeats, 2, back_to_back=bench.TRAIN_BACK_TO_BACK)
        flops = bench.matmul_flops(config, batch, length, length)
        mine = timings["numpy_transformer"]["median_s"]
        row: dict[str, Any] = {
            "config": f"{name}/{attention}",
            "batch": batch,
            "seq_len": length,
            "ours_ms": mine * 1e3,
            "ours_fraction_of_peak": flops / mine / 1e12 / peak["cupy_tflops"],
            "timings": timings,
        }
        after = device.pool_bytes()
        if after is not None and before is not None:
            row["ours_pool_mib"] = (after - before) / 2**20
        if where:
            theirs = timings["pytorch"]["median_s"]
            row.update(theirs_ms=theirs * 1e3, ratio=mine / theirs)
            row["theirs_fraction_of_peak"] = flops / theirs / 1e12 / peak.get("torch_tflops", float("nan"))
            if where == "cuda":
                row["theirs_reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20
        rows.append(row)
        print(
            f"  training step {row['config']}: ours {row['ours_ms']:.2f} ms, "
            f"ratio {row.get('ratio', float('nan')):.2f}",
            flush=True,
        )
        del runners
    base = [row for row in rows if row["config"] == "base/mha"]
    # the target: the base configuration's step at most PyTorch eager's time (checked, not required, to pass)
    return {
        "ok": True,
        "peak": peak,
        "torch_device": where,
        "base_at_most_pytorch": (base[0]["ratio"] <= 1.0) if base and "ratio" in base[0] else None,
        "rows": rows,
    }


class TheirsOnDevice(translate_bench.Theirs):
    def __init__(self, directory: Path, where: str) -> None:
        super().__init__(directory, threads=os.cpu_count() or 1)
        self.where = where
        self.model = self.model.to(where)

    def translate(self, src: list[list[int]], batch: int, beams: int, new_tokens: int) -> list[list[int]]:
        torch, out = self.torch, []
        with torch.inference_mode():
            for ids, mask in translate_bench.batches(src, batch):
                generated = self.model.generate(
                    input_ids=torch.tensor(ids, device=self.where),
                    attention_mask=torch.tensor(mask[:, 0, 0], device=self.where),
                    **translate_bench.generate_options(beams, new_tokens),
                )
                out += [translate_bench.up_to_end(row[1:]) for row in generated.cpu().numpy().tolist()]
        return out


def section_translate(device: Device, args: argparse.Namespace) -> dict:
    where = torch_device(device)
    if where is None:
        return {"ok": False, "error": "PyTorch and transformers are needed for this section"}
    if device.dry_run:  # opus-mt-en-de's vocabulary, a tiny body
        translate_bench.SHAPES.update(
            d_model=16, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=32, decoder_ffn_dim=32
        )
    sentences, batch, new_tokens = (4, 2, 6) if device.dry_run else (64, 16, 40)
    directory = Path(tempfile.mkdtemp(prefix="opus-mt-shapes-"))
    translate_bench.write_model(directory)
    device.free_pool()
    before = device.pool_bytes()
    ours = translate_bench.Ours(directory)
    if where == "cuda":
        import torch

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    theirs = TheirsOnDevice(directory, where)
    src = translate_bench.sources(sentences)
    rows = []
    for beams in (1, 4):
        for contender in (theirs, ours):
            contender.translate(src[:2], 2, beams, 2)  # warm up
        times: dict[str, list[float]] = {"ours": [], "theirs": []}
        outputs: dict[str, list] = {}
        for _ in range(1 if device.dry_run else 2):
            for name, contender in (("theirs", theirs), ("ours", ours)):
                start = time.perf_counter()
                outputs[name] = contender.translate(src, batch, beams, new_tokens)
                times[name].append(time.perf_counter() - start)
        differ = [i for i, (a, b) in enumerate(zip(outputs["ours"], outputs["theirs"])) if a != b]
        ours_s, theirs_s = statistics.median(times["ours"]), statistics.median(times["theirs"])
        rows.append(
            {
                "beams": beams,
                "ours_s": ours_s,
                "theirs_s": theirs_s,
                "ratio": ours_s / theirs_s,
                "tokens": sum(map(len, outputs["ours"])),
                "sentences_differing": differ,
                "first_difference": first_difference(outputs, differ),
            }
        )
        print(
            f"  translate beams {beams}: ours {ours_s:.2f} s, theirs {theirs_s:.2f} s, differ {len(differ)}",
            flush=True,
        )
    result: dict[str, Any] = {
        "ok": all(not row["sentences_differing"] for row in rows),
        "sentences": sentences,
        "batch": batch,
        "new_tokens": new_tokens,
        "rows": rows,
    }
    after = device.pool_bytes()
    if after is not None and before is not None:
        result["ours_pool_mib"] = (after - before) / 2**20
    if where == "cuda":
        result["theirs_reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20
    return result


def first_difference(outputs: dict[str, list], differ: list[int]) -> dict | None:
    if not differ:
        return None
    a, b = outputs["ours"][differ[0]], outputs["theirs"][differ[0]]
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return {"sentence": differ[0], "token": at, "ours": a[at : at + 3], "theirs": b[at : at + 3]}


SECTIONS: dict[str, Callable[[Device, argparse.Namespace], dict]] = {
    "environment": section_environment,
    "cupy_tests": section_cupy_tests,
    "kernels_on_device": section_kernels_on_device,
    "cpu_vs_gpu": section_cpu_vs_gpu,
    "training_step": section_training_step,
    "translate": section_translate,
    "numbers_en_fr": section_numbers_en_fr,
    "fused_kernels": gpu_fused_check.section_fused_kernels,
    "launch_counts": lambda device, args: gpu_fused_check.section_launch_counts(
        device, args, OursOnDevice, torch_device(device)
    ),
}


class Deadline(Exception):
    pass


# the code a deadline may stop: this checkout's (the package, benchmarks/, the tests' stand-in) and the
# package wherever it is installed
OURS = (str(ROOT), str(Path(nt.__file__).resolve().parent))
RETRY_S = 0.01  # how soon a deadline that fell in another library's code is tried again


def _deadline(signum: int, frame: Any) -> None:
    """Stop the section, where the Python code running is ours. Where it is another library's (PyTorch's
    Python, reached from its C++), an exception could unwind native frames that cannot carry one, which
    aborts the whole process: the deadline is tried again a moment later, once that code has returned."""
    if frame is not None and not str(Path(frame.f_code.co_filename).resolve()).startswith(OURS):
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)
        return
    raise Deadline


def run_section(name: str, device: Device, args: argparse.Namespace, seconds: float | None) -> dict:
    """One section's report; its failure or error is its report, and the next section still runs."""
    if seconds is not None:
        signal.signal(signal.SIGALRM, _deadline)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        section = SECTIONS[name](device, args)
        section["status"] = "passed" if section.pop("ok") else "FAILED"
    except Deadline:
        section = {"status": "STOPPED (deadline)", "traceback": traceback.format_exc().splitlines()[-6:]}
    except Exception:
        section = {"status": "ERROR", "traceback": traceback.format_exc().splitlines()[-12:]}
        print("\n".join(section["traceback"]), flush=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        backend.set_backend(device.xp)
    return section


def commit() -> str:
    if os.environ.get("GPU_CHECK_COMMIT"):
        return os.environ["GPU_CHECK_COMMIT"]
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_report(out: Path, report: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    lines = [f"# GPU check: {report['title']}", ""]
    lines += ["| section | result | seconds |", "| --- | --- | --- |"]
    for name, section in report["sections"].items():
        state = section.get("status", "")
        lines.append(f"| {name} | {state} | {section.get('seconds', 0):.1f} |")
    for name, section in report["sections"].items():
        lines += ["", f"## {name}", "", "```", json.dumps(section, indent=1, default=str), "```"]
    (out / "report.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="gpu-check", help="the report's folder")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: the CuPy stand-in, tiny sizes")
    parser.add_argument("--sections", nargs="*", choices=list(SECTIONS), default=list(SECTIONS))
    parser.add_argument("--repeats", type=int, default=10, help="timed training steps per contender")
    parser.add_argument("--deadline-s", type=float, default=None, help="the whole run's time limit")
    args = parser.parse_args()
    out = Path(args.out)
    if not args.dry_run:
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() < 1:
                raise RuntimeError("no CUDA GPU is visible")
        except Exception as error:  # ImportError, or CUDA's own errors
            print(
                f"no GPU: {error}; nothing checked (python benchmarks/gpu_check.py --dry-run proves the script)"
            )
            return 2
    device = Device(args.dry_run)
    title = (
        "no GPU: a dry run on the CuPy stand-in (proves the script, not a GPU)"
        if args.dry_run
        else "CuPy on a CUDA GPU"
    )
    print(f"GPU check: {title}", flush=True)
    report: dict[str, Any] = {"title": title, "sections": {}}
    started = time.perf_counter()
    for name in args.sections:
        start = time.perf_counter()
        left = None if args.deadline_s is None else args.deadline_s - (start - started)
        if left is not None and left <= 0:
            section = {"status": "SKIPPED (deadline)"}
        else:
            section = run_section(name, device, args, left)
        section["seconds"] = time.perf_counter() - start
        report["sections"][name] = section
        print(f"{name}: {section['status']} ({section['seconds']:.1f} s)", flush=True)
        write_report(out, report)  # after every section, so a run cut short still leaves its report
    failed = [name for name, section in report["sections"].items() if section["status"] != "passed"]
    print(
        f"report: {out / 'report.md'}; "
        + (f"not passed: {', '.join(failed)}" if failed else "every section passed")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
