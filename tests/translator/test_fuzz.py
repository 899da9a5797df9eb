"""Property-based fuzzing of what reads untrusted files: import's config.json and safetensors
header, --config's TOML and --data's TSV lines. Whatever the bytes, each ends in a result or in one
clear error of the reader's own type naming the file, fast and without large allocations."""

import json
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numpy_transformer.translator.config import read_config_file
from numpy_transformer.translator.corpora import read_tsv
from numpy_transformer.translator.huggingface import PretrainedError, load_pretrained
from numpy_transformer.translator.huggingface.config_json import POSITIVE
from numpy_transformer.translator.huggingface.safetensors_reader import read_header

pytest.importorskip("safetensors", reason="the Marian model directory is written with safetensors")
pytest.importorskip("sentencepiece", reason="the Marian model directory's tokenizer needs sentencepiece")

FUZZ = settings(
    max_examples=60,
    deadline=5000,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MEMORY = 64e6  # bytes: no reader allocates more than this before its answer

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(0, 4), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=2),
)
CONFIG_KEYS = [
    *POSITIVE,  # the sizes the importer checks, and the rest it reads
    "decoder_vocab_size",
    "pad_token_id",
    "eos_token_id",
    "decoder_start_token_id",
    "dropout",
    "activation_function",
    "scale_embedding",
    "normalize_before",
    "tie_word_embeddings",
    "share_encoder_decoder_embeddings",
    "model_type",
]


def bounded(call):
    """``call()``'s result or its error, with the peak memory it took."""
    tracemalloc.start()
    try:
        try:
            outcome = call()
        except Exception as error:
            outcome = error
        return outcome, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    from marian_files import write_model

    return write_model(tmp_path_factory.mktemp("marian"))


@FUZZ
@given(changes=st.dictionaries(st.sampled_from(CONFIG_KEYS), values, min_size=1, max_size=4))
def test_config_json_values_end_in_a_model_or_one_error_naming_the_file(marian, tmp_path_factory, changes):
    directory = tmp_path_factory.mktemp("fuzz-config")
    config = json.loads((marian / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **changes}))
    (directory / "model.safetensors").symlink_to(marian / "model.safetensors")
    outcome, peak = bounded(lambda: load_pretrained(directory))
    if isinstance(outcome, Exception):
        assert isinstance(outcome, PretrainedError), repr(outcome)
        assert "config.json" in str(outcome) or "model.safetensors" in str(outcome), str(outcome)
    assert peak < MEMORY, f"{peak / 1e6:.0f} MB for {changes}"


tensor_entries = st.fixed_dictionaries(
    {
        "dtype": st.one_of(st.sampled_from(["F32", "F16", "BF16", "F64", "I64", "U8", "Q4"]), values),
        "shape": st.one_of(st.lists(st.integers(-2, 10**10), max_size=4), values),
        "data_offsets": st.one_of(st.lists(st.integers(-5, 10**12), min_size=2, max_size=2), values),
    }
)


@FUZZ
@given(
    header=st.dictionaries(st.text(max_size=12), st.one_of(tensor_entries, values), max_size=4),
    length=st.one_of(st.none(), st.integers(0, 2**64 - 1)),
    data=st.binary(max_size=64),
)
def test_safetensors_headers_end_in_tensors_or_one_error_naming_the_file(
    tmp_path_factory, header, length, data
):
    path = tmp_path_factory.mktemp("fuzz-header") / "model.safetensors"
    text = json.dumps(header).encode()
    path.write_bytes((len(text) if length is None else length).to_bytes(8, "little") + text + data)
    outcome, peak = bounded(lambda: read_header(path))
    if isinstance(outcome, Exception):
        assert isinstance(outcome, PretrainedError), repr(outcome)
        assert "model.safetensors: corrupt or not a safetensors file" in str(outcome)
    else:  # every tensor it describes lies within the file and can be read
        for entry in outcome.values():
            assert entry.stop <= path.stat().st_size
            read, _ = bounded(entry.read)
            assert not isinstance(read, Exception) or isinstance(read, PretrainedError), repr(read)
    assert peak < MEMORY


toml_values = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=True).map(lambda x: repr(x).replace("inf", "inf").replace("nan", "nan")),
    st.text(max_size=10).map(json.dumps),
    st.sampled_from(["true", "false", "[1, 2]", "{a = 1}", "1979-05-27", "'x'"]),
)
toml_keys = st.sampled_from(
    ["steps", "lr", "task", "data", "seed", "d_model", "heads", "N", "tokenizer", "nope", "time_budget", "h"]
)


@FUZZ
@given(
    tables=st.lists(
        st.tuples(
            st.sampled_from(["[train]", "[model]", "[[train]]", "[other]", ""]),
            st.lists(st.tuples(toml_keys, toml_values), max_size=4),
        ),
        max_size=3,
    ),
    noise=st.binary(max_size=12),
)
def test_config_toml_ends_in_settings_or_one_error_naming_the_file(tmp_path_factory, tables, noise):
    path = tmp_path_factory.mktemp("fuzz-toml") / "config.toml"
    text = "\n".join(
        f"{table}\n" + "".join(f"{key} = {value}\n" for key, value in pairs) for table, pairs in tables
    )
    path.write_bytes(text.encode() + noise)
    outcome, peak = bounded(lambda: read_config_file(path))
    if isinstance(outcome, Exception):
        assert isinstance(outcome, (ValueError, TypeError)), repr(outcome)
        assert str(path) in str(outcome), str(outcome)
    else:
        assert set(outcome) <= {"model", "train"}
    assert peak < MEMORY


@FUZZ
@given(lines=st.lists(st.one_of(st.binary(max_size=30), st.text(max_size=20).map(str.encode)), max_size=8))
def test_tsv_lines_end_in_pairs_or_one_error_naming_the_file_and_line(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("fuzz-tsv") / "pairs.tsv"
    path.write_bytes(b"\n".join(lines))
    outcome, peak = bounded(lambda: read_tsv(path))
    if isinstance(outcome, Exception):
        assert isinstance(outcome, ValueError), repr(outcome)
        assert f"{path}:" in str(outcome), str(outcome)
    else:
        assert all(
            source.strip() and target.strip() and "\t" not in source + target for source, target in outcome
        )
    assert peak < MEMORY
