"""Hostile but realistic input, case by case: what a user tries, and what must happen.

Every case runs the command line (in this process, through ``cli.main``) or the Python API, and
is sorted into one of the columns of the hostile-input report:

- clean: refused with one line naming the argument (an exception of the expected type naming
  it, from the API), or done right when it is legitimate;
- traceback: an exception escaped the command, or the refusal does not name what is wrong;
- wrong: accepted when it must be refused, or done but with a wrong result;
- loss: a file the user saved was changed or removed;
- hang: still running after its time limit.

``python tests/support/hostile_cases.py`` prints the table; tests/translator/test_hostile_report.py requires every
case to be clean.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.util
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from learn_mistakes import BLOCKS_ON_THE_TEXTBOOK
from marian_files import write_model

import numpy_transformer as nt
from numpy_transformer.machine import OPENBLAS_TIMEOUT, OPENBLAS_TIMEOUT_VAR
from numpy_transformer.optim import Adam, clip_grad_norm
from numpy_transformer.translator import tokenizers as data
from numpy_transformer.translator.cli import main
from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.decoding import beam_search, greedy_decode
from numpy_transformer.translator.run.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from numpy_transformer.translator.run.importing import import_run
from numpy_transformer.translator.tokenizers import BPETokenizer

COLUMNS = ("clean", "traceback", "wrong", "loss", "hang")
TIME_LIMIT = 60  # seconds per case; every case takes under a few
TINY = [
    "--d-model",
    "16",
    "--layers",
    "1",
    "--heads",
    "2",
    "--d-ff",
    "16",
    "--batch-size",
    "8",
    "--steps",
    "2",
    "--eval-every",
    "2",
    "--eval-size",
    "4",
    "--log-every",
    "1",
    "--no-progress",
    "--show",
    "0",
]


MPIEXEC = shutil.which(
    "mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
)
HAVE_MPI = MPIEXEC is not None and importlib.util.find_spec("mpi4py") is not None
MPI_TIME_LIMIT = TIME_LIMIT - 15  # inside the case's: the ranks are ended here, never left waiting
FAILING_RANK = Path(__file__).with_name("mpi_failing_rank.py")  # the command with one rank made to fail


class Hang(Exception):
    pass


@dataclass
class Case:
    area: str
    name: str
    run: Callable[[Path], tuple[int, str]]  # (exit code, stderr) of the command, or of the API call
    refused: bool  # True: must be refused, naming every string in ``names``; False: must succeed
    names: tuple[str, ...] = ()
    check: Callable[[Path], bool] | None = None  # a legitimate case's result is right
    keeps: str | None = None  # a file of the workspace the case must leave untouched


def cli(*argv: str) -> Callable[[Path], tuple[int, str]]:
    """Run the command with ``{ws}`` in the arguments replaced by the workspace."""

    def run(ws: Path) -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                code = main([arg.replace("{ws}", str(ws)) for arg in argv])
            except SystemExit as exit:  # the parser refuses a flag's value
                code = exit.code
        return code, err.getvalue()

    return run


def mpi(*argv: str, fail: tuple[int, str] | None = None) -> Callable[[Path], tuple[int, str]]:
    """Run the command under ``mpiexec -n 2`` (``{ws}`` replaced by the workspace); ``fail``: (rank,
    failure) makes that rank fail (tests/support/mpi_failing_rank.py). Ranks still running after
    MPI_TIME_LIMIT are a hang, and every process of the run is ended."""

    def run(ws: Path) -> tuple[int, str]:
        assert MPIEXEC is not None
        program = [str(FAILING_RANK), str(fail[0]), fail[1]] if fail else ["-m", "numpy_transformer"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "PMIX_"))}
        command = [
            MPIEXEC,
            "-n",
            "2",
            sys.executable,
            *program,
            *(arg.replace("{ws}", str(ws)) for arg in argv),
        ]
        with subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,  # its own process group, to end every rank with it
        ) as process:
            try:
                _, err = process.communicate(timeout=MPI_TIME_LIMIT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
                raise Hang() from None
        return process.returncode, err

    return run


def api(call: Callable[[Path], object], errors: tuple[type, ...] = (ValueError, TypeError)) -> Callable:
    """Run an API call: an exception of ``errors`` is a refusal (code 2, its message); any other escapes."""

    def run(ws: Path) -> tuple[int, str]:
        try:
            call(ws)
        except errors as error:
            return 2, f"{type(error).__name__}: {error}"
        return 0, ""

    return run


def tiny_model(**overrides: object) -> nt.Transformer:
    return nt.build_transformer(10, 6, 8, 8, **{"d_model": 8, "N": 1, "h": 2, "d_ff": 16, **overrides})


def ids(*shape: int) -> np.ndarray:
    return np.ones(shape, dtype=np.int64)


def write(relative: str, text: str | bytes) -> Callable[[Path], Path]:
    def make(ws: Path) -> Path:
        path = ws / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return path

    return make


def hint_printed(folder: str, name: str) -> Callable[[Path], tuple[int, str]]:
    """learn hint on ``ws/folder``'s workbook, its output kept in ``ws/folder.out`` for the case's check."""

    def run(ws: Path) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["learn", "hint", str(ws / folder / "my_backprop.py"), name])
        (ws / f"{folder}.out").write_text(out.getvalue())
        return code, err.getvalue()

    return run


def layer_norm_cache() -> Any:
    return nt.functional.layer_norm_forward(np.ones((2, 3, 4)) * np.arange(4), np.ones(4), np.zeros(4))[1]


def textbook_of(cache: Any, dout: Any) -> Any:
    from numpy_transformer.workbook import textbook

    return textbook(cache, dout)


def then(*steps: Callable[[Path], object]) -> Callable[[Path], tuple[int, str]]:
    """Prepare the workspace with all but the last step, then run the last one."""

    def run(ws: Path) -> tuple[int, str]:
        for step in steps[:-1]:
            step(ws)
        return steps[-1](ws)

    return run


def damaged_checkpoint(damage: Callable[[dict, dict], None]) -> Callable[[Path], Path]:
    def make(ws: Path) -> Path:
        arrays, meta = load_checkpoint(ws / "run" / "model.npz")
        damage(arrays, meta)
        return save_checkpoint(ws / "damaged" / "model.npz", arrays, meta)

    return make


def pickled_checkpoint(ws: Path) -> None:
    (ws / "pickled").mkdir(exist_ok=True)
    np.savez(ws / "pickled" / "model.npz", param_x=np.array([object()], dtype=object))


def truncated_checkpoint(ws: Path) -> None:
    data = (ws / "run" / "model.npz").read_bytes()
    write("truncated/model.npz", data[: len(data) // 2])(ws)


def log_lines(ws: Path) -> list[str]:
    return (ws / "run" / "log.jsonl").read_text().splitlines()


def corpus(n: int = 60, extra: str = "") -> str:
    return "".join(f"w{i} x{i % 7}\tv{i} y{i % 5}\n" for i in range(n)) + extra


def mask_of(model_call: Callable[[nt.Transformer, np.ndarray], object]) -> Callable[[Path], object]:
    return lambda ws: model_call(tiny_model(), ids(1, 3))


def load_half_bad(ws: Path) -> None:
    model = tiny_model()
    before = {name: value.copy() for name, value in model.state_dict().items()}
    state = model.state_dict()
    state[sorted(state)[-1]] = np.zeros((3, 3))
    try:
        model.load_state_dict(state)
    finally:
        if any(not np.array_equal(before[name], value) for name, value in model.state_dict().items()):
            raise AssertionError("load_state_dict changed weights before refusing")


def logged_once(directory: str) -> Callable[[Path], bool]:
    """The run in ``directory`` saved its model and logged each step once (one writer among the ranks)."""

    def check(ws: Path) -> bool:
        records = [json.loads(line) for line in (ws / directory / "log.jsonl").read_text().splitlines()]
        steps = [record["step"] for record in records if "split" not in record]
        return (ws / directory / "model.npz").exists() and steps == [1, 2]

    return check


def diverging_run(ws: Path) -> tuple[int, str]:
    code, err = cli(
        "train",
        "--task",
        "copy",
        *TINY,
        "--steps",
        "30",
        "--lr",
        "1e30",
        "--schedule",
        "constant",
        "--clip",
        "0",
        "--out",
        "{ws}/diverged",
    )(ws)
    saved = ws / "diverged" / "model.npz"
    if saved.exists() and not all(
        np.isfinite(a).all() for a in load_checkpoint(saved)[0].values() if a.dtype.kind == "f"
    ):
        return 0, "a non-finite checkpoint was written"
    return code, err


def averaged_is_the_mean(ws: Path) -> bool:
    """The average of kept23's step files equals their float64 mean, cast back: a running sum adds
    them in the same order as the sum of all at once."""
    loaded = [load_checkpoint(path)[0] for path in sorted((ws / "kept23").glob("step-*.npz"))]
    averaged = load_checkpoint(ws / "kept23" / "average.npz")[0]
    return len(loaded) == 3 and all(
        np.array_equal(value, (sum(a[name].astype(np.float64) for a in loaded) / 3).astype(value.dtype))
        for name, value in averaged.items()
        if name.startswith("param/")
    )


def no_repeat_unigrams(ws: Path) -> tuple[int, str]:
    """With n = 1 the 9 tokens of a 12-token vocabulary run out: what is left must be <eos>, never
    <pad> or <bos> (here made the most likely tokens), with greedy decoding and beam search."""
    model = nt.build_transformer(12, 12, 8, 30, d_model=16, N=1, h=2, d_ff=16, seed=4)
    bias = model.projection_layer.proj.bias.data
    bias[2], bias[0], bias[1] = -1e4, 50.0, 50.0
    for decode in (greedy_decode, lambda *a, **k: beam_search(*a, beam_width=3, **k)):
        for row in decode(model, np.array([[3, 4, 5, 6]]), None, 24, 1, 2, no_repeat_ngram=1).tolist():
            sentence = row[: row.index(2)] if 2 in row else row
            if 2 not in row or {0, 1} & set(sentence) or len(set(sentence)) != len(sentence):
                return 1, f"decoded {row}"
    return 0, ""


def full_disk(run: Callable[[Path], tuple[int, str]]) -> Callable[[Path], tuple[int, str]]:
    """Run with every np.savez failing as a full disk does (ENOSPC)."""

    def wrapped(ws: Path) -> tuple[int, str]:
        real = np.savez

        def savez(*args: object, **kwargs: object) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        np.savez = savez
        try:
            return run(ws)
        finally:
            np.savez = real

    return wrapped


def full_disk_for_pictures(
    run: Callable[[Path], tuple[int, str]], after: int = 0, kept: tuple[str, bytes] | None = None
) -> Callable[[Path], tuple[int, str]]:
    """Run with matplotlib's savefig writing part of a picture, then failing as a full disk does
    (ENOSPC), once ``after`` pictures were written; ``kept``: (a file of the workspace, its bytes),
    written first, which must be the same after (exit 1 and why, where it is not)."""

    def wrapped(ws: Path) -> tuple[int, str]:
        from matplotlib.figure import Figure

        real, saved = Figure.savefig, []

        def savefig(self: Figure, *args: Any, **kwargs: Any) -> None:
            if len(saved) < after:
                saved.append(1)
                return real(self, *args, **kwargs)
            target, half = args[0], b"\x89PNG half a picture"
            if isinstance(target, (str, Path)):  # matplotlib opens the file itself
                Path(target).write_bytes(half)
            else:
                target.write(half)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        if kept is not None:
            write(*kept)(ws)
        Figure.savefig = savefig
        try:
            code, err = run(ws)
        finally:
            Figure.savefig = real
        if kept is not None and (ws / kept[0]).read_bytes() != kept[1]:
            return 1, f"{kept[0]} was changed: {err}"
        return code, err

    return wrapped


def no_raw_escape(run: Callable[[Path], tuple[int, str]]) -> Callable[[Path], tuple[int, str]]:
    """Run, and fail (exit 1) where standard error holds a raw ESC, which a terminal would obey."""

    def checked(ws: Path) -> tuple[int, str]:
        code, err = run(ws)
        return (1, f"a raw ESC on standard error: {err!r}") if "\x1b" in err else (code, err)

    return checked


def command(*argv: str, stdin: bytes | None = None) -> subprocess.Popen:
    """The command in a process of its own (standard input and output are real pipes), this
    checkout's package first on its path; ``{ws}`` in ``argv`` is replaced by the caller."""
    env = {**os.environ, "PYTHONPATH": str(Path(nt.__file__).resolve().parents[1])}
    return subprocess.Popen(
        [sys.executable, "-m", "numpy_transformer", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def piped(text: bytes, *argv: str) -> Callable[[Path], tuple[int, str]]:
    """Run the command with ``text`` on its standard input: (exit code, standard error)."""

    def run(ws: Path) -> tuple[int, str]:
        process = command(*[arg.replace("{ws}", str(ws)) for arg in argv])
        try:
            _, err = process.communicate(text)
        finally:
            process.kill()
            process.wait()
        return process.returncode, err.decode(errors="replace")

    return run


def line_by_line(ws: Path) -> tuple[int, str]:
    """translate answers each line while its input stays open: one line written, its translation read
    back before the next is written (a hang is caught by the case's time limit)."""
    process = command("translate", "--checkpoint", str(ws / "run"))
    try:
        for sentence in (b"abc", b"cab"):
            process.stdin.write(sentence + b"\n")
            process.stdin.flush()
            if not process.stdout.readline().startswith(sentence + b"\t"):
                return 1, "no translation of the line came back"
        process.stdin.close()
        return process.wait(), process.stderr.read().decode(errors="replace")
    finally:
        process.kill()
        process.wait()


def reader_gone(ws: Path) -> tuple[int, str]:
    """translate into a reader that stops after one line: exit code 141, nothing on standard error
    but the note naming the checkpoint the run directory stands for (said before any work)."""
    process = command("translate", "--checkpoint", str(ws / "run"), *["abc"] * 5000)  # more than a pipe holds
    try:
        first = process.stdout.readline()
        process.stdout.close()
        code, err = process.wait(), process.stderr.read().decode(errors="replace")
    finally:
        process.kill()
        process.wait()
    said = [line for line in err.splitlines() if ": note: read " not in line]
    if code == 141 and not said and first.startswith(b"abc\t"):
        return 0, ""
    return code or 1, err or f"exit code {code}"


def interrupted_while_learning_subwords(ws: Path) -> tuple[int, str]:
    """Ctrl-C while the library learns the subwords: exit code 130, one line, nothing left in --out."""
    learn, answered = BPETokenizer.train.__func__, threading.Event()

    def train(cls: type, texts: Any, vocab_size: int) -> BPETokenizer:
        def then_ctrl_c() -> Any:
            os.kill(os.getpid(), signal.SIGINT)
            answered.wait(TIME_LIMIT)  # a large corpus: still learning when Ctrl-C comes
            yield from texts

        return learn(cls, then_ctrl_c(), vocab_size)

    data.BPETokenizer.train = classmethod(train)
    try:
        code, err = cli("train", "--data", "{ws}/corpus.tsv", *TINY, "--out", "{ws}/c23-ctrl-c")(ws)
    finally:
        data.BPETokenizer.train = classmethod(learn)
        answered.set()  # the learning left behind ends now instead of slowing the cases after it
    if (ws / "c23-ctrl-c").exists():
        return 0, "a directory was left in --out"
    return code if code == 130 else 0, err


def marian(name: str = "opus-mt", change: Callable[[Path], object] | None = None) -> Callable[[Path], Path]:
    """A tiny Marian model directory in the Hugging Face format at ``ws/name`` (tests/support/marian_files.py),
    then ``change`` done to it: what a user downloads, or a broken copy of it."""

    def make(ws: Path) -> Path:
        path = ws / name
        if not path.exists():
            write_model(path)
            if change is not None:
                change(path)
        return path

    return make


def json_edit(name: str, **changes: object) -> Callable[[Path], None]:
    def change(directory: Path) -> None:
        path = directory / name
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))

    return change


def pickled_only(directory: Path) -> None:
    (directory / "model.safetensors").rename(directory / "pytorch_model.bin")


def imported_translates(ws: Path) -> bool:
    """The imported run translates, and holds the Marian settings in its config.toml."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["translate", "--checkpoint", str(ws / "imported"), "The café is open."])
    toml = (ws / "imported" / "config.toml").read_text()
    return code == 0 and out.getvalue().startswith("The café is open.\t") and 'activation = "silu"' in toml


FINE_TUNE = ["--steps", "2", "--eval-every", "2", "--eval-size", "4", "--batch-size", "8", "--no-progress"]


# -- issue: trust what says passed (the gradient checker, the importer, the work a run may remove) -----


def untied(directory: Path) -> None:
    """The Marian model made untied (tie_word_embeddings false): its own embeddings and lm_head."""
    from safetensors.numpy import load_file, save_file

    path = directory / "model.safetensors"
    tensors = load_file(str(path))
    shared = tensors["model.shared.weight"]
    rng = np.random.default_rng(7)
    for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
        tensors[name] = (shared + rng.standard_normal(shared.shape).astype(shared.dtype)).astype(shared.dtype)
    save_file(tensors, str(path))
    json_edit("config.json", tie_word_embeddings=False)(directory)


def untied_is_read(ws: Path) -> bool:
    """The imported untied model's projection is the file's lm_head, not the shared matrix."""
    from safetensors.numpy import load_file

    tensors = load_file(str(ws / "m-untied" / "model.safetensors"))
    arrays, meta = load_checkpoint(ws / "imp-untied" / "model.npz")
    return meta["model"]["tie_embeddings"] is False and np.allclose(
        arrays["param/projection_layer.proj.weight"], tensors["lm_head.weight"]
    )


def tensors_edit(change: Callable[[dict], dict]) -> Callable[[Path], None]:
    def edit(directory: Path) -> None:
        from safetensors.numpy import load_file, save_file

        path = directory / "model.safetensors"
        save_file(change(load_file(str(path))), str(path))

    return edit


def in_bfloat16(directory: Path) -> None:
    """model.safetensors rewritten with every weight in bfloat16 (float32's upper half)."""
    path = directory / "model.safetensors"
    header_length = int.from_bytes(path.read_bytes()[:8], "little")
    header = json.loads(path.read_bytes()[8 : 8 + header_length])
    data = path.read_bytes()[8 + header_length :]
    out_header, chunks, offset = {}, [], 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, stop = entry["data_offsets"]
        values = np.frombuffer(data[start:stop], dtype="<f4")
        half = (values.view(np.uint32) >> 16).astype("<u2").tobytes()
        out_header[name] = {
            "dtype": "BF16",
            "shape": entry["shape"],
            "data_offsets": [offset, offset + len(half)],
        }
        chunks.append(half)
        offset += len(half)
    text = json.dumps(out_header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(chunks))


def overwrite_keeps_the_users_files(command: str) -> Callable[[Path], tuple[int, str]]:
    """A run (train, or an import) in a directory, the user's own step-0000005-mynote.npz put beside
    it, then the same command with --overwrite: (exit code, stderr); a removed note is a loss."""

    def run(ws: Path) -> tuple[int, str]:
        out = ws / f"mine-{command}"
        argv = (
            ["train", "--task", "copy", *TINY, "--out", str(out)]
            if command == "train"
            else ["import", str(marian()(ws)), "--out", str(out)]
        )
        code, err = cli(*argv)(ws)
        if code != 0:
            return code, err
        (out / "step-0000005-mynote.npz").write_bytes(b"the user's notes")
        code, err = cli(*argv, "--overwrite")(ws)
        if (out / "step-0000005-mynote.npz").read_bytes() != b"the user's notes":
            return 1, "the user's step-0000005-mynote.npz was removed"
        return code, err

    return run


def toml_round_trip(ws: Path) -> bool:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the package reads its TOML with tomli there (setup.cfg)
        import tomli as tomllib

    text = (ws / "emoji-run" / "config.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)["train"]["data"] == str((ws / "😀 pairs.tsv").resolve())


def unseen_characters_are_spelled(ws: Path) -> tuple[int, str]:
    """A 30-pair BPE run, then translate text of characters it never saw: no <unk>, no warning."""
    write("small.tsv", corpus(30))(ws)
    code, err = cli("train", "--data", "{ws}/small.tsv", *TINY, "--out", "{ws}/bpe30")(ws)
    if code != 0:
        return code, err
    code, err = cli("translate", "--checkpoint", "{ws}/bpe30", "Zoo ß 日本 7", "\ufeffbom")(ws)
    return (1 if "warning" in err else code), err


def cjk_lengths_are_tokens(ws: Path) -> bool:
    meta = load_checkpoint(ws / "cjk" / "model.npz")[1]
    return meta["model"]["src_seq_len"] <= 60


def gradient_not_returned(ws: Path) -> None:
    from numpy_transformer.gradient_checking import assert_gradients

    x, y = np.ones(3), np.full(3, 2.0)
    assert_gradients(lambda x, y: (x * y, (x, y)), lambda dout, cache: dout * cache[1], {"x": x, "y": y})


def textbook_loss_is_checked(ws: Path) -> None:
    from numpy_transformer.functional import cross_entropy_backward, cross_entropy_forward
    from numpy_transformer.gradient_checking import assert_gradients

    logits = np.random.default_rng(0).standard_normal((2, 3, 5))
    assert_gradients(cross_entropy_forward, cross_entropy_backward, {"logits": logits, "targets": ids(2, 3)})


def cjk_corpus() -> str:
    unspaced = "".join(chr(0x4E00 + i * 7919 % 20000) for i in range(1500))
    return corpus(40) + f"{unspaced}\tlong\n"


ISSUE_CASES = [
    Case(
        "import",
        "import an untied Marian model (tie_word_embeddings false)",
        then(marian("m-untied", untied), cli("import", "{ws}/m-untied", "--out", "{ws}/imp-untied")),
        False,
        check=untied_is_read,
    ),
    Case(
        "import",
        "import a model of 2 layers under a config.json of 1",
        then(
            marian("m-fewer", json_edit("config.json", encoder_layers=1, decoder_layers=1)),
            cli("import", "{ws}/m-fewer", "--out", "{ws}/imp-fewer"),
        ),
        True,
        ("model.safetensors", "has no place for", "encoder_layers 1"),
    ),
    Case(
        "import",
        "import a model with an extra layernorm_embedding",
        then(
            marian(
                "m-extra",
                tensors_edit(
                    lambda t: {**t, "model.encoder.layernorm_embedding.weight": np.ones(16, np.float32)}
                ),
            ),
            cli("import", "{ws}/m-extra", "--out", "{ws}/imp-extra"),
        ),
        True,
        ("model.safetensors", "has no place for", "layernorm_embedding"),
    ),
    Case(
        "import",
        "import a config.json of d_model 1e6",
        then(
            marian("m-wide", json_edit("config.json", d_model=10**6)),
            cli("import", "{ws}/m-wide", "--out", "{ws}/imp-wide"),
        ),
        True,
        ("model.safetensors", "do not fit config.json", "d_model 1000000"),
    ),
    Case(
        "import",
        "import a config.json of 100,000 layers",
        then(
            marian("m-deep", json_edit("config.json", encoder_layers=100_000, decoder_layers=100_000)),
            cli("import", "{ws}/m-deep", "--out", "{ws}/imp-deep"),
        ),
        True,
        ("model.safetensors", "holds no tensor", "encoder_layers 100000"),
    ),
    Case(
        "import",
        "import a config.json of max_position_embeddings 1e9",
        then(
            marian("m-long", json_edit("config.json", max_position_embeddings=10**9)),
            cli("import", "{ws}/m-long", "--out", "{ws}/imp-long"),
        ),
        True,
        ("config.json", "max_position_embeddings is 1000000000", "at most"),
    ),
    Case(
        "import",
        "import a config.json of FFN 1e8",
        then(
            marian("m-ffn", json_edit("config.json", encoder_ffn_dim=10**8, decoder_ffn_dim=10**8)),
            cli("import", "{ws}/m-ffn", "--out", "{ws}/imp-ffn"),
        ),
        True,
        ("model.safetensors", "do not fit config.json", "encoder_ffn_dim 100000000"),
    ),
    Case(
        "import",
        "import bfloat16 weights",
        then(marian("m-bf16", in_bfloat16), cli("import", "{ws}/m-bf16", "--out", "{ws}/imp-bf16")),
        False,
        check=lambda ws: load_checkpoint(ws / "imp-bf16" / "model.npz")[1]["model"]["d_model"] == 16,
    ),
    Case(
        "import",
        "import a config.json of d_model 16.5",
        then(
            marian("m-half", json_edit("config.json", d_model=16.5)),
            cli("import", "{ws}/m-half", "--out", "{ws}/imp-half"),
        ),
        True,
        ("config.json", "d_model is 16.5", "whole number"),
    ),
    Case(
        "import",
        "import a config.json of d_model null",
        then(
            marian("m-null", json_edit("config.json", d_model=None)),
            cli("import", "{ws}/m-null", "--out", "{ws}/imp-null"),
        ),
        True,
        ("config.json", "d_model is None", "whole number"),
    ),
    Case(
        "run dir",
        "train --overwrite beside the user's step-0000005-mynote.npz",
        overwrite_keeps_the_users_files("train"),
        False,
    ),
    Case(
        "run dir",
        "import --overwrite beside the user's step-0000005-mynote.npz",
        overwrite_keeps_the_users_files("import"),
        False,
    ),
    Case(
        "run dir",
        "train --from RUN --out RUN --overwrite",
        cli("train", "--from", "{ws}/run", "--data", "{ws}/corpus.tsv", "--out", "{ws}/run", "--overwrite"),
        True,
        ("--out", "is the run --from", "starts from"),
        keeps="run/model.npz",
    ),
    Case(
        "flags",
        "a --data path with an emoji: config.toml reads back",
        then(
            write("😀 pairs.tsv", corpus()),
            cli("train", "--data", "{ws}/😀 pairs.tsv", *TINY, "--out", "{ws}/emoji-run"),
        ),
        False,
        check=toml_round_trip,
    ),
    Case(
        "flags",
        "--config of a copy run beside --data",
        cli(
            "train",
            "--config",
            "{ws}/run/config.toml",
            "--data",
            "{ws}/corpus.tsv",
            *TINY,
            "--out",
            "{ws}/cfg-data",
        ),
        False,
    ),
    Case(
        "flags",
        "--config with [[train]]",
        then(
            write("arr.toml", "[[train]]\nsteps = 2\n"),
            cli("train", "--config", "{ws}/arr.toml", "--out", "{ws}/c-arr"),
        ),
        True,
        ("arr.toml", "[[train]] is an array of tables"),
    ),
    Case(
        "flags",
        "--config with a setting outside any table",
        then(
            write("top.toml", "steps = 2\n"), cli("train", "--config", "{ws}/top.toml", "--out", "{ws}/c-top")
        ),
        True,
        ("top.toml", "steps = 2 is a setting outside any table", "[train]"),
    ),
    Case(
        "flags",
        "--config /dev/zero",
        cli("train", "--config", "/dev/zero", "--out", "{ws}/c-zero"),
        True,
        ("/dev/zero", "larger than"),
    ),
    Case(
        "flags",
        "--config in Latin-1",
        then(
            write("latin.toml", "[train]\n# caf\xe9\n".encode("latin-1")),
            cli("train", "--config", "{ws}/latin.toml", "--out", "{ws}/c-latin"),
        ),
        True,
        ("latin.toml:2", "not UTF-8"),
    ),
    Case(
        "flags",
        "--seed -5",
        cli("train", "--task", "copy", *TINY, "--seed", "-5", "--out", "{ws}/c-seed"),
        True,
        ("--seed", "-5"),
    ),
    Case(
        "flags",
        "--resume --time-budget on a run trained with --steps",
        then(
            cli("train", "--task", "copy", *TINY, "--out", "{ws}/r-budget"),
            cli(
                "train",
                "--resume",
                "--time-budget",
                "0.02",
                "--no-progress",
                "--show",
                "0",
                "--out",
                "{ws}/r-budget",
            ),
        ),
        False,
    ),
    Case(
        "translate",
        "--beam-width beside greedy decoding",
        cli("translate", "--checkpoint", "{ws}/run", "--beam-width", "5", "abc"),
        True,
        ("--beam-width 5", "--strategy beam", "greedy"),
    ),
    Case(
        "translate",
        "--temperature beside beam search",
        cli("translate", "--checkpoint", "{ws}/run", "--strategy", "beam", "--temperature", "0.5", "abc"),
        True,
        ("--temperature 0.5", "--strategy sample", "--strategy beam"),
    ),
    Case(
        "translate",
        "--score with an empty translation",
        piped(b"abc\t\n", "translate", "--checkpoint", "{ws}/run", "--score"),
        True,
        ("standard input:1", "missing or empty"),
    ),
    Case(
        "data",
        "50 identical lines",
        then(
            write("same.tsv", "same\tmeme\n" * 50),
            cli("train", "--data", "{ws}/same.tsv", *TINY, "--out", "{ws}/same"),
        ),
        True,
        ("same.tsv", "too few", "49 repeated pairs"),
    ),
    Case(
        "data",
        "characters unseen in training (Zoo ß 日本 7, a BOM) with a 30-pair BPE run",
        unseen_characters_are_spelled,
        False,
    ),
    Case(
        "data",
        "--max-length beside a 1,500-character unspaced CJK line",
        then(
            write("cjk.tsv", cjk_corpus()),
            cli("train", "--data", "{ws}/cjk.tsv", *TINY, "--max-length", "50", "--out", "{ws}/cjk"),
        ),
        False,
        check=cjk_lengths_are_tokens,
    ),
    Case(
        "plot",
        "plot --out into a missing folder",
        cli("plot", "curves", "--run", "{ws}/run", "--out", "{ws}/no-such-folder/curves.png"),
        True,
        ("no-such-folder", "does not exist"),
    ),
    Case(
        "flags",
        "train --from a pre-norm run with --post-norm",
        cli("train", "--from", "{ws}/run", "--data", "{ws}/corpus.tsv", "--post-norm", "--out", "{ws}/ft-pn"),
        True,
        ("--post-norm differs from the model of --from", "which has no --post-norm"),
    ),
    Case(
        "flags",
        "train --from a copy run on a corpus of other characters (warned with the share)",
        then(
            write("other.tsv", "".join(f"zèbre {i}\tquokka {i}\n" for i in range(40))),
            cli(
                "train", "--from", "{ws}/run", "--data", "{ws}/other.tsv", *FINE_TUNE, "--out", "{ws}/ft-unk"
            ),
        ),
        False,
    ),
    Case(
        "import",
        "import a config.json of 2 MiB",
        then(
            marian("m-big", lambda d: (d / "config.json").write_bytes(b" " * (2 << 20) + b"{}")),
            cli("import", "{ws}/m-big", "--out", "{ws}/imp-big"),
        ),
        True,
        ("config.json", "larger than 1 MiB"),
    ),
    Case(
        "testing",
        "assert_gradients with a gradient the backward does not return",
        api(gradient_not_returned, errors=(AssertionError,)),
        True,
        ("no gradient for 'y'",),
    ),
    Case(
        "testing",
        "assert_gradients on the textbook's cross-entropy (a float loss)",
        api(textbook_loss_is_checked),
        False,
    ),
]

# -- streams and saves (a closed pipe, a full disk, a stream of lines of every kind), then extremes ----


def train_into_head(ws: Path) -> tuple[int, str]:
    """train | head -n 1: the reader goes away after the first line; the run stops as after a first
    Ctrl-C, every step it trained saved (model.npz at the last step logged), exit code 141."""
    out = ws / "train-head"
    argv = ["train", "--task", "copy", *TINY, "--steps", "400", "--eval-every", "2", "--out", str(out)]
    process = command(*argv)
    try:
        process.stdout.readline()
        process.stdout.close()
        code, err = process.wait(), process.stderr.read().decode(errors="replace")
    finally:
        process.kill()
        process.wait()
    if not (out / "model.npz").exists():
        return 1, f"exit code {code}, nothing saved: {err[-200:]}"
    logged = max(json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines())
    saved = load_checkpoint(out)[1]["step"]
    if code != 141 or saved != logged or saved >= 400:
        return 1, f"exit code {code}, step {saved} saved of {logged} trained: {err[-200:]}"
    return 0, ""


def disk_full_between_saves(ws: Path) -> tuple[int, str]:
    """The disk fills between the two saves of the first evaluation: step-0000002.npz is whole,
    model.npz failed (exit 1). --resume must continue from the whole one."""
    real, calls = np.savez, []

    def savez(*args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) == 2:  # the second save: model.npz, after step-0000002.npz
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(*args, **kwargs)

    np.savez = savez
    try:
        code, err = cli("train", "--task", "copy", *TINY, "--out", "{ws}/full-between")(ws)
    finally:
        np.savez = real
    if code != 1 or not (ws / "full-between" / "step-0000002.npz").exists():
        return 1, f"the disk-full run ended with {code}: {err}"
    return cli("train", "--resume", "--steps", "4", "--out", "{ws}/full-between", "--no-progress")(ws)


def translated_lines(text: bytes, *argv: str, expect: list[bytes]) -> Callable[[Path], tuple[int, str]]:
    """translate with ``text`` on standard input: (exit code, standard error), or (1, why) when
    standard output is not one line per source of ``expect``, in order, each without a control
    character but the tab between the columns."""

    def run(ws: Path) -> tuple[int, str]:
        process = command("translate", "--checkpoint", *[arg.replace("{ws}", str(ws)) for arg in argv])
        try:
            out, err = process.communicate(text)
        finally:
            process.kill()
            process.wait()
        lines = out.split(b"\n")[:-1]
        if [line.split(b"\t")[0] for line in lines] != expect or any(
            len(line.split(b"\t")) != 2 or any(byte < 32 and byte != 9 for byte in line) for line in lines
        ):
            return 1, f"printed {out[:300]!r}"
        return process.returncode, err.decode(errors="replace")

    return run


def bpe_run_that_says(unit: str) -> Callable[[Path], Path]:
    """A BPE run (every byte a unit) whose model says ``unit`` at every step: its output bias made huge."""

    def make(ws: Path) -> Path:
        out = ws / f"says-{ord(unit[0])}"
        if not out.exists():
            code, err = cli("train", "--data", "{ws}/corpus.tsv", *TINY, "--out", str(out))(ws)
            assert code == 0, err
            arrays, meta = load_checkpoint(out / "model.npz")
            bias = arrays["param/projection_layer.proj.bias"]
            bias[meta["tgt_vocab"].index(unit)] = 1e4
            save_checkpoint(out / "model.npz", arrays, meta)
        return out

    return make


def resume_with_the_budget_spent(ws: Path) -> tuple[int, str]:
    """A run of a 0.01-minute budget, spent, then --resume: said, and nothing trained or rewritten."""
    out = ws / "budget-spent"
    sizes = TINY[: TINY.index("--steps")]
    budget = ["--time-budget", "0.01", "--eval-size", "4", "--no-progress", "--show", "0"]
    code, err = cli("train", "--task", "copy", *sizes, *budget, "--out", str(out))(ws)
    if code != 0:
        return code, err
    saved = (out / "model.npz").read_bytes(), (out / "log.jsonl").read_text()
    code, err = cli("train", "--resume", "--out", str(out), "--no-progress", "--show", "0")(ws)
    if ((out / "model.npz").read_bytes(), (out / "log.jsonl").read_text()) != saved:
        return 1, "the run trained on: model.npz or log.jsonl changed"
    return (1 if "nothing is left to train" not in err else code), err


def loss_with(**settings: object) -> Callable[[Path], object]:
    """loss_and_backward of a tiny model on a (rows, 3) batch, with ``settings`` over the defaults."""

    def call(ws: Path) -> object:
        from numpy_transformer.model import loss_and_backward

        rows = int(settings.pop("rows", 2))  # type: ignore[call-overload]
        batch = ids(rows, 3)
        return loss_and_backward(tiny_model(), batch, batch, None, None, batch, **settings)

    return call


def adamw_step(weight_decay: float) -> Callable[[Path], object]:
    def call(ws: Path) -> object:
        from numpy_transformer.optim import AdamW

        return AdamW(tiny_model(), weight_decay=weight_decay).step()

    return call


def sampled_at(temperature: float) -> Callable[[Path], None]:
    """sample_decode at ``temperature``, warnings as errors: a tiny one gives greedy's translation, a
    huge one spreads the probabilities evenly."""

    def call(ws: Path) -> None:
        import warnings

        from numpy_transformer.translator.decoding import filter_logits, sample_decode

        model, src = nt.build_transformer(10, 12, 8, 8, d_model=16, N=1, h=2, d_ff=16, seed=3), ids(1, 4) * 3
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sampled = sample_decode(model, src, None, 8, 1, 2, temperature=temperature, seed=1)
            spread = filter_logits(np.array([[1.0, 5.0, -3.0]], dtype=np.float32), temperature)
        if temperature < 1 and not np.array_equal(sampled, greedy_decode(model, src, None, 8, 1, 2)):
            raise AssertionError(f"sampled {sampled.tolist()}, not greedy's translation")
        if temperature > 1 and not np.allclose(spread, 1 / 3):
            raise AssertionError(f"probabilities {spread.tolist()} at temperature {temperature}")

    return call


def overlapping_offsets(directory: Path) -> None:
    """model.safetensors rewritten so that the first layer's k_proj.weight points at q_proj.weight's
    bytes: read by offsets alone, the keys would be the queries' weights."""
    path = directory / "model.safetensors"
    raw = path.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + length])
    layer = "model.encoder.layers.0.self_attn"
    header[f"{layer}.k_proj.weight"]["data_offsets"] = header[f"{layer}.q_proj.weight"]["data_offsets"]
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + length :])


def with_memory(available: int, run: Callable[[Path], tuple[int, str]]) -> Callable[[Path], tuple[int, str]]:
    """Run on a machine with ``available`` bytes of memory available, as the package reads it."""

    def wrapped(ws: Path) -> tuple[int, str]:
        from numpy_transformer.translator.huggingface import loading

        real = loading.available_memory
        loading.available_memory = lambda: available
        try:
            return run(ws)
        finally:
            loading.available_memory = real

    return wrapped


def damaged_run(name: str, damage: Callable[[dict, dict], None]) -> Callable[[Path], Path]:
    """A copy of the workspace's run in ``ws/name``, its model.npz damaged by ``damage(arrays, meta)``."""

    def make(ws: Path) -> Path:
        if not (ws / name).exists():
            shutil.copytree(ws / "run", ws / name)
            arrays, meta = load_checkpoint(ws / name / "model.npz")
            damage(arrays, meta)
            save_checkpoint(ws / name / "model.npz", arrays, meta)
        return ws / name

    return make


def config_with(**settings: object) -> Callable[[Path], object]:
    return lambda ws: nt.TransformerConfig(10, 6, 8, 8, **settings)  # type: ignore[arg-type]


LONG_LINE = b" ".join([b"abc"] * 500)
FIVE_LINES = b"abc\ncab\n" + LONG_LINE + b"\nbca\nbb\n"
HUGE_LINE = b"abc\n" + b"a" * (25 << 20) + b"\ncab\n"


def new_trainer() -> Any:
    from numpy_transformer.translator.training import Trainer

    return Trainer.create(
        TrainConfig(task="copy", steps=2, batch_size=4), {"d_model": 16, "N": 1, "h": 2, "d_ff": 16}
    )


def fit_into_the_saved_run(ws: Path) -> None:
    """A new run's fit into the workspace's run: the command line refuses it without --overwrite."""
    new_trainer().fit(ws / "run", progress=False)


def nt_trainer_resume(directory: Path) -> None:
    from numpy_transformer.translator.training import Trainer

    Trainer.resume(directory, steps=4).fit(directory, progress=False)


def into_a_full_device(*argv: str) -> Callable[[Path], tuple[int, str]]:
    """The command with its standard output on /dev/full (every write: no space left)."""

    def run(ws: Path) -> tuple[int, str]:
        env = {**os.environ, "PYTHONPATH": str(Path(nt.__file__).resolve().parents[1])}
        with open("/dev/full", "wb") as full:
            done = subprocess.run(
                [sys.executable, "-m", "numpy_transformer", *(arg.replace("{ws}", str(ws)) for arg in argv)],
                stdout=full,
                stderr=subprocess.PIPE,
                env=env,
                timeout=TIME_LIMIT,
            )
        return done.returncode, done.stderr.decode(errors="replace")

    return run


LATEST_CASES = [
    Case("train", "train | head -n 1: the reader goes away mid-run", train_into_head, False),
    Case(
        "translate",
        "five lines on standard input, the third of 500 words",
        translated_lines(FIVE_LINES, "{ws}/run", expect=[b"abc", b"cab", b"bca", b"bb"]),
        True,
        ("1 of 5 lines of standard input were not translated",),
    ),
    Case(
        "translate",
        "five lines, the third of 500 words, --batch-size 1",
        translated_lines(FIVE_LINES, "{ws}/run", "--batch-size", "1", expect=[b"abc", b"cab", b"bca", b"bb"]),
        True,
        ("1 of 5 lines of standard input were not translated",),
    ),
    Case(
        "translate",
        "a 25 MB line between two others (refused without tokenising it)",
        then(
            bpe_run_that_says("a"),
            translated_lines(HUGE_LINE, "{ws}/says-97", expect=[b"abc", b"cab"]),
        ),
        True,
        ("1 of 3 lines of standard input were not translated",),
    ),
    *(
        Case(
            "translate",
            f"a model that says {unit!r} (a byte-level unit) at every step",
            then(
                bpe_run_that_says(data.BYTE_UNITS[ord(unit)]),
                translated_lines(
                    b"abc\ncab\n", f"{{ws}}/says-{ord(data.BYTE_UNITS[ord(unit)])}", expect=[b"abc", b"cab"]
                ),
            ),
            False,
        )
        for unit in ("\n", "\t", "\r", "\x1b", "\x00")
    ),
    *(
        Case(
            "api",
            f"loss_and_backward({name}={value!r})",
            api(loss_with(**{name: value})),
            True,
            (name, repr(value)),
        )
        for name, value in (
            ("label_smoothing", float("nan")),
            ("label_smoothing", 1.5),
            ("label_smoothing", -1.0),
            ("weight", float("nan")),
            ("weight", "1"),
            ("pad_id", "0"),
        )
    ),
    Case(
        "api",
        "loss_and_backward on a batch of 0 rows",
        api(loss_with(rows=0)),
        True,
        ("labels", "at least one token", "(0, 3)"),
    ),
    *(
        Case(
            "api",
            f"AdamW(weight_decay={value!r})",
            api(adamw_step(value)),
            True,
            ("weight_decay", repr(value)),
        )
        for value in (float("nan"), float("inf"))
    ),
    Case("run dir", "--resume a budgeted run whose budget is spent", resume_with_the_budget_spent, False),
    *(
        Case("decoding", f"sample_decode at temperature {t:g}", api(sampled_at(t)), False)
        for t in (1e-300, 5e-324, 1e300)
    ),
    Case(
        "translate",
        "sources holding ESC, a carriage return and a line separator",
        translated_lines("a\x1b[2Jb\ra\u2028c\n".encode(), "{ws}/run", expect=[b"a\\x1b[2Jb\\ra\\u2028c"]),
        False,
    ),
    Case(
        "run dir",
        "--resume after the disk filled between step-*.npz and model.npz",
        disk_full_between_saves,
        False,
        check=lambda ws: load_checkpoint(ws / "full-between")[1]["step"] == 4,
    ),
    Case(
        "import",
        "import a model.safetensors whose k_proj and q_proj share their bytes",
        then(
            marian("m-overlap", overlapping_offsets), cli("import", "{ws}/m-overlap", "--out", "{ws}/imp12")
        ),
        True,
        ("m-overlap/model.safetensors", "corrupt or not a safetensors file", "invalid offset"),
    ),
    Case(
        "import",
        "import a model.safetensors with bytes after its data",
        then(
            marian("m-trailing", lambda d: (d / "model.safetensors").open("ab").write(b"\x00" * 64)),
            cli("import", "{ws}/m-trailing", "--out", "{ws}/imp13"),
        ),
        True,
        ("m-trailing/model.safetensors", "corrupt or not a safetensors file", "not fully covered"),
    ),
    *(
        Case(
            "flags",
            f"train --bucket-steps {steps} --batch-size {size} (refused before any pair is drawn)",
            cli(
                "train",
                "--task",
                "copy",
                *TINY,
                "--bucket-steps",
                steps,
                "--batch-size",
                size,
                "--out",
                "{ws}/bk",
            ),
            True,
            names,
        )
        for steps, size, names in (
            ("1000000", "8", ("--bucket-steps", "1000000", "[1, 10000]")),
            ("1000000000", "8", ("--bucket-steps", "1000000000", "[1, 10000]")),
            (
                "10000",
                "200",
                ("--bucket-steps 10000", "--batch-size 200", "2000000 pairs", "at most 1000000"),
            ),
        )
    ),
    Case(
        "import",
        "import a model larger than the memory available (refused before it is built)",
        then(marian(), with_memory(1 << 10, cli("import", "{ws}/opus-mt", "--out", "{ws}/imp14"))),
        True,
        ("opus-mt/model.safetensors", "the model needs about", "MiB", "only 0.0 MiB is available"),
    ),
    Case(
        "checkpoint",
        "a checkpoint whose model.d_model says 10**6 (refused before it is built)",
        then(
            damaged_checkpoint(lambda a, m: m["model"].update(d_model=10**6)),
            cli("translate", "--checkpoint", "{ws}/damaged", "abc"),
        ),
        True,
        ("damaged/model.npz", "do not fit", "the file holds 5,070 weights", "d_model 1000000"),
    ),
    *(
        Case(
            "checkpoint",
            f"train --resume a run whose metadata says {field}: {value!r}",
            then(
                damaged_run(f"meta{i}", lambda a, m, f=field, v=value: m.update({f: v})),
                cli("train", "--resume", "--steps", "4", "--no-progress", "--out", f"{{ws}}/meta{i}"),
            ),
            True,
            (f"meta{i}/model.npz", f"'{field}'", repr(value)),
        )
        for i, (field, value) in enumerate(
            (("ranks", None), ("ranks", 0), ("lr_scale", "1"), ("time_spent_s", float("nan")))
        )
    ),
    Case(
        "checkpoint",
        "translate --checkpoint a file of random bytes",
        then(
            write("random.npz", np.random.default_rng(0).bytes(4000)),
            cli("translate", "--checkpoint", "{ws}/random.npz", "abc"),
        ),
        True,
        ("random.npz", "not a checkpoint", "zip archive"),
    ),
    Case(
        "checkpoint",
        "translate --checkpoint /dev/null",
        cli("translate", "--checkpoint", "/dev/null", "abc"),
        True,
        ("/dev/null", "not a regular file"),
    ),
    Case(
        "import",
        "import a directory whose model.safetensors is a directory",
        then(
            marian(
                "m-dir", lambda d: ((d / "model.safetensors").unlink(), (d / "model.safetensors").mkdir())
            ),
            cli("import", "{ws}/m-dir", "--out", "{ws}/imp15"),
        ),
        True,
        ("m-dir/model.safetensors", "not a regular file"),
    ),
    Case(
        "flags",
        "train --config a file that starts with a byte-order mark",
        then(
            write("bom.toml", "\ufeff[train]\nsteps = 3\n"),
            cli(
                *("train", "--config", "{ws}/bom.toml", "--task", "copy", *TINY[: TINY.index("--steps")]),
                *(
                    "--eval-every",
                    "3",
                    "--eval-size",
                    "4",
                    "--no-progress",
                    "--show",
                    "0",
                    "--out",
                    "{ws}/bom-run",
                ),
            ),
        ),
        False,
        check=lambda ws: load_checkpoint(ws / "bom-run")[1]["step"] == 3,
    ),
    # -- the model's configuration and the decoding flags --------------------------------------------------
    *(
        Case("api", f"TransformerConfig({name}={value!r})", api(config_with(**{name: value})), True, names)
        for name, value, names in (
            ("attention", ["mha"], ("attention", "['mha']", "one of mha, mla")),
            ("dtype", None, ("dtype", "None", "float32")),
        )
    ),
    Case(
        "api",
        "TransformerConfig.of(None)",
        api(lambda ws: nt.TransformerConfig.of(None)),  # type: ignore[arg-type]
        True,
        ("config", "TransformerConfig", "NoneType"),
    ),
    Case(
        "api",
        "build_transformer(seed=-1)",
        api(lambda ws: tiny_model(seed=-1)),
        True,
        ("seed", "-1", "non-negative"),
    ),
    Case(
        "translate",
        "translate --strategy sample --seed -1",
        cli("translate", "--checkpoint", "{ws}/run", "--strategy", "sample", "--seed", "-1", "abc"),
        True,
        ("--seed", "-1", ">= 0"),
    ),
    Case(
        "translate",
        "translate --strategy beam --length-penalty 1e300",
        cli(
            "translate", "--checkpoint", "{ws}/run", "--strategy", "beam", "--length-penalty", "1e300", "abc"
        ),
        True,
        ("--length-penalty", "1e+300", "[0, 10]"),
    ),
    # a hostile user's sweep: the API's fit, a FIFO given as a corpus
    Case(
        "api",
        "Trainer.fit into a directory holding another run",
        api(fit_into_the_saved_run),
        True,
        ("already holds another training run", "Trainer.resume"),
        keeps="run/model.npz",
    ),
    Case(
        "api",
        "Trainer.fit into a file",
        api(lambda ws: new_trainer().fit(ws / "afile", progress=False)),
        True,
        ("afile", "not a directory"),
        keeps="afile",
    ),
    Case(
        "config",
        "a --config whose [model] heads do not divide its width names the file",
        then(
            write("heads.toml", "[model]\nd_model = 16\nh = 3\nN = 1\nd_ff = 16\n"),
            cli(
                "train",
                "--config",
                "{ws}/heads.toml",
                "--steps",
                "2",
                "--no-progress",
                "--out",
                "{ws}/heads-run",
            ),
        ),
        True,
        ("divisible by h", "--config", "heads.toml"),
    ),
    Case(
        "api",
        "Trainer.create with a dict for its TrainConfig",
        api(lambda ws: new_trainer().create({"task": "copy"})),
        True,
        ("config must be a TrainConfig", "dict"),
    ),
    Case(
        "api",
        "Trainer.create with a list for its model settings",
        api(lambda ws: new_trainer().create(TrainConfig(task="copy", steps=2), [16, 1])),
        True,
        ("model must be a ModelConfig", "list"),
    ),
    Case(
        "api",
        "Trainer.evaluate of no pairs",
        api(lambda ws: new_trainer().evaluate([])),
        True,
        ("pairs is empty",),
    ),
    Case(
        "api",
        "Trainer.evaluate of a string",
        api(lambda ws: new_trainer().evaluate("abc")),
        True,
        ("pairs must be a list of (source, target) strings", "'abc'"),
    ),
    Case(
        "api",
        "Trainer.resume, then fit into its own directory",
        then(
            lambda ws: shutil.copytree(ws / "run", ws / "run-resumed"),
            api(lambda ws: nt_trainer_resume(ws / "run-resumed")),
        ),
        False,
        check=lambda ws: load_checkpoint(ws / "run-resumed")[1]["step"] == 4,
    ),
    *(
        [
            Case(
                "translate",
                "standard output on a full device names standard output, not the disk",
                into_a_full_device("translate", "--checkpoint", "{ws}/run", "abc"),
                True,
                ("could not write to standard output", "No space left"),
            ),
            Case(
                "translate",
                "evaluate --json with standard output on a full device",
                into_a_full_device("evaluate", "--checkpoint", "{ws}/run", "--json"),
                True,
                ("could not write to standard output",),
            ),
        ]
        if Path("/dev/full").exists()
        else []
    ),
    *(
        [
            Case(
                "corpus",
                "--data a named pipe (FIFO)",
                then(
                    lambda ws: os.mkfifo(ws / "pipe.tsv") if not (ws / "pipe.tsv").exists() else None,
                    cli("train", "--data", "{ws}/pipe.tsv", *TINY, "--out", "{ws}/fifo-run"),
                ),
                True,
                ("pipe.tsv", "not a regular file"),
            )
        ]
        if hasattr(os, "mkfifo")
        else []
    ),
]

# -- a plain install (no extras), a lock of another program, Ctrl-C while starting, the workbook --------


def without(library: str, run: Callable[[Path], tuple[int, str]]) -> Callable[[Path], tuple[int, str]]:
    """Run as where ``library`` is not installed (a plain ``pip install numpy_transformer``): its
    import fails."""

    def wrapped(ws: Path) -> tuple[int, str]:
        saved = {name: module for name, module in sys.modules.items() if name.split(".")[0] == library}
        blocked = dict.fromkeys([library, *saved])  # None: the import of each fails
        sys.modules.update(blocked)
        try:
            return run(ws)
        finally:
            for name in blocked:
                del sys.modules[name]
            sys.modules.update(saved)

    return wrapped


def locked_by_another_program(ws: Path) -> tuple[int, str]:
    """--out's lock names a live process that is no training run (its id reused after a kill)."""
    other = subprocess.Popen(["sleep", str(TIME_LIMIT)])
    try:
        write("stale-lock/.lock", f"{other.pid}\n")(ws)
        return cli("train", "--task", "copy", *TINY, "--out", "{ws}/stale-lock")(ws)
    finally:
        other.kill()
        other.wait()


STARTING = Path(__file__).with_name("interrupted_while_starting.py")


def interrupted_while_starting(how: str, module: str) -> Callable[[Path], tuple[int, str]]:
    """Ctrl-C while the command (``-m`` or the console ``script``) imports ``module``: exit status 130."""

    def run(ws: Path) -> tuple[int, str]:
        env = {
            **os.environ,
            "PYTHONPATH": str(Path(nt.__file__).resolve().parents[1]),
            OPENBLAS_TIMEOUT_VAR: OPENBLAS_TIMEOUT,  # set: the command is not started again without the finder
        }
        done = subprocess.run(
            [sys.executable, str(STARTING), how, module, "translate", "--checkpoint", str(ws / "run"), "abc"],
            capture_output=True,
            text=True,
            env=env,
            timeout=TIME_LIMIT - 5,
        )
        return (done.returncode if done.returncode == 130 else 0), done.stderr

    return run


def notebook_with(change: Callable[[list[dict]], None], name: str) -> Callable[[Path], Path]:
    """A notebook workbook (learn start --notebook) at ``ws/name/my_backprop.ipynb``, its cells changed."""

    def make(ws: Path) -> Path:
        folder = ws / name
        if not folder.exists():
            code, err = cli("learn", "start", "--notebook", str(folder))(ws)
            assert code == 0, err
            notebook = json.loads((folder / "my_backprop.ipynb").read_text())
            change(notebook["cells"])
            (folder / "my_backprop.ipynb").write_text(json.dumps(notebook))
        return folder / "my_backprop.ipynb"

    return make


def code_cell(source: str, cell_id: str) -> dict:
    return {
        "cell_type": "code",
        "id": cell_id,
        "metadata": {},
        "source": source,
        "outputs": [],
        "execution_count": None,
    }


def above_the_first_and_solved(cells: list[dict]) -> None:
    """The usual first cell a learner adds (imports) above the workbook's first, and relu solved below."""
    cells.insert(0, code_cell("import numpy as np", "imports"))
    cells.append(code_cell("def relu_backward(dout, cache):\n    return dout * cache\n", "solved"))


LEARN_TINY = [*TINY, "--no-compare", "--threads", "1"]

STARTING_CASES = [
    *(
        Case("install", f"{what} without {library} (a plain pip install)", without(library, run), True, names)
        for what, library, run, names in (
            (
                "train --task copy",
                "sacrebleu",
                cli("train", "--task", "copy", *TINY, "--out", "{ws}/plain1"),
                ("sacrebleu", "pip install 'numpy_transformer[train]'"),
            ),
            (
                "train --data (said before the corpus is read)",
                "tokenizers",
                cli("train", "--data", "{ws}/corpus.tsv", *TINY, "--out", "{ws}/plain2"),
                ("the bpe tokenizer", "tokenizers", "pip install 'numpy_transformer[train]'"),
            ),
            (
                "train --task numbers-en-fr",
                "num2words",
                cli("train", "--task", "numbers-en-fr", *TINY, "--out", "{ws}/plain3"),
                ("numbers-en-fr", "num2words", "pip install 'numpy_transformer[train]'"),
            ),
            (
                "evaluate",
                "sacrebleu",
                cli("evaluate", "--checkpoint", "{ws}/run"),
                ("sacrebleu", "pip install 'numpy_transformer[train]'"),
            ),
            (
                "plot curves",
                "matplotlib",
                cli("plot", "curves", "--run", "{ws}/run", "--out", "{ws}/curves.png"),
                ("matplotlib", "pip install 'numpy_transformer[plot]'"),
            ),
            (
                "learn start --notebook",
                "jupytext",
                cli("learn", "start", "--notebook", "{ws}/plain-notebook"),
                ("jupytext", "pip install 'numpy_transformer[notebook]'"),
            ),
            (
                "learn train",
                "sacrebleu",
                then(
                    write("relu.py", "def relu_backward(dout, cache):\n    return dout * cache\n"),
                    cli("learn", "train", "{ws}/relu.py", *LEARN_TINY, "--out", "{ws}/plain-learn"),
                ),
                ("sacrebleu", "pip install 'numpy_transformer[train]'"),
            ),
        )
    ),
    Case(
        "install",
        "translate with a bpe run without tokenizers (a plain pip install)",
        then(
            bpe_run_that_says("a"),
            without("tokenizers", cli("translate", "--checkpoint", "{ws}/says-97", "abc")),
        ),
        True,
        ("the bpe tokenizer", "tokenizers", "pip install 'numpy_transformer[train]'"),
    ),
    Case(
        "install",
        "import without safetensors (a plain pip install)",
        then(marian(), without("safetensors", cli("import", "{ws}/opus-mt", "--out", "{ws}/plain-import"))),
        True,
        ("safetensors", "pip install 'numpy_transformer[pretrained]'"),
    ),
    Case(
        "run dir",
        "--out locked by a live process that is no training run (a reused process id)",
        locked_by_another_program,
        True,
        ("stale-lock/.lock", "not numpy-transformer", "may be stale", "ps -p", "remove"),
    ),
    *(
        Case(
            "startup",
            f"Ctrl-C while {how} imports {module}",
            interrupted_while_starting(how, module),
            True,
            ("interrupted",),
        )
        for how in ("-m", "script")
        for module in ("numpy_transformer.layers", "numpy_transformer.translator.decoder_cache")
    ),
    Case(
        "learn",
        "learn train on blocks that call textbook() and wrap the package's block",
        then(
            write("on-textbook.py", BLOCKS_ON_THE_TEXTBOOK),
            cli("learn", "train", "{ws}/on-textbook.py", *LEARN_TINY, "--out", "{ws}/on-textbook"),
        ),
        False,
    ),
    Case(
        "learn",
        "learn check a notebook with a syntax error in a cell",
        then(
            notebook_with(lambda cells: cells[2].update(source="def f(:\n    pass\n"), "nb-syntax"),
            cli("learn", "check", "{ws}/nb-syntax/my_backprop.ipynb"),
        ),
        True,
        ("my_backprop.ipynb", "SyntaxError", "cell 3 line 1"),
    ),
    Case(
        "learn",
        "learn check a notebook with a code cell added above the first",
        then(
            notebook_with(above_the_first_and_solved, "nb-above"),
            cli("learn", "check", "{ws}/nb-above/my_backprop.ipynb", "relu_backward"),
        ),
        False,
    ),
    *(
        Case(
            "learn",
            f"learn hint when the file keeping the hint levels holds {what}",
            then(
                cli("learn", "start", f"{{ws}}/hints-{i}"),
                write(f"hints-{i}/.my_backprop.py.hints.json", content),
                hint_printed(f"hints-{i}", "softmax_backward"),
            ),
            False,
            check=lambda ws, i=i: (
                "counting from hint 1 again" in (ws / f"hints-{i}.out").read_text()
                and json.loads((ws / f"hints-{i}/.my_backprop.py.hints.json").read_text())
                == {"softmax_backward": 1}
            ),
        )
        for i, (what, content) in enumerate(
            [("bytes that are not JSON", b"\x00\xff{"), ("a JSON list", "[1, 2]")]
        )
    ),
    *(
        Case(
            "learn",
            f"textbook(cache, dout) with {what}",
            api(lambda ws, make=make: textbook_of(*make())),
            True,
            names,
        )
        for what, make, names in [
            ("dout None", lambda: (layer_norm_cache(), None), ("dout must be an array", "NoneType")),
            (
                "a dout of another shape",
                lambda: (layer_norm_cache(), np.ones((5, 5))),
                ("dout of shape (5, 5)",),
            ),
            (
                "relu's cache (a bare array)",
                lambda: (np.ones((2, 3)), np.ones((2, 3))),
                ("bare array", "relu_backward"),
            ),
        ]
    ),
    Case(
        "learn",
        "learn prove --steps 1000000000 (the proof's own is 300)",
        cli("learn", "prove", "{ws}/my_backprop.py", "--steps", "1000000000"),
        True,
        ("--steps", "[1, 3000]", "1000000000"),
    ),
]


# -- the toolkit's exports, imports, pictures and printed text ------------------------------------------


def imported_run(name: str) -> Callable[[Path], Path]:
    """``ws/name``: the tiny Marian model (marian()) imported as a run, once."""

    def make(ws: Path) -> Path:
        if not (ws / name / "model.npz").is_file():
            code, err = cli("import", str(marian()(ws)), "--out", str(ws / name))(ws)
            assert code == 0, err
        return ws / name

    return make


def printed(*argv: str, into: str) -> Callable[[Path], tuple[int, str]]:
    """Run the command (``{ws}`` replaced), its standard output kept in ``ws/into`` for the check."""

    def run(ws: Path) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([arg.replace("{ws}", str(ws)) for arg in argv])
            except SystemExit as exit:
                code = exit.code
        (ws / into).write_text(out.getvalue(), encoding="utf-8")
        return code, err.getvalue()

    return run


def one_export_beside_the_notes(folder_name: str, kind: str) -> Callable[[Path], bool]:
    """``ws/folder_name`` holds the user's notes.txt and the files of one export of ``kind`` only."""

    def check(ws: Path) -> bool:
        from numpy_transformer.translator.huggingface.directory import CTRANSLATE2_WRITTEN, WRITTEN

        folder = ws / folder_name
        names = {str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()}
        own = set(CTRANSLATE2_WRITTEN if kind == "ctranslate2" else WRITTEN)
        other = set(WRITTEN if kind == "ctranslate2" else CTRANSLATE2_WRITTEN) - own
        return (
            (folder / "notes.txt").read_text() == "mine"
            and names - {"notes.txt"} <= own
            and not names & other
            and ("model.bin" if kind == "ctranslate2" else "model.safetensors") in names
        )

    return check


BIDI = "\u202eevil\u2066 \u200bx\u200f"  # right-to-left override, an isolate, a zero-width space, a mark
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # an emoji of three joined by U+200D (ZWJ)


def escaped_not_obeyed(ws: Path) -> bool:
    out = (ws / "tk-bidi.out").read_text(encoding="utf-8")
    return (
        not any(c in out for c in "\u202e\u2066\u200b\u200f")
        and out.startswith("\\u202eevil\\u2066 \\u200bx\\u200f\t")
        and f"{FAMILY}\t" in out
    )


def exported(run: str, folder: str, *flags: str) -> Callable[[Path], object]:
    """``ws/folder``: an export of ``ws/run`` (``flags``: --ctranslate2), with the user's notes.txt beside it."""

    def make(ws: Path) -> None:
        code, err = cli("export", str(ws / run), "--to", str(ws / folder), *flags)(ws)
        assert code == 0, err
        (ws / folder / "notes.txt").write_text("mine")

    return make


def alone_and_whole(folder: str, kind: str) -> Callable[[Path], bool]:
    """``ws/folder`` holds one export of ``kind`` whole beside the user's notes, and nothing is left
    beside it (a staging folder, an earlier export moved aside)."""

    def check(ws: Path) -> bool:
        beside = [path.name for path in ws.iterdir() if path.name.startswith(f".{folder}.")]
        return not beside and one_export_beside_the_notes(folder, kind)(ws)

    return check


CHMOD_SIGNAL = """
import os, signal, sys
calls = []
real = os.chmod
def chmod(*args, **kwargs):  # the second file of the export written: the signal comes
    calls.append(args)
    if len(calls) == 2:
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    return real(*args, **kwargs)
os.chmod = chmod
from numpy_transformer.translator.cli import main
sys.exit(main(sys.argv[2:]))
"""


def signalled_export(signum: str, folder: str, *flags: str) -> Callable[[Path], tuple[int, str]]:
    """``export tk-imp --to ws/folder --overwrite`` (``flags``) in a child process that gets ``signum``
    (SIGINT, SIGTERM or SIGKILL) once the second file of the new export is written."""

    def run(ws: Path) -> tuple[int, str]:
        argv = ["export", str(ws / "tk-imp"), "--to", str(ws / folder), "--overwrite", *flags]
        done = subprocess.run(
            [sys.executable, "-c", CHMOD_SIGNAL, signum, *argv],
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT,
        )
        return done.returncode, done.stderr

    return run


def interrupted_export(signum: str, folder: str, kind: str, *flags: str) -> Callable[[Path], tuple[int, str]]:
    """signalled_export, judged a wrong acceptance (0, what) unless the earlier export of ``kind`` is
    left whole and alone (alone_and_whole)."""

    def run(ws: Path) -> tuple[int, str]:
        code, err = signalled_export(signum, folder, *flags)(ws)
        if not alone_and_whole(folder, kind)(ws):
            return 0, f"{folder} is not one whole {kind} export alone: {sorted(os.listdir(ws / folder))}"
        return code, err

    return run


def full_disk_for_safetensors(run: Callable[[Path], tuple[int, str]]) -> Callable[[Path], tuple[int, str]]:
    """Run with safetensors failing as it does on a full disk: its own error, not an OSError."""

    def wrapped(ws: Path) -> tuple[int, str]:
        import safetensors.numpy
        from safetensors import SafetensorError

        real = safetensors.numpy.save_file

        def save_file(*args: object, **kwargs: object) -> None:
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

        safetensors.numpy.save_file = save_file
        try:
            return run(ws)
        finally:
            safetensors.numpy.save_file = real

    return wrapped


def nothing_at(relative: str, run: Callable[[Path], tuple[int, str]]) -> Callable[[Path], tuple[int, str]]:
    """``run``, judged wrong where it leaves anything at ``ws/relative``."""

    def judged(ws: Path) -> tuple[int, str]:
        code, err = run(ws)
        return (0, f"{relative} was left") if (ws / relative).exists() else (code, err)

    return judged


def separate_vocabularies_export(ws: Path) -> Path:
    """``ws/tk-sep-hf``: the Marian export of a character run of separate vocabularies (its target's
    tokenizer in target/), once."""
    if not (ws / "tk-sep-hf").is_dir():
        argv = ["train", "--data", "{ws}/corpus.tsv", "--tokenizer", "char", "--post-norm", "--no-final-norm"]
        code, err = cli(*argv, *TINY, "--out", "{ws}/tk-sep")(ws)
        assert code == 0, err
        code, err = cli("export", "{ws}/tk-sep", "--to", "{ws}/tk-sep-hf")(ws)
        assert code == 0, err
    return ws / "tk-sep-hf"


def copy_of_the_export(folder: str, change: Callable[[Path], object]) -> Callable[[Path], Path]:
    """``ws/folder``: a copy of separate_vocabularies_export, then ``change`` done to it."""

    def make(ws: Path) -> Path:
        if not (ws / folder).exists():
            shutil.copytree(separate_vocabularies_export(ws), ws / folder)
            change(ws / folder)
        return ws / folder

    return make


def source_vocab_size(size: int) -> Callable[[Path], None]:
    def change(directory: Path) -> None:
        config = json.loads((directory / "config.json").read_text())
        config["numpy_transformer"]["src_vocab_size"] = size
        (directory / "config.json").write_text(json.dumps(config))

    return change


def without_fingerprints(directory: Path) -> None:
    """config.json as an export made before the tokenizers' fingerprints were recorded."""
    config = json.loads((directory / "config.json").read_text())
    config["numpy_transformer"].pop("tokenizer_sha256", None)
    (directory / "config.json").write_text(json.dumps(config))


def swapped_sentencepiece_models(directory: Path) -> None:
    source, target = (directory / "source.spm").read_bytes(), (directory / "target.spm").read_bytes()
    (directory / "source.spm").write_bytes(target)
    (directory / "target.spm").write_bytes(source)


LONG_NAME = "e" * 250  # a legal name (NAME_MAX 255), whose staging sibling's must fit too


TOOLKIT_CASES = [
    Case(
        "export",
        "Ctrl-C during export --overwrite --ctranslate2 over a Marian export, its second file written",
        then(
            imported_run("tk-imp"),
            exported("tk-imp", "tk-int"),
            interrupted_export("SIGINT", "tk-int", "marian", "--ctranslate2"),
        ),
        True,
        ("interrupted (Ctrl-C): nothing of the export was written", "tk-int is as it was"),
    ),
    Case(
        "export",
        "SIGTERM during export --overwrite (Marian) over a CTranslate2 export, its second file written",
        then(
            imported_run("tk-imp"),
            exported("tk-imp", "tk-term", "--ctranslate2"),
            interrupted_export("SIGTERM", "tk-term", "ctranslate2"),
        ),
        True,
        ("ended (SIGTERM): nothing of the export was written", "tk-term is as it was"),
    ),
    Case(
        "export",
        "export --overwrite again after one killed (SIGKILL) while writing over a CTranslate2 export",
        then(
            imported_run("tk-imp"),
            exported("tk-imp", "tk-kill", "--ctranslate2"),
            signalled_export("SIGKILL", "tk-kill"),
            cli("export", "{ws}/tk-imp", "--to", "{ws}/tk-kill", "--overwrite"),
        ),
        False,
        check=alone_and_whole("tk-kill", "marian"),
    ),
    Case(
        "export",
        "export (Hugging Face) into a new directory on a full disk",
        then(
            imported_run("tk-imp"),
            nothing_at(
                "tk-full", full_disk_for_safetensors(cli("export", "{ws}/tk-imp", "--to", "{ws}/tk-full"))
            ),
        ),
        True,
        ("tk-full/model.safetensors", "No space left on device", "nothing of the export was written"),
    ),
    Case(
        "export",
        "export --to a directory of a 250-byte name",
        then(imported_run("tk-imp"), cli("export", "{ws}/tk-imp", "--to", f"{{ws}}/{LONG_NAME}")),
        False,
        check=lambda ws: (ws / LONG_NAME / "model.safetensors").is_file(),
    ),
    Case(
        "export",
        "export --to a directory whose parents are missing (as train --out makes them)",
        then(imported_run("tk-imp"), cli("export", "{ws}/tk-imp", "--to", "{ws}/tk-new/a/hf")),
        False,
        check=lambda ws: (ws / "tk-new" / "a" / "hf" / "model.safetensors").is_file(),
    ),
    Case(
        "export",
        "export --to a directory under a file",
        then(imported_run("tk-imp"), cli("export", "{ws}/tk-imp", "--to", "{ws}/afile/hf")),
        True,
        ("--to", "afile is not a directory"),
    ),
    Case(
        "import",
        "import a two-vocabulary export whose target/ folder was not copied",
        then(
            copy_of_the_export("tk-sep-top", lambda d: shutil.rmtree(d / "target")),
            cli("import", "{ws}/tk-sep-top", "--out", "{ws}/imp-sep-top"),
        ),
        True,
        ("tk-sep-top/target: no such folder", "shared_vocab false"),
    ),
    Case(
        "import",
        "import a two-vocabulary export whose target/tokenizer.json is a copy of the source's (as many tokens)",
        then(
            copy_of_the_export(
                "tk-sep-copied",
                lambda d: shutil.copy(d / "tokenizer.json", d / "target" / "tokenizer.json"),
            ),
            cli("import", "{ws}/tk-sep-copied", "--out", "{ws}/imp-sep-copied"),
        ),
        True,
        ("tk-sep-copied/target/tokenizer.json", "not the tokenizer this model was exported with"),
    ),
    Case(
        "import",
        "import a two-vocabulary export made before the tokenizers' fingerprints (config.json has none)",
        then(
            copy_of_the_export("tk-sep-older", without_fingerprints),
            cli("import", "{ws}/tk-sep-older", "--out", "{ws}/imp-sep-older"),
        ),
        False,
        check=lambda ws: (ws / "imp-sep-older" / "model.npz").is_file(),
    ),
    Case(
        "import",
        "import an export of an OPUS-MT run whose source.spm and target.spm were swapped",
        then(
            imported_run("tk-imp"),
            lambda ws: cli("export", "{ws}/tk-imp", "--to", "{ws}/tk-spm-swapped")(ws),
            lambda ws: swapped_sentencepiece_models(ws / "tk-spm-swapped"),
            cli("import", "{ws}/tk-spm-swapped", "--out", "{ws}/imp-spm-swapped"),
        ),
        True,
        ("tk-spm-swapped/source.spm", "not the tokenizer this model was exported with"),
    ),
    Case(
        "import",
        "import an export whose config.json's src_vocab_size disagrees with tokenizer.json and the weights",
        then(
            copy_of_the_export("tk-sep-size", source_vocab_size(5)),
            cli("import", "{ws}/tk-sep-size", "--out", "{ws}/imp-sep-size"),
        ),
        True,
        ("config.json: numpy_transformer.src_vocab_size is 5", "tokenizer.json holds"),
    ),
    Case(
        "export",
        "export --overwrite --ctranslate2 over a Marian export (the user's notes beside it)",
        then(
            imported_run("tk-imp"),
            cli("export", "{ws}/tk-imp", "--to", "{ws}/tk-export"),
            write("tk-export/notes.txt", "mine"),
            cli("export", "{ws}/tk-imp", "--to", "{ws}/tk-export", "--overwrite", "--ctranslate2"),
        ),
        False,
        check=one_export_beside_the_notes("tk-export", "ctranslate2"),
    ),
    Case(
        "export",
        "export --overwrite (Marian) over a CTranslate2 export (the user's notes beside it)",
        then(
            imported_run("tk-imp"),
            cli("export", "{ws}/tk-imp", "--to", "{ws}/tk-export2", "--ctranslate2"),
            write("tk-export2/notes.txt", "mine"),
            cli("export", "{ws}/tk-imp", "--to", "{ws}/tk-export2", "--overwrite"),
        ),
        False,
        check=one_export_beside_the_notes("tk-export2", "marian"),
    ),
    Case(
        "import",
        "import a Marian model of separate vocabularies (target_vocab.json)",
        then(
            marian(
                "m-target-vocab",
                lambda d: shutil.copy(d / "vocab.json", d / "target_vocab.json"),
            ),
            cli("import", "{ws}/m-target-vocab", "--out", "{ws}/imp-target-vocab"),
        ),
        True,
        ("target_vocab.json", "separate"),
    ),
    Case(
        "import",
        "import a config.json that is a JSON array",
        then(
            marian("m-list", lambda d: (d / "config.json").write_text("[1, 2]")),
            cli("import", "{ws}/m-list", "--out", "{ws}/imp-list"),
        ),
        True,
        ("config.json", "expected a JSON object, got a list"),
    ),
    Case(
        "import",
        "import a config.json over 1 MiB",
        then(
            marian("m-huge", lambda d: (d / "config.json").write_text(" " * (1 << 20) + "{}")),
            cli("import", "{ws}/m-huge", "--out", "{ws}/imp-huge"),
        ),
        True,
        ("config.json", "larger than 1 MiB", "far smaller"),
    ),
    Case(
        "translate",
        "bidi overrides, isolates and zero-width controls printed as escapes, emoji kept",
        printed("translate", "--checkpoint", "{ws}/run", BIDI, FAMILY, into="tk-bidi.out"),
        False,
        check=escaped_not_obeyed,
    ),
    Case(
        "plot",
        "plot curves --out an existing directory",
        then(
            lambda ws: (ws / "tk-pictures").mkdir(exist_ok=True),
            printed("plot", "curves", "--run", "{ws}/run", "--out", "{ws}/tk-pictures", into="tk-plot.out"),
        ),
        False,
        check=lambda ws: (
            (ws / "tk-pictures" / "curves.png").is_file()
            and not (ws / "tk-pictures.png").exists()
            and (ws / "tk-plot.out").read_text().strip() == f"wrote {ws / 'tk-pictures' / 'curves.png'}"
        ),
    ),
    Case(
        "plot",
        "plot curves --out x.txt",
        cli("plot", "curves", "--run", "{ws}/run", "--out", "{ws}/x.txt"),
        True,
        ("--out", "x.txt", ".png"),
    ),
    Case(
        "plot",
        "plot gradients --checkpoint RUN --layers 3",
        cli("plot", "gradients", "--checkpoint", "{ws}/run", "--layers", "3", "--out", "{ws}/g.png"),
        True,
        ("--layers 3", "--checkpoint"),
    ),
    Case(
        "plot",
        "plot gradients --layers 1000000",
        cli("plot", "gradients", "--layers", "1000000", "--out", "{ws}/g.png"),
        True,
        ("--layers", "1000000", "at most"),
    ),
    Case(
        "plot",
        "plot gradients --checkpoint an imported run",
        then(
            imported_run("tk-imp"),
            cli("plot", "gradients", "--checkpoint", "{ws}/tk-imp", "--out", "{ws}/g.png"),
        ),
        True,
        ("tk-imp", "imported", "without --checkpoint"),
    ),
    *(
        Case(
            "plot",
            f"plot attention of an empty sentence ({what})",
            then(
                imported_run("tk-imp"),
                cli("plot", "attention", "--checkpoint", f"{{ws}}/{run}", sentence, "--out", "{ws}/att"),
            ),
            True,
            ("sentence 1 of the arguments is empty",),
        )
        for what, run, sentence in (("an imported run", "tk-imp", ""), ("a character run", "run", "  "))
    ),
    Case(
        "plot",
        "plot attention of a sentence longer than the model's positional table",
        cli("plot", "attention", "--checkpoint", "{ws}/run", "a" * 500, "--out", "{ws}/att"),
        True,
        ("sentence 1 of the arguments", "seq_len"),
    ),
]


# -- the training toolkit's settings, paths and inputs ----------------------------------------------------


def kept_steps(ws: Path) -> Path:
    """``ws/k4``: a run of 4 steps that keeps its evaluation checkpoints of steps 2 and 4, once."""
    if not (ws / "k4" / "step-0000004.npz").is_file():
        code, err = cli(
            "train", "--task", "copy", *TINY, "--steps", "4", "--keep-checkpoints", "2", "--out", "{ws}/k4"
        )(ws)
        assert code == 0, err
    return ws / "k4"


def nan_step(ws: Path) -> Path:
    """``ws/nan-step.npz``: k4's step 2 with one weight made NaN, saved as a run saves it."""
    arrays, meta = load_checkpoint(kept_steps(ws) / "step-0000002.npz")
    arrays["param/projection_layer.proj.weight"].flat[3] = np.nan
    return save_checkpoint(ws / "nan-step.npz", arrays, meta)


def average_of_nan(ws: Path) -> tuple[int, str]:
    """average a NaN checkpoint with a sound one: refused, and no average written."""
    nan_step(ws)
    code, err = cli("average", "{ws}/nan-step.npz", "{ws}/k4/step-0000004.npz", "--out", "{ws}/nan-avg.npz")(
        ws
    )
    return (0, "an average was written") if (ws / "nan-avg.npz").exists() else (code, err)


def in_folder(name: str, run: Callable[[Path], tuple[int, str]]) -> Callable[[Path], tuple[int, str]]:
    """Run in ``ws/name`` as the working directory (made empty first); a case that fails writes there,
    never where the tests run."""

    def wrapped(ws: Path) -> tuple[int, str]:
        folder = ws / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        before = Path.cwd()
        os.chdir(folder)
        try:
            return run(ws)
        finally:
            os.chdir(before)

    return wrapped


def leaves_nothing(run: Callable[[Path], tuple[int, str]], *made: str) -> Callable[[Path], tuple[int, str]]:
    """``run``, then none of ``made`` (paths in the workspace a refused command would have made) left."""

    def wrapped(ws: Path) -> tuple[int, str]:
        code, err = run(ws)
        left = [name for name in made if (ws / name).exists()]
        if left:
            raise AssertionError(f"left behind: {', '.join(left)}")
        return code, err

    return wrapped


def read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def in_lines(most: int, run: Callable[[Path], tuple[int, str]]) -> Callable[[Path], tuple[int, str]]:
    """``run``, whose standard error must hold at most ``most`` lines, warnings included."""

    def wrapped(ws: Path) -> tuple[int, str]:
        code, err = run(ws)
        if len(err.strip().splitlines()) > most:
            raise AssertionError(f"{len(err.strip().splitlines())} lines on standard error: {err[:200]!r}")
        return code, err

    return wrapped


def log_with_foreign_lines(ws: Path) -> Path:
    """The workspace run's log, then 500 lines that are not log records."""
    path = ws / "foreign-log.jsonl"
    path.write_text((ws / "run" / "log.jsonl").read_text() + "".join(f"noise {n}\n" for n in range(500)))
    return path


def with_environment(name: str, value: str, run: Callable[[Path], tuple[int, str]]) -> Callable:
    """Run with the environment variable ``name`` set to ``value``, as a shell would give it."""

    def wrapped(ws: Path) -> tuple[int, str]:
        previous = os.environ.get(name)
        os.environ[name] = value
        try:
            return run(ws)
        finally:
            if previous is None:
                del os.environ[name]
            else:
                os.environ[name] = previous

    return wrapped


def saying_nothing(*argv: str) -> Callable[[Path], tuple[int, str]]:
    """The command, as cli runs it, judged wrong where it printed anything on standard output: a
    refusal comes before any work, and before any word about the work."""

    def run(ws: Path) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([arg.replace("{ws}", str(ws)) for arg in argv])
            except SystemExit as exit:
                code = exit.code
        said = out.getvalue()
        return (0, f"said {said.splitlines()[0]!r} first") if said else (code, err.getvalue())

    return run


RELU = "def relu_backward(dout, cache):\n    return dout * (cache > 0)\n"


EMPTY = "(an empty argument: most often an unset shell variable)"
TRAINING_TOOLKIT_CASES = [
    Case(
        "average",
        "average a checkpoint holding a NaN weight",
        average_of_nan,
        True,
        ("nan-step.npz", "projection_layer.proj.weight", "NaN or infinite", "cannot be averaged"),
    ),
    Case(
        "train",
        "--min-lr above --lr (the cosine would climb)",
        cli("train", "--task", "copy", *TINY, "--min-lr", "1", "--out", "{ws}/min-lr"),
        True,
        ("--min-lr 1", "above --lr 0.001"),
    ),
    Case(
        "train",
        "TrainConfig(min_lr=0.01) above the default peak, in Python",
        api(lambda ws: TrainConfig(task="copy", min_lr=0.01).resolve()),
        True,
        ("--min-lr 0.01", "above --lr 0.001"),
    ),
    Case(
        "train",
        "--plateau-cut with --lr-floor above --lr (it could never cut)",
        cli(
            "train", "--task", "copy", *TINY, "--plateau-cut", "0.5", "--lr-floor", "1", "--out", "{ws}/floor"
        ),
        True,
        ("--lr-floor 1", "not below --lr 0.001", "--plateau-cut 0.5 could never cut"),
    ),
    *(
        Case("paths", f"{what} '' {EMPTY}", in_folder("empty-cwd", cli(*argv)), True, names)
        for what, argv, names in (
            ("train --out", ("train", "--task", "copy", *TINY, "--out", ""), ("--out", "is empty")),
            ("import --out", ("import", "{ws}/run", "--out", ""), ("--out", "is empty")),
            ("learn start", ("learn", "start", ""), ("DIR", "is empty")),
            ("average --out", ("average", "{ws}/run", "--out", ""), ("--out", "is empty")),
            ("export --to", ("export", "{ws}/run", "--to", ""), ("--to", "is empty")),
            (
                "translate --checkpoint",
                ("translate", "--checkpoint", "", "abc"),
                ("--checkpoint", "is empty"),
            ),
            (
                "evaluate --data",
                ("evaluate", "--checkpoint", "{ws}/run", "--data", ""),
                ("--data", "is empty"),
            ),
            (
                "plot curves --out",
                ("plot", "curves", "--run", "{ws}/run", "--out", ""),
                ("--out", "is empty"),
            ),
            ("train --config", ("train", "--task", "copy", *TINY, "--config", ""), ("--config", "is empty")),
            ("train --data", ("train", "--data", "", *TINY, "--out", "{ws}/e-data"), ("--data", "is empty")),
        )
    ),
    Case(
        "paths",
        "TrainConfig(data='') in Python",
        api(lambda ws: TrainConfig(data="")),
        True,
        ("--data", "is empty"),
    ),
    Case(
        "run dir",
        "--resume an average's directory (average --out DIR)",
        then(
            lambda ws: cli(
                "average",
                f"{kept_steps(ws)}/step-0000002.npz",
                "{ws}/k4/step-0000004.npz",
                "--out",
                "{ws}/avg-dir",
            )(ws),
            cli("train", "--out", "{ws}/avg-dir", "--resume", "--steps", "6", "--no-progress", "--show", "0"),
        ),
        True,
        ("avg-dir/model.npz", "holds an average", "not a training run", "--from"),
    ),
    Case(
        "train",
        "--accumulate 200000 with --batch-size 8 (1.6 million pairs a step)",
        cli("train", "--task", "copy", *TINY, "--accumulate", "200000", "--out", "{ws}/acc"),
        True,
        ("--accumulate 200000", "--batch-size 8", "1600000 pairs", "at most 1000000"),
    ),
    Case(
        "run dir",
        "--out whose .lock is a directory",
        then(
            write("lock-dir/.lock/inside", "x"),
            cli("train", "--task", "copy", *TINY, "--out", "{ws}/lock-dir"),
        ),
        True,
        ("lock-dir/.lock", "is a directory", "remove it"),
    ),
    Case(
        "fine-tune",
        "--from an imported run with --vocab-size",
        then(
            lambda ws: (
                (ws / "imp-vocab").is_dir() or cli("import", str(marian()(ws)), "--out", "{ws}/imp-vocab")(ws)
            ),
            cli(
                "train",
                "--from",
                "{ws}/imp-vocab",
                "--data",
                "{ws}/corpus.tsv",
                "--vocab-size",
                "500",
                *FINE_TUNE,
                "--out",
                "{ws}/ft-vocab",
            ),
        ),
        True,
        ("--vocab-size 500", "cannot apply", "marian", "vocabulary of", "units"),
    ),
    Case(
        "import",
        "import of a CTranslate2 model directory (config.json without model_type, model.bin)",
        then(
            write("ct2-dir/config.json", json.dumps({"bos_token": "<bos>", "eos_token": "<eos>"})),
            write("ct2-dir/model.bin", b"\x00" * 64),
            cli("import", "{ws}/ct2-dir", "--out", "{ws}/ct2-imported"),
        ),
        True,
        (
            "ct2-dir",
            "a CTranslate2 model directory",
            "import does not read",
            "model_type 'marian' or 'pegasus'",
        ),
    ),
    Case(
        "plot",
        "plot curves of the corpus (60 lines, none a log record): one line, not a warning a line",
        in_lines(1, cli("plot", "curves", "--run", "{ws}/corpus.tsv", "--out", "{ws}/corpus-curves.png")),
        True,
        ("corpus.tsv", "holds no training records", "expected a run's log.jsonl"),
    ),
    Case(
        "plot",
        "plot curves of a log with 500 foreign lines: three named, the rest counted",
        then(
            log_with_foreign_lines,
            in_lines(
                5, cli("plot", "curves", "--run", "{ws}/foreign-log.jsonl", "--out", "{ws}/foreign.png")
            ),
        ),
        False,
        check=lambda ws: (ws / "foreign.png").is_file(),
    ),
    Case(
        "run dir",
        "train --out in missing folders, refused once --out is claimed (d_model not divisible by heads)",
        leaves_nothing(
            cli("train", "--task", "copy", *TINY, "--d-model", "15", "--out", "{ws}/litter-a/b/run"),
            "litter-a",
        ),
        True,
        ("d_model must be divisible by h", "d_model=15"),
    ),
    Case(
        "learn",
        "learn train refused once its run is claimed: no runs/ beside the workbook",
        then(
            lambda ws: None if (ws / "litter-wb").exists() else cli("learn", "start", "{ws}/litter-wb")(ws),
            leaves_nothing(
                cli("learn", "train", "{ws}/litter-wb/my_backprop.py", "--d-model", "15", "--heads", "2"),
                "litter-wb/runs",
            ),
        ),
        True,
        ("d_model must be divisible by h",),
    ),
    Case(
        "train",
        "--heads that do not divide --d-model, with --data of a file not there yet: the sizes refused first",
        cli("train", "--data", "{ws}/no-corpus.tsv", *TINY, "--heads", "3", "--out", "{ws}/heads-first"),
        True,
        ("d_model must be divisible by h", "d_model=16, h=3"),
    ),
    Case(
        "train",
        "--task with --data and --out a file: the settings refused before --out is looked at",
        cli("train", "--task", "copy", "--data", "{ws}/corpus.tsv", *TINY, "--out", "{ws}/afile"),
        True,
        ("give a generated task or --data, not both",),
        keeps="afile",
    ),
    Case(
        "learn",
        "learn train with --heads that do not divide the width: refused before a word about the run",
        then(write("s15.py", RELU), saying_nothing("learn", "train", "{ws}/s15.py", "--heads", "3")),
        True,
        ("d_model must be divisible by h", "d_model=32, h=3"),
    ),
    Case(
        "learn",
        "learn train with --task and --data: refused before a word about the run",
        then(
            write("s15.py", RELU),
            saying_nothing("learn", "train", "{ws}/s15.py", "--task", "copy", "--data", "{ws}/corpus.tsv"),
        ),
        True,
        ("give a generated task or --data, not both",),
    ),
    *(
        Case(
            "environment",
            f"{variable}=bogus with {what}",
            with_environment(variable, "bogus", in_folder("env-cwd", cli(*argv))),
            True,
            (variable, "'bogus'", choices),
        )
        for variable, choices in (
            ("NUMPY_TRANSFORMER_BACKEND", "numpy, cupy"),
            ("NUMPY_TRANSFORMER_KERNELS", "fast, reference, learner"),
            # on NumPy too: a GPU run would refuse it in its first step, after reading the corpus
            ("NUMPY_TRANSFORMER_FUSED", "expected all, none or fused kernel names"),
        )
        for what, argv in (
            ("translate", ("translate", "--checkpoint", "{ws}/run", "abc")),
            ("train", ("train", "--task", "copy", *TINY, "--out", "{ws}/env-run")),
            ("learn start", ("learn", "start", "{ws}/env-workbook")),
        )
    ),
]


CASES = [
    # -- the run directory: nothing saved is lost ---------------------------------------------------------
    Case(
        "run dir",
        "train over a saved run without --resume",
        cli("train", "--task", "copy", *TINY, "--out", "{ws}/run"),
        True,
        ("already holds a training run", "--resume", "--overwrite"),
        keeps="run/model.npz",
    ),
    Case(
        "run dir",
        "--out NAME.npz",
        cli("train", "--task", "copy", *TINY, "--out", "{ws}/model.npz"),
        True,
        ("not a file",),
    ),
    Case(
        "run dir",
        "--out an existing file",
        cli("train", "--task", "copy", *TINY, "--out", "{ws}/afile"),
        True,
        ("is not a directory",),
        keeps="afile",
    ),
    Case(
        "run dir",
        "--out under a file",
        cli("train", "--task", "copy", *TINY, "--out", "{ws}/afile/run"),
        True,
        ("not a writable directory",),
    ),
    Case(
        "run dir",
        "--out under /proc",
        cli("train", "--task", "copy", *TINY, "--out", "/proc/self/run"),
        True,
        ("/proc",),
    ),
    Case(
        "run dir",
        "--out /dev/null",
        cli("train", "--task", "copy", *TINY, "--out", "/dev/null"),
        True,
        ("/dev",),
    ),
    Case(
        "run dir",
        "--resume where nothing was saved",
        cli("train", "--resume", "--out", "{ws}/empty"),
        True,
        ("--resume",),
    ),
    Case(
        "run dir",
        "--resume and --overwrite together",
        cli("train", "--resume", "--overwrite", "--out", "{ws}/run"),
        True,
        ("give one of them",),
        keeps="run/model.npz",
    ),
    Case(
        "run dir",
        "a killed save's .tmp is cleared by the next run",
        then(
            write("fresh/.model.npz.x1y2.tmp", b"half"),
            cli("train", "--task", "copy", *TINY, "--out", "{ws}/fresh"),
        ),
        False,
        check=lambda ws: not list((ws / "fresh").glob("*.tmp")) and (ws / "fresh" / "model.npz").exists(),
    ),
    Case(
        "run dir",
        "divergence writes no non-finite checkpoint and says what is kept",
        diverging_run,
        True,
        ("training stopped",),
    ),
    # -- corpora -----------------------------------------------------------------------------------------
    Case(
        "corpus",
        "--data a missing file",
        cli("train", "--data", "{ws}/nope.tsv", *TINY, "--out", "{ws}/c1"),
        True,
        ("no such file",),
    ),
    Case(
        "corpus",
        "--data a directory",
        cli("train", "--data", "{ws}", *TINY, "--out", "{ws}/c2"),
        True,
        ("is a directory",),
    ),
    Case(
        "corpus",
        "--data not UTF-8",
        then(
            write("bin.tsv", b"\xff\xfe\x00a\tb\n"),
            cli("train", "--data", "{ws}/bin.tsv", *TINY, "--out", "{ws}/c3"),
        ),
        True,
        ("bin.tsv:1", "not UTF-8"),
    ),
    Case(
        "corpus",
        "--data an empty file",
        then(write("empty.tsv", ""), cli("train", "--data", "{ws}/empty.tsv", *TINY, "--out", "{ws}/c4")),
        True,
        ("holds no sentence pairs",),
    ),
    Case(
        "corpus",
        "--data a line without a tab",
        then(
            write("notab.tsv", "a b\n"), cli("train", "--data", "{ws}/notab.tsv", *TINY, "--out", "{ws}/c5")
        ),
        True,
        ("notab.tsv:1", "no tab"),
    ),
    Case(
        "corpus",
        "--data an empty target",
        then(write("half.tsv", "a\t \n"), cli("train", "--data", "{ws}/half.tsv", *TINY, "--out", "{ws}/c6")),
        True,
        ("half.tsv:1", "empty target"),
    ),
    Case(
        "corpus",
        "--data two pairs",
        then(
            write("two.tsv", "a\tb\nc\td\n"),
            cli("train", "--data", "{ws}/two.tsv", *TINY, "--out", "{ws}/c7"),
        ),
        True,
        ("too few",),
    ),
    Case(
        "corpus",
        "--data with a byte-order mark",
        then(
            write("bom.tsv", "\ufeff" + corpus()),
            cli("train", "--data", "{ws}/bom.tsv", *TINY, "--out", "{ws}/c8"),
        ),
        False,
        check=lambda ws: (
            not any("\ufeff" in t for t in load_checkpoint(ws / "c8" / "model.npz")[1]["src_vocab"])
        ),
    ),
    Case(
        "corpus",
        "--data with a 2 MB line",
        then(
            write("long.tsv", corpus(extra="a " * 10**6 + "\tb\n")),
            cli("train", "--data", "{ws}/long.tsv", *TINY, "--out", "{ws}/c9"),
        ),
        False,
        check=lambda ws: load_checkpoint(ws / "c9" / "model.npz")[1]["model"]["src_seq_len"] < 64,
    ),
    Case(
        "corpus",
        "evaluate after the corpus changed",
        then(
            cli("train", "--data", "{ws}/corpus.tsv", *TINY, "--out", "{ws}/c10"),
            write("corpus.tsv", corpus(61)),
            cli("evaluate", "--checkpoint", "{ws}/c10"),
        ),
        True,
        ("has changed",),
    ),
    Case(
        "corpus",
        "evaluate --data a file without tabs",
        then(
            write("notab2.tsv", "a b\n"),
            cli("evaluate", "--checkpoint", "{ws}/run", "--data", "{ws}/notab2.tsv"),
        ),
        True,
        ("notab2.tsv:1", "no tab"),
    ),
    # -- flags -------------------------------------------------------------------------------------------
    *[
        Case(
            "flags",
            f"train {flag} {value}",
            cli("train", "--task", "copy", *TINY, flag, value, "--out", "{ws}/f"),
            True,
            (value,),
        )
        for flag, value in [
            ("--lr", "-1"),
            ("--lr", "nan"),
            ("--lr", "inf"),
            ("--clip", "-1"),
            ("--clip", "nan"),
            ("--weight-decay", "-0.1"),
            ("--warmup", "0"),
            ("--factor", "nan"),
            ("--batch-size", "0"),
            ("--steps", "-5"),
            ("--max-length", "0"),
            ("--eval-every", "0"),
            ("--seed", "abc"),
            ("--dropout", "1.5"),
            ("--label-smoothing", "1.0"),
            ("--threads", "9999"),
            ("--vocab-size", "100"),
            ("--batch-tokens", "0"),
            ("--accumulate", "0"),
            ("--patience", "-1"),
            ("--keep-checkpoints", "-2"),
        ]
    ],
    Case(
        "flags",
        "train --heads 3 with --d-model 16",
        cli("train", "--task", "copy", *TINY, "--heads", "3", "--out", "{ws}/f"),
        True,
        ("divisible by h",),
    ),
    Case(
        "flags",
        "train --batch-size 1000000000",
        cli("train", "--task", "copy", *TINY, "--batch-size", "1000000000", "--out", "{ws}/f"),
        True,
        ("GiB is available",),
    ),
    Case(
        "flags",
        "train --d-model 1000000",
        cli("train", "--task", "copy", *TINY, "--d-model", "1000000", "--heads", "1", "--out", "{ws}/f"),
        True,
        ("GiB is available",),
    ),
    *[
        Case(
            "flags",
            f"translate {flag} {value}",
            cli("translate", "--checkpoint", "{ws}/run", flag, value, "abc"),
            True,
            (value,),
        )
        for flag, value in [
            ("--length-penalty", "-1"),
            ("--top-p", "1.5"),
            ("--temperature", "0"),
            ("--beam-width", "0"),
            ("--max-len", "0"),
            ("--top-k", "0"),
        ]
    ],
    Case(
        "flags",
        "evaluate --no-repeat-ngram -1",
        cli("evaluate", "--checkpoint", "{ws}/run", "--no-repeat-ngram", "-1"),
        True,
        ("-1",),
    ),
    Case(
        "checkpoint",
        "average a missing checkpoint",
        cli("average", "{ws}/run", "{ws}/nowhere", "--out", "{ws}/avg"),
        True,
        ("nowhere",),
    ),
    Case(
        "checkpoint",
        "average checkpoints of two models",
        then(
            cli("train", "--task", "copy", *TINY, "--d-model", "32", "--out", "{ws}/other"),
            cli("average", "{ws}/run", "{ws}/other", "--out", "{ws}/avg"),
        ),
        True,
        ("another model",),
    ),
    Case(
        "checkpoint",
        "average into a saved run",
        cli("average", "{ws}/run", "--out", "{ws}/run"),
        True,
        ("--overwrite",),
        keeps="run/model.npz",
    ),
    Case(
        "flags",
        "translate --beam-width wider than the vocabulary",
        cli("translate", "--checkpoint", "{ws}/run", "--strategy", "beam", "--beam-width", "100000", "abc"),
        True,
        ("--beam-width 100000", "exceeds the target vocabulary"),
    ),
    Case(
        "flags",
        "translate --max-len beyond the model's positional table",
        cli("translate", "--checkpoint", "{ws}/run", "--max-len", "100000000", "abc"),
        True,
        ("--max-len 100000000", "exceeds the target positional table"),
    ),
    Case(
        "flags",
        "--resume with another --d-model",
        cli("train", "--resume", "--d-model", "32", "--out", "{ws}/run"),
        True,
        ("--d-model 32 differs",),
        keeps="run/model.npz",
    ),
    Case(
        "flags",
        "--resume keeps the saved run's length",
        then(
            cli("train", "--task", "copy", *TINY, "--out", "{ws}/r"),
            cli("train", "--resume", "--no-progress", "--show", "0", "--out", "{ws}/r"),
        ),
        False,
        check=lambda ws: load_checkpoint(ws / "r" / "model.npz")[1]["step"] == 2,
    ),
    # -- checkpoints -------------------------------------------------------------------------------------
    Case(
        "checkpoint",
        "translate a missing checkpoint",
        cli("translate", "--checkpoint", "{ws}/nowhere", "abc"),
        True,
        ("nowhere",),
    ),
    Case(
        "checkpoint",
        "a random file as model.npz",
        then(write("junk/model.npz", b"\x00" * 100), cli("translate", "--checkpoint", "{ws}/junk", "abc")),
        True,
        ("junk",),
    ),
    Case(
        "checkpoint",
        "a truncated checkpoint",
        then(truncated_checkpoint, cli("translate", "--checkpoint", "{ws}/truncated", "abc")),
        True,
        ("truncated",),
    ),
    Case(
        "checkpoint",
        "a pickled checkpoint is never unpickled",
        then(pickled_checkpoint, cli("translate", "--checkpoint", "{ws}/pickled", "abc")),
        True,
        ("pickled", "never loaded"),
    ),
    Case(
        "checkpoint",
        "metadata without its step",
        then(damaged_checkpoint(lambda a, m: m.pop("step")), cli("evaluate", "--checkpoint", "{ws}/damaged")),
        True,
        ("'step'",),
    ),
    Case(
        "checkpoint",
        "a vocabulary shorter than the model",
        then(
            damaged_checkpoint(lambda a, m: m["tgt_vocab"].pop()),
            cli("translate", "--checkpoint", "{ws}/damaged", "abc"),
        ),
        True,
        ("tgt_vocab",),
    ),
    Case(
        "checkpoint",
        "a weight of the wrong shape",
        then(
            damaged_checkpoint(lambda a, m: a.update({next(iter(a)): np.zeros(3)})),
            cli("translate", "--checkpoint", "{ws}/damaged", "abc"),
        ),
        True,
        ("do not fit",),
    ),
    # -- translate and plot ------------------------------------------------------------------------------
    Case(
        "translate",
        'translate ""',
        cli("translate", "--checkpoint", "{ws}/run", ""),
        True,
        ("sentence 1", "empty"),
    ),
    Case(
        "translate",
        "an empty sentence among real ones",
        cli("translate", "--checkpoint", "{ws}/run", "abc", " "),
        True,
        ("sentence 2",),
    ),
    Case(
        "translate",
        "a sentence longer than the positional table",
        cli("translate", "--checkpoint", "{ws}/run", "a" * 10**6),
        True,
        ("longer than the positional table",),
    ),
    Case(
        "translate",
        "unknown tokens are translated and named",
        cli("translate", "--checkpoint", "{ws}/run", "abz"),
        False,
    ),
    Case(
        "plot",
        "curves of a missing log",
        cli("plot", "curves", "--run", "{ws}/nowhere", "--out", "{ws}/c.png"),
        True,
        ("nowhere",),
    ),
    Case(
        "plot",
        "curves over an earlier picture on a full disk",
        full_disk_for_pictures(
            cli("plot", "curves", "--run", "{ws}/run", "--out", "{ws}/full/curves.png"),
            kept=("full/curves.png", b"the earlier picture"),
        ),
        True,
        (
            "could not write",
            "full/curves.png",
            "No space left on device",
            "the previous curves.png is unchanged",
        ),
    ),
    Case(
        "plot",
        "attention on a disk that fills after the first of its three pictures",
        full_disk_for_pictures(
            cli("plot", "attention", "--checkpoint", "{ws}/run", "abc", "--out", "{ws}/full-att.png"),
            after=1,
        ),
        True,
        (
            "could not write",
            "full-att-decoder.png",
            "No space left",
            "nothing was written there",
            "full-att-encoder.png written before it",
        ),
    ),
    Case(
        "plot",
        "attention of a sentence holding ESC: nothing raw on the terminal",
        no_raw_escape(
            cli("plot", "attention", "--checkpoint", "{ws}/run", "ab\x1b[31mc", "--out", "{ws}/esc.png")
        ),
        False,
        check=lambda ws: all(
            (ws / f"esc-{part}.png").stat().st_size > 0 for part in ("encoder", "decoder", "cross")
        ),
    ),
    Case(
        "plot",
        "curves of a log with a torn line",
        then(
            lambda ws: (ws / "run" / "log.jsonl").open("a").write('{"step": 9, "lo\n'),
            cli("plot", "curves", "--run", "{ws}/run", "--out", "{ws}/c.png"),
        ),
        False,
        check=lambda ws: (ws / "c.png").stat().st_size > 0,
    ),
    # -- the Python API ----------------------------------------------------------------------------------
    Case(
        "api",
        "build_transformer d_model='16'",
        api(lambda ws: tiny_model(d_model="16")),
        True,
        ("d_model", "'16'"),
    ),
    Case(
        "api",
        "build_transformer d_model=np.int64(16)",
        api(lambda ws: tiny_model(d_model=np.int64(16))),
        False,
    ),
    Case(
        "api",
        "build_transformer norm_first='no'",
        api(lambda ws: tiny_model(norm_first="no")),
        True,
        ("norm_first", "'no'"),
    ),
    Case(
        "api",
        "build_transformer dropout='0.1'",
        api(lambda ws: tiny_model(dropout="0.1")),
        True,
        ("dropout", "'0.1'"),
    ),
    Case(
        "api", "build_transformer seed='abc'", api(lambda ws: tiny_model(seed="abc")), True, ("seed", "'abc'")
    ),
    Case(
        "api",
        "build_transformer dropout=nan",
        api(lambda ws: tiny_model(dropout=float("nan"))),
        True,
        ("dropout", "nan"),
    ),
    Case(
        "api",
        "an additive float mask",
        api(mask_of(lambda m, x: m.forward(x, x, np.zeros((1, 1, 1, 3)), None))),
        True,
        ("src_mask", "bool"),
    ),
    Case(
        "api", "a string mask", api(mask_of(lambda m, x: m.forward(x, x, "yes", None))), True, ("src_mask",)
    ),
    Case(
        "api",
        "a mask of the wrong shape",
        api(mask_of(lambda m, x: m.forward(x, x, np.ones((2, 1, 1, 3), bool), None))),
        True,
        ("src_mask",),
    ),
    Case(
        "api",
        "a list of ids",
        api(lambda ws: tiny_model().forward([[1, 2]], ids(1, 2), None, None)),
        True,
        ("src", "list"),
    ),
    Case(
        "api",
        "float ids",
        api(lambda ws: tiny_model().forward(np.ones((1, 2)), ids(1, 2), None, None)),
        True,
        ("src", "float"),
    ),
    Case(
        "api",
        "ids outside the vocabulary",
        api(lambda ws: tiny_model().forward(ids(1, 2) * 99, ids(1, 2), None, None)),
        True,
        ("src", "99"),
    ),
    Case(
        "api", "make_src_mask of a list", api(lambda ws: nt.make_src_mask([[1, 0]], 0)), True, ("src", "list")
    ),
    Case(
        "api",
        "backward before forward",
        api(lambda ws: tiny_model().backward(np.zeros((1, 2, 6)))),
        True,
        ("before forward",),
    ),
    Case("api", "load_state_dict with one bad entry changes nothing", api(load_half_bad), True, ("shape",)),
    Case(
        "api",
        "load_state_dict with NaN",
        api(
            lambda ws: tiny_model().load_state_dict(
                {k: v * np.nan for k, v in tiny_model().state_dict().items()}
            )
        ),
        True,
        ("finite",),
    ),
    Case(
        "api",
        "clip_grad_norm max_norm=-1",
        api(lambda ws: clip_grad_norm(tiny_model().parameters(), -1.0)),
        True,
        ("max_norm", "-1"),
    ),
    Case("api", "Adam lr=-1", api(lambda ws: Adam(tiny_model(), lr=-1.0)), True, ("lr", "-1")),
    Case(
        "api",
        "gradcheck eps=0",
        api(lambda ws: nt.gradcheck(lambda: 1.0, {"x": np.ones(3)}, {"x": np.ones(3)}, eps=0)),
        True,
        ("eps", "0"),
    ),
    Case(
        "api",
        "gradcheck of a loss that is not one number",
        api(lambda ws: nt.gradcheck(lambda: np.ones(3), {"x": np.ones(3)}, {"x": np.ones(3)})),
        True,
        ("one number",),
    ),
    *(
        Case("api", f"gradcheck {what}", api(call), True, names)
        for what, call, names in (
            (
                "seed=-1",
                lambda ws: nt.gradcheck(lambda: 1.0, {"x": np.ones(3)}, {"x": np.ones(3)}, seed=-1),
                ("seed", "-1", "whole number >= 0"),
            ),
            (
                "seed=1.5",
                lambda ws: nt.gradcheck(lambda: 1.0, {"x": np.ones(3)}, {"x": np.ones(3)}, seed=1.5),
                ("seed", "1.5", "whole number >= 0"),
            ),
            (
                "of an analytic gradient given as a list",
                lambda ws: nt.gradcheck(lambda: 1.0, {"x": np.ones(3)}, {"x": [1.0, 1.0, 1.0]}),
                ("analytic['x']", "must be an array", "list"),
            ),
            (
                "of a read-only variable",
                lambda ws: nt.gradcheck(lambda: 1.0, {"x": read_only(np.ones(3))}, {"x": np.ones(3)}),
                ("variables['x']", "read-only", "writeable", "x.copy()"),
            ),
            (
                "of a loss that is not a function",
                lambda ws: nt.gradcheck(3.0, {"x": np.ones(3)}, {"x": np.ones(3)}),  # type: ignore[arg-type]
                ("loss must be a function", "float 3.0"),
            ),
        )
    ),
    Case(
        "api",
        "assert_gradients of no inputs",
        api(lambda ws: nt.assert_gradients(lambda x: (x, None), lambda d, c: d, {})),
        True,
        ("inputs is empty", "at least one floating"),
    ),
    Case(
        "api",
        "gradcheck with max_entries and directions NumPy integers",
        api(
            lambda ws: nt.gradcheck(
                lambda: 1.0,
                {"x": np.ones(3)},
                {"x": np.zeros(3)},
                max_entries=np.int64(2),
                directions=np.int64(4),
            )
        ),
        False,
    ),
    Case(
        "api",
        "assert_module_gradients of a forward that is not a function",
        api(
            lambda ws: nt.assert_module_gradients(
                nt.Linear(3, 2, dtype="float64"), {"x": np.ones((2, 3))}, forward=3
            )
        ),
        True,
        ("forward must be a function", "int 3"),
    ),
    Case(
        "api",
        "greedy decoding of an empty batch",
        api(lambda ws: greedy_decode(tiny_model(), ids(0, 3), None, 5, 1, 2)),
        True,
        ("src",),
    ),
    Case(
        "api",
        "greedy decoding of empty sources",
        api(lambda ws: greedy_decode(tiny_model(), ids(2, 0), None, 5, 1, 2)),
        True,
        ("src",),
    ),
    Case(
        "api",
        "beam wider than the vocabulary",
        api(lambda ws: beam_search(tiny_model(), ids(1, 3), None, 5, 1, 2, beam_width=7)),
        True,
        ("beam_width", "7"),
    ),
    Case(
        "api",
        "a TrainConfig with threads=-1",
        api(lambda ws: TrainConfig(threads=-1)),
        True,
        ("threads", "-1"),
    ),
    Case(
        "api",
        "loading a checkpoint that is not one",
        api(lambda ws: load_checkpoint(ws / "junk" / "model.npz"), (CheckpointError,)),
        True,
        ("junk",),
    ),
    # corpora, encodings, standard input
    Case(
        "corpus",
        "--data in Latin-1 is named as not UTF-8, by line",
        then(
            write("latin1.tsv", "a\tb\ncafé\tcoffee\n".encode("latin-1")),
            cli("train", "--data", "{ws}/latin1.tsv", *TINY, "--out", "{ws}/c23a"),
        ),
        True,
        ("latin1.tsv:2", "not UTF-8"),
    ),
    Case(
        "corpus",
        "--data in UTF-16 without a byte-order mark",
        then(
            write("utf16.tsv", corpus().encode("utf-16-le")),
            cli("train", "--data", "{ws}/utf16.tsv", *TINY, "--out", "{ws}/c23b"),
        ),
        True,
        ("utf16.tsv:1", "not UTF-8", "NUL"),
    ),
    Case(
        "translate",
        "standard input whose line 2 is not UTF-8",
        piped("abc\ncafé\n".encode("latin-1"), "translate", "--checkpoint", "{ws}/run"),
        True,
        ("1 of 2 lines of standard input were not translated", "not UTF-8"),  # line 2 named in a warning
    ),
    Case(
        "translate",
        "300 lines at once, line 290 not UTF-8 (past the first batch of 256): every other line printed",
        translated_lines(
            b"".join(b"caf\xe9\n" if n == 290 else b"abc\n" for n in range(1, 301)),
            "{ws}/run",
            expect=[b"abc"] * 299,
        ),
        True,
        ("1 of 300 lines of standard input were not translated", "not UTF-8"),
    ),
    Case(
        "corpus",
        "line numbers past U+2028, U+0085, \\x0c and a lone \\r in the text",
        then(
            write("seps.tsv", "a\u2028b\tc\x85d\r\ne\x0cf\tg\rh\nno tab\n"),
            cli("train", "--data", "{ws}/seps.tsv", *TINY, "--out", "{ws}/c23c"),
        ),
        True,
        ("seps.tsv:3", "no tab"),
    ),
    Case(
        "corpus",
        "--data with a third column",
        then(
            write("three.tsv", corpus(extra="w\tv\tCC-BY\n")),
            cli("train", "--data", "{ws}/three.tsv", *TINY, "--out", "{ws}/c23d"),
        ),
        True,
        ("three.tsv:61", "3 tab-separated columns"),
    ),
    Case(
        "corpus",
        "--data with an empty source",
        then(
            write("nosource.tsv", corpus(extra=" \tv\n")),
            cli("train", "--data", "{ws}/nosource.tsv", *TINY, "--out", "{ws}/c23e"),
        ),
        True,
        ("nosource.tsv:61", "empty source"),
    ),
    Case(
        "flags",
        "train --vocab-size 1000000000",
        cli("train", "--data", "{ws}/corpus.tsv", *TINY, "--vocab-size", "1000000000", "--out", "{ws}/c23f"),
        True,
        ("--vocab-size", "1000000000", "[256, 1000000]"),
    ),
    Case(
        "run dir",
        "Ctrl-C while the subwords are learned",
        interrupted_while_learning_subwords,
        True,
        ("interrupted before training started", "nothing was written"),
    ),
    Case("translate", "standard input answered line by line while it stays open", line_by_line, False),
    Case("translate", "a reader that stops after one line (| head -n 1)", reader_gone, False),
    Case(
        "corpus",
        "evaluate --data after the training corpus is gone",
        then(
            write("gone.tsv", corpus()),
            cli("train", "--data", "{ws}/gone.tsv", *TINY, "--out", "{ws}/c23g"),
            lambda ws: (ws / "gone.tsv").unlink(),
            write("other.tsv", "w1 x1\tv1 y1\nw2 x2\tv2 y2\n"),
            cli("evaluate", "--checkpoint", "{ws}/c23g", "--data", "{ws}/other.tsv"),
        ),
        False,
    ),
    # average, run identity, decoding options, full disk
    Case(
        "checkpoint",
        "average a run into itself with --overwrite",
        cli("average", "{ws}/run", "--out", "{ws}/run", "--overwrite"),
        True,
        ("checkpoint 1 of those being averaged", "--overwrite"),
        keeps="run/model.npz",
    ),
    Case(
        "checkpoint",
        "average one checkpoint given twice",
        cli("average", "{ws}/run", "{ws}/run/model.npz", "--out", "{ws}/twice.npz"),
        True,
        ("is step", "weigh it double"),
    ),
    Case(
        "checkpoint",
        "average a copy and a reverse model of one size",
        then(
            cli("train", "--task", "reverse", *TINY, "--out", "{ws}/rev23"),
            cli("average", "{ws}/run", "{ws}/rev23", "--out", "{ws}/avg23"),
        ),
        True,
        ("rev23", "another run"),
    ),
    Case(
        "checkpoint",
        "average three checkpoints: the float64 mean",
        then(
            cli(
                "train",
                "--task",
                "copy",
                *TINY,
                "--steps",
                "6",
                "--keep-checkpoints",
                "3",
                "--out",
                "{ws}/kept23",
            ),
            cli(
                "average",
                *(f"{{ws}}/kept23/step-000000{step}.npz" for step in (2, 4, 6)),
                "--out",
                "{ws}/kept23/average.npz",
            ),
        ),
        False,
        check=averaged_is_the_mean,
    ),
    Case("translate", "--no-repeat-ngram 1 uses up the vocabulary", no_repeat_unigrams, False),
    Case(
        "run dir",
        "a full disk when saving",
        full_disk(
            cli("train", "--resume", "--steps", "4", "--no-progress", "--show", "0", "--out", "{ws}/run")
        ),
        True,
        # the evaluation's first save: the checkpoint kept for averaging at the end (--average-last)
        ("run/step-0000004.npz", "No space left on device", "nothing was written there"),
        keeps="run/model.npz",
    ),
    # import a pretrained Marian translator; fine-tune it with train --from
    Case(
        "import",
        "import a directory that does not exist",
        cli("import", "{ws}/no-such-model", "--out", "{ws}/imp1"),
        True,
        ("no-such-model", "not a directory"),
    ),
    Case(
        "import",
        "import a directory without config.json",
        then(
            marian("m-noconfig", lambda d: (d / "config.json").unlink()),
            cli("import", "{ws}/m-noconfig", "--out", "{ws}/imp2"),
        ),
        True,
        ("config.json", "no such file"),
    ),
    Case(
        "import",
        "import a directory without its weights",
        then(
            marian("m-noweights", lambda d: (d / "model.safetensors").unlink()),
            cli("import", "{ws}/m-noweights", "--out", "{ws}/imp3"),
        ),
        True,
        ("model.safetensors", "no such file"),
    ),
    Case(
        "import",
        "import a pickle-only checkpoint (pytorch_model.bin)",
        then(marian("m-pickled", pickled_only), cli("import", "{ws}/m-pickled", "--out", "{ws}/imp4")),
        True,
        ("pytorch_model.bin", "never loaded", "save_pretrained", "safe_serialization=True"),
    ),
    Case(
        "import",
        "import a directory without target.spm",
        then(
            marian("m-nospm", lambda d: (d / "target.spm").unlink()),
            cli("import", "{ws}/m-nospm", "--out", "{ws}/imp5"),
        ),
        True,
        ("target.spm", "no such file"),
    ),
    Case(
        "import",
        "import a source.spm that is not a SentencePiece model",
        then(
            marian("m-badspm", lambda d: (d / "source.spm").write_bytes(b"not a model")),
            cli("import", "{ws}/m-badspm", "--out", "{ws}/imp6"),
        ),
        True,
        ("source.spm", "not a SentencePiece model"),
    ),
    Case(
        "import",
        "import a model that is not Marian's (model_type bart)",
        then(
            marian("m-bart", json_edit("config.json", model_type="bart")),
            cli("import", "{ws}/m-bart", "--out", "{ws}/imp7"),
        ),
        True,
        ("config.json", "model_type is 'bart'", "expected 'marian'"),
    ),
    Case(
        "import",
        "import a vocab.json that does not fit config.json",
        then(
            marian("m-vocab", json_edit("config.json", vocab_size=999, decoder_vocab_size=999)),
            cli("import", "{ws}/m-vocab", "--out", "{ws}/imp8"),
        ),
        True,
        ("config.json", "vocab_size is 999", "vocab.json holds"),
    ),
    Case(
        "import",
        "import weights that do not fit config.json",
        then(
            marian("m-shape", json_edit("config.json", encoder_ffn_dim=64, decoder_ffn_dim=64)),
            cli("import", "{ws}/m-shape", "--out", "{ws}/imp9"),
        ),
        True,
        ("model.safetensors", "do not fit config.json"),
    ),
    Case(
        "import",
        "import a truncated model.safetensors",
        then(
            marian(
                "m-cut",
                lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:500]),
            ),
            cli("import", "{ws}/m-cut", "--out", "{ws}/imp10"),
        ),
        True,
        ("model.safetensors", "corrupt or not a safetensors file"),
    ),
    Case(
        "import",
        "import over a saved run without --overwrite",
        then(marian(), cli("import", "{ws}/opus-mt", "--out", "{ws}/run")),
        True,
        ("--out", "already holds a training run", "--overwrite"),
        keeps="run/model.npz",
    ),
    Case(
        "import",
        "import --out an existing file",
        then(marian(), cli("import", "{ws}/opus-mt", "--out", "{ws}/afile")),
        True,
        ("--out", "is not a directory"),
        keeps="afile",
    ),
    Case(
        "import",
        "import --out the model directory itself",
        then(marian(), cli("import", "{ws}/opus-mt", "--out", "{ws}/opus-mt")),
        True,
        ("--out", "the model directory itself"),
        keeps="opus-mt/config.json",
    ),
    Case(
        "import",
        "import a Marian model, then translate with it",
        then(marian(), cli("import", "{ws}/opus-mt", "--out", "{ws}/imported")),
        False,
        check=imported_translates,
    ),
    Case(
        "import",
        "import again with --overwrite",
        then(marian(), cli("import", "{ws}/opus-mt", "--out", "{ws}/imported", "--overwrite")),
        False,
        check=imported_translates,
    ),
    Case(
        "import",
        "the Python API: import_run with a dtype it cannot use",
        api(lambda ws: import_run(ws / "opus-mt", ws / "imp11", dtype="float16")),
        True,
        ("dtype", "float16"),
    ),
    Case(
        "import",
        "train --resume an imported model",
        cli("train", "--resume", "--out", "{ws}/imported", "--no-progress"),
        True,
        ("--resume", "imported model", "train --from"),
        keeps="imported/model.npz",
    ),
    Case(
        "import",
        "evaluate an imported model without --data",
        cli("evaluate", "--checkpoint", "{ws}/imported"),
        True,
        ("imported/model.npz", "imported model", "--data"),
    ),
    Case(
        "import",
        "train --from without --data",
        cli("train", "--from", "{ws}/imported", "--out", "{ws}/ft1"),
        True,
        ("--from", "--data"),
    ),
    Case(
        "import",
        "train --from with another model shape",
        cli(
            "train",
            "--from",
            "{ws}/imported",
            "--data",
            "{ws}/corpus.tsv",
            "--d-model",
            "32",
            "--out",
            "{ws}/ft2",
        ),
        True,
        ("--d-model 32", "differs from the model of --from", "--dropout"),
    ),
    Case(
        "import",
        "train --from with another tokenizer",
        cli(
            "train",
            "--from",
            "{ws}/imported",
            "--data",
            "{ws}/corpus.tsv",
            "--tokenizer",
            "bpe",
            "--out",
            "{ws}/ft3",
        ),
        True,
        ("--tokenizer 'bpe'", "differs from the run of --from"),
    ),
    Case(
        "import",
        "train --from a run that does not exist",
        cli("train", "--from", "{ws}/no-such-run", "--data", "{ws}/corpus.tsv", "--out", "{ws}/ft4"),
        True,
        ("--from", "no-such-run", "no such file"),
    ),
    Case(
        "import",
        "train --tokenizer marian without --from",
        cli("train", "--data", "{ws}/corpus.tsv", "--tokenizer", "marian", "--out", "{ws}/ft5"),
        True,
        ("--tokenizer marian", "--from"),
    ),
    Case(
        "import",
        "train --from an imported model with --bpe-dropout",
        cli(
            "train",
            "--from",
            "{ws}/imported",
            "--data",
            "{ws}/corpus.tsv",
            "--bpe-dropout",
            "0.1",
            "--out",
            "{ws}/ft6",
        ),
        True,
        ("--bpe-dropout 0.1", "learned BPE subwords only", "marian"),
    ),
    Case(
        "import",
        "fine-tune the imported model on a corpus (train --from), then resume it",
        then(
            cli(
                "train",
                "--from",
                "{ws}/imported",
                "--data",
                "{ws}/corpus.tsv",
                *FINE_TUNE,
                "--out",
                "{ws}/ft",
            ),
            cli("train", "--resume", "--out", "{ws}/ft", "--steps", "3", "--no-progress", "--show", "0"),
        ),
        False,
        check=lambda ws: load_checkpoint(ws / "ft")[1]["step"] == 3,
    ),
    *ISSUE_CASES,
    *LATEST_CASES,
    *STARTING_CASES,
    *TRAINING_TOOLKIT_CASES,
    *TOOLKIT_CASES,
    # MPI
    # under mpiexec -n 2 a refusal or failure on one rank stops every rank, said once; present where
    # mpiexec and mpi4py are (pip install -e '.[mpi]'), as tests/translator/test_distributed.py's runs
    *(
        [
            Case(
                "mpi",
                "train under mpiexec -n 2",
                mpi("train", "--task", "copy", *TINY, "--out", "{ws}/mpi-run"),
                False,
                check=logged_once("mpi-run"),
            ),
            Case(
                "mpi",
                "a refused argument, said once by the ranks",
                mpi("train", "--task", "copy", *TINY, "--steps", "0", "--out", "{ws}/mpi-refused"),
                True,
                ("--steps", "0"),
            ),
            Case(
                "mpi",
                "--out locked by a live run: every rank stops",
                then(
                    write("mpi-locked/.lock", f"{os.getpid()}\n"),  # this process: alive
                    mpi("train", "--task", "copy", *TINY, "--out", "{ws}/mpi-locked"),
                ),
                True,
                ("--out", "mpi-locked", "is locked by process", "may be stale"),
            ),
            Case(
                "mpi",
                "rank 0's disk is full at its save",
                mpi("train", "--task", "copy", *TINY, "--out", "{ws}/mpi-full", fail=(0, "disk full")),
                True,
                ("No space left on device", "mpi-full/step-"),  # the first save: a step-*.npz
            ),
            Case(
                "mpi",
                "rank 1 alone cannot read the corpus",
                mpi("train", "--task", "copy", *TINY, "--out", "{ws}/mpi-data", fail=(1, "unreadable data")),
                True,
                ("rank 1", "--data"),
            ),
            Case(
                "mpi",
                "rank 1 alone runs out of memory mid-run",
                mpi(
                    "train",
                    "--task",
                    "copy",
                    *TINY,
                    "--steps",
                    "4",
                    "--out",
                    "{ws}/mpi-memory",
                    fail=(1, "out of memory"),
                ),
                True,
                ("rank 1", "Unable to allocate"),
            ),
        ]
        if HAVE_MPI
        else []
    ),
]


def workspace(root: Path) -> Path:
    """A trained tiny run in ``root/run``, a corpus and a file, the state the cases start from."""
    write("corpus.tsv", corpus())(root)
    write("afile", "the user's notes")(root)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["train", "--task", "copy", *TINY, "--out", str(root / "run")])
    assert code == 0, err.getvalue()
    return root


def _alarm(signum: int, frame: object) -> None:
    raise Hang()


def classify(case: Case, ws: Path) -> tuple[str, str]:
    """(column, what happened) for one case run in the workspace ``ws``."""
    kept = hashlib.sha256((ws / case.keeps).read_bytes()).hexdigest() if case.keeps else None
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT)
    try:
        code, err = case.run(ws)
    except Hang:
        return "hang", f"still running after {TIME_LIMIT} s"
    except BaseException as error:
        return "traceback", f"{type(error).__name__}: {error}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if kept is not None and (
        not (ws / case.keeps).exists() or hashlib.sha256((ws / case.keeps).read_bytes()).hexdigest() != kept
    ):
        return "loss", f"{case.keeps} was changed"
    message = err.strip().splitlines()[-1] if err.strip() else ""  # the error line comes last
    if case.refused:
        if code == 0:
            return "wrong", "accepted"
        # beside the refusal: warnings, and the note naming the checkpoint a run directory stands for
        lines = [
            line for line in err.strip().splitlines() if "warning:" not in line and ": note: " not in line
        ]
        if "Traceback" in err or len(lines) != 1 or not all(name in lines[0] for name in case.names):
            return "traceback", f"unclear: {err.strip()[:200]!r}"
        return "clean", message
    if code != 0:
        return "wrong", f"refused: {message}"
    if case.check is not None and not case.check(ws):
        return "wrong", "the result is wrong"
    return "clean", message or "done"


def report() -> dict[str, int]:
    counts = dict.fromkeys(COLUMNS, 0)
    with tempfile.TemporaryDirectory() as root:
        ws = workspace(Path(root))
        for case in CASES:
            column, what = classify(case, ws)
            counts[column] += 1
            print(f"| {case.area} | {case.name} | {column} | {what[:110]} |")
    print(
        "\n| "
        + " | ".join(COLUMNS)
        + " |\n|"
        + "---|" * len(COLUMNS)
        + "\n| "
        + " | ".join(str(counts[c]) for c in COLUMNS)
        + " |"
    )
    return counts


if __name__ == "__main__":
    sys.exit(0 if report()["clean"] == len(CASES) else 1)
