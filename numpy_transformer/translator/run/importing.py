"""A Hugging Face model directory written as a run directory (``numpy-transformer import``): the
model and its tokenizer and vocabularies, read by the Hugging Face formats (huggingface.loading,
huggingface.tokenizer_files), saved as a checkpoint and a config.toml that translate, evaluate
--data, plot attention and train --from read."""

from __future__ import annotations

import uuid
from contextlib import suppress
from dataclasses import asdict
from pathlib import Path

from ...model import DTYPES, Transformer
from ..config import ModelConfig, TrainConfig, config_toml
from ..huggingface.config_json import read_config
from ..huggingface.directory import TOKENIZER_JSON, PretrainedError, weights_path
from ..huggingface.loading import load_model
from ..huggingface.tokenizer_files import read_exported_tokenizer, read_tokenizer
from ..tasks import TranslationTask
from ..tokenizers import Tokenizer
from .checkpoint import FILENAME, file_sha256, save_checkpoint, task_recipe
from .directory import CONFIG_NAME, RunLock, check_run_directory, run_files, write_text_atomically


def import_run(
    directory: str | Path, out: str | Path, overwrite: bool = False, dtype: str | None = None
) -> tuple[Path, Transformer]:
    """Write the Marian or Pegasus model in ``directory`` as an ordinary run directory ``out``:
    ``model.npz`` (its weights, its tokenizer, its vocabularies and special ids, a run id of its own)
    and ``config.toml`` (its [model] settings). translate, evaluate --data, plot attention and
    train --from read it. Returns (the checkpoint's path, the model). The tokenizer is an export's
    ``tokenizer.json`` (byte-level BPE or characters: read_exported_tokenizer) where there is one,
    else Marian's SentencePiece models (``source.spm``, ``target.spm``, ``vocab.json``).

    Every file is checked before the weights are read, and ``out`` as ``train --out`` is: a run there
    is replaced only with ``overwrite``, and only once the new one is written (atomically).
    """
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"--dtype must be {' or '.join(DTYPES)}, got {dtype!r}")
    directory = Path(directory)
    config = read_config(directory)
    weights = weights_path(directory)
    splitter: Tokenizer
    if (directory / TOKENIZER_JSON).is_file():
        splitter, (vocab, target_vocab) = read_exported_tokenizer(directory, config)
    elif config["model_type"] == "pegasus":
        raise PretrainedError(
            f"{directory / TOKENIZER_JSON}: no such file: a Pegasus model's tokenizer is read only from the "
            "tokenizer.json of this package's export (a byte-level BPE or character run's); another Pegasus "
            "tokenizer (spiece.model) is not one this package has"
        )
    else:
        splitter, vocab = read_tokenizer(directory, config)
        target_vocab = vocab
    target = Path(out).expanduser()
    if target.resolve() == directory.resolve():
        raise ValueError(f"--out {out} is the model directory itself: choose a run directory of its own")
    target = check_run_directory(target, resume=False, overwrite=overwrite, command="import")
    model = load_model(directory, dtype, copies=2)  # the model, and the host copy of its weights saved
    task = TranslationTask(splitter, [], [], [], vocabularies=(vocab, target_vocab))
    meta = {
        "model": asdict(model.config),
        "run_id": uuid.uuid4().hex,
        "step": 0,
        "train": {},  # no training run: train --from starts one
        "optimizer": {},
        "task": task_recipe(task, TrainConfig()),
        "src_vocab": vocab.itos,
        "tgt_vocab": target_vocab.itos,
        "imported_from": {"directory": str(directory.resolve()), "weights_sha256": file_sha256(weights)},
    }
    arrays = {f"param/{name}": value for name, value in model.state_dict().items()}
    created = not target.exists()
    written = [target / FILENAME, target / CONFIG_NAME]
    try:
        with RunLock(target):
            save_checkpoint(written[0], arrays, meta)
            write_text_atomically(written[1], config_toml(ModelConfig.from_model(model.config)))
            for old in run_files(target):  # --overwrite: the replaced run's other files, once ours are in
                if old not in written:
                    old.unlink()
    except BaseException:
        if created:  # nothing of the user's is there: leave no half-made run
            for path in written:
                path.unlink(missing_ok=True)
            with suppress(OSError):
                target.rmdir()
        raise
    return written[0], model
