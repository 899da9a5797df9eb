"""translate as a filter: standard input read as it comes and checked as UTF-8 line by line, and
standard output that may close early (``| head``)."""

import io
import os
import queue
import subprocess
import sys
import threading

import pytest

from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.corpora import line_batches, printable
from numpy_transformer.translator.training import Trainer

TIMEOUT = 120  # seconds any one exchange may take; a hang fails the test instead of stopping the suite


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    trainer = Trainer.create(
        TrainConfig(task="copy", steps=2, batch_size=4), {"d_model": 16, "N": 1, "h": 2, "d_ff": 32}
    )
    trainer.train_step()
    return trainer.save(tmp_path_factory.mktemp("run"))


def translate(checkpoint, *args, **kwargs):
    return subprocess.Popen(
        [sys.executable, "-m", "numpy_transformer", "translate", "--checkpoint", str(checkpoint), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,
    )


def lines_of(stream):
    """A queue of the stream's lines, read on a thread: a test waits for one with a timeout."""
    lines = queue.Queue()

    def read():
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_each_line_on_standard_input_is_translated_before_the_next_is_written(checkpoint):
    process = translate(checkpoint)
    try:
        replies = lines_of(process.stdout)
        for sentence in (b"abc", b"cab", b"bbca"):
            process.stdin.write(sentence + b"\n")
            process.stdin.flush()  # and the input stays open, as a user's or tail -f's
            reply = replies.get(timeout=TIMEOUT)
            assert reply is not None and reply.startswith(sentence + b"\t"), process.stderr.read()
        process.stdin.close()
        assert replies.get(timeout=TIMEOUT) is None
        assert process.wait(timeout=TIMEOUT) == 0
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize(
    "given",
    [
        [],  # standard input
        ["abc"] * 5000,  # arguments
    ],
)
def test_a_reader_that_closes_early_ends_translate_quietly_with_141(checkpoint, given):
    process = translate(checkpoint, *given)
    try:
        if not given:
            threading.Thread(
                target=lambda: (process.stdin.write(b"abc\n" * 5000), process.stdin.close()), daemon=True
            ).start()
        first = process.stdout.readline()  # more than a pipe holds follows: a write must fail
        assert first.startswith(b"abc\t")
        process.stdout.close()  # as head -n 1 does
        assert process.wait(timeout=TIMEOUT) == 141
        error = process.stderr.read().decode()
        assert error == "", error
    finally:
        process.kill()
        process.wait()


def test_the_whole_pipeline_with_head(checkpoint):  # 5,000 translations: more than a pipe holds
    command = (
        f"yes abc | head -n 5000 | {sys.executable} -m numpy_transformer translate --checkpoint "
        f"{checkpoint} | head -n 1; echo ${{PIPESTATUS[2]}}"
    )
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=TIMEOUT)
    assert result.stdout.splitlines()[0].startswith("abc\t") and result.stdout.splitlines()[1] == "141"
    assert result.stderr == ""


def test_standard_input_in_utf16_is_refused_whole_by_its_first_line(checkpoint):
    process = translate(checkpoint)
    out, error = process.communicate("abc\ncab\n".encode("utf-16"), timeout=TIMEOUT)
    assert process.returncode == 2 and out == b""
    lines = error.decode().splitlines()
    assert (
        len(lines) == 1 and "standard input:1: not UTF-8 text: it starts with a UTF-16 byte-order" in lines[0]
    )


@pytest.mark.parametrize(
    "content, translated, messages",
    [
        (
            "abc\ncafé\n".encode("latin-1"),
            ["abc"],
            ["standard input:2: not UTF-8 text: the line's byte 4, 0xe9"],
        ),
        (
            "abc\ncab\n".encode("utf-16-le"),
            [],
            [f"standard input:{n}: not UTF-8 text: the line holds a NUL byte" for n in (1, 2, 3)],
        ),
        (
            "a\u2028b\x0cc\x85d\re\n\nabc\n".encode() + "café\n".encode("cp1252") + b"cab\n",
            ["a\\u2028b\\x0cc\\x85d\\re", "abc", "cab"],
            ["standard input:4: not UTF-8 text"],
        ),
    ],
)
def test_a_line_of_standard_input_that_is_not_utf8_is_named_by_line_and_left_out(
    checkpoint, content, translated, messages
):
    process = translate(checkpoint)
    out, error = process.communicate(content, timeout=TIMEOUT)
    assert process.returncode == 2
    assert [line.split("\t")[0] for line in out.decode().splitlines()] == translated
    *said, summary = error.decode().splitlines()
    warnings = [line for line in said if "not translated" in line]  # beside the <unk> ones of the copy task
    assert len(warnings) == len(messages) and all(
        "warning: not translated: " + message in warning for warning, message in zip(warnings, messages)
    ), error.decode()
    assert summary.endswith(
        f"error: {len(messages)} of {len(messages) + len(translated)} lines of standard input were not "
        "translated (each named above): not UTF-8 text"
    )


def test_every_good_line_is_translated_whatever_the_timing_of_a_bad_one_after_the_first_batch(checkpoint):
    """300 lines written at once: the first batch (256 lines) is full before line 290, which is not
    UTF-8, is read. Lines 257-289 and 291-300 are translated all the same."""
    lines = [b"abc" if n % 2 else b"cab" for n in range(1, 301)]
    lines[289] = "café".encode("latin-1")
    process = translate(checkpoint)
    out, error = process.communicate(b"\n".join(lines) + b"\n", timeout=TIMEOUT)
    assert process.returncode == 2
    assert [line.split(b"\t")[0] for line in out.splitlines()] == lines[:289] + lines[290:]
    assert error.decode().splitlines() == [
        "numpy-transformer translate: warning: not translated: standard input:290: not UTF-8 text: the "
        "line's byte 4, 0xe9, is not UTF-8 (a Latin-1 or Windows-1252 file? convert it: iconv -f LATIN1 -t "
        "UTF-8)",
        "numpy-transformer translate: error: 1 of 300 lines of standard input were not translated (each "
        "named above): not UTF-8 text",
    ]


def test_a_line_too_long_is_named_and_left_out_and_the_others_translated(checkpoint):
    process = translate(checkpoint)
    out, error = process.communicate(("abc\u2028c\r\n\n" + "a" * 5000 + "\ncab\n").encode(), timeout=TIMEOUT)
    assert process.returncode == 2
    assert [line.split("\t")[0] for line in out.decode().splitlines()] == ["abc\\u2028c", "cab"]
    warning, summary = [line for line in error.decode().splitlines() if "not translated" in line]
    assert "warning: not translated: standard input:3 ('aaaa" in warning and "5,000 tokens" in warning
    assert summary.endswith(
        "error: 1 of 3 lines of standard input were not translated (each named above): "
        "longer than the model's positional table"
    )


def test_line_batches_hand_on_full_batches_and_the_rest():
    stream = io.BytesIO(b"".join(b"line %d\n" % i for i in range(10)) + b"last, without a newline")
    batches = list(line_batches(stream, 4, chunk=7))  # lines cut across chunks too
    assert [len(batch) for batch in batches] == [4, 4, 3]
    assert b"".join(b"".join(batch) for batch in batches) == stream.getvalue()


def test_line_batches_hand_on_what_has_come_when_the_input_pauses():
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb", buffering=0) as stream, os.fdopen(write_end, "wb", buffering=0) as writer:
        batches = line_batches(stream, 256)
        got = queue.Queue()
        writer.write(b"one\ntwo\n")
        threading.Thread(target=lambda: got.put(next(batches)), daemon=True).start()
        assert got.get(timeout=TIMEOUT) == [b"one\n", b"two\n"]  # the pipe is still open
        writer.write(b"three\n")
        threading.Thread(target=lambda: got.put(next(batches)), daemon=True).start()
        assert got.get(timeout=TIMEOUT) == [b"three\n"]


def test_format_controls_are_printed_as_escapes_and_emoji_and_joiners_kept():
    import unicodedata

    # every format control a terminal's bidi would obey, or that hides in the text, is escaped; the
    # others are text: the joiners (emoji sequences, Persian, Indic), the soft hyphen, Arabic's number
    # signs, Mongolian's vowel separator, the format controls of hieroglyphs, shorthand and music
    format_controls = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    escaped = {c for c in format_controls if printable(c) != c}
    hiding = {0x61C, 0x200B, 0x200E, 0x200F, 0xFEFF, 0xE0001, *range(0x202A, 0x202F), *range(0x2060, 0x2065)}
    hiding |= {*range(0x2066, 0x2070), *range(0xFFF9, 0xFFFC), *range(0xE0020, 0xE0080)}
    assert escaped == {chr(c) for c in hiding if unicodedata.category(chr(c)) == "Cf"}
    assert (
        printable("Mi\u00adnis\u00adter \u0600\u0661\u0662 \U00013430")
        == "Mi\u00adnis\u00adter \u0600\u0661\u0662 \U00013430"
    )
    assert (
        printable("\u202eevil\u2066x\u2069 \u200b\u200f\ufeff")
        == "\\u202eevil\\u2066x\\u2069 \\u200b\\u200f\\ufeff"
    )
    text = "café 日本 👨\u200d👩\u200d👧 👍🏽 🇫🇷 \U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"
    assert printable(text) == text  # accents, CJK, emoji of joiners, modifiers, flags (England's of tags)
    assert printable("\U000e0067\U000e0062 hidden") == "\\U000e0067\\U000e0062 hidden"  # tags outside a flag
    assert printable("a\tb\x1b[31m\u2028") == "a\\tb\\x1b[31m\\u2028"


def test_train_draws_no_progress_bar_into_a_file(tmp_path):
    """A bar redrawn by carriage returns would make standard error sent to a file one long line:
    where it is not a terminal there is none, and the log lines (standard output) tell the progress."""
    pytest.importorskip("tqdm")
    argv = ["train", "--task", "copy", "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "16"]
    argv += ["--batch-size", "8", "--steps", "6", "--eval-every", "3", "--log-every", "1", "--show", "0"]
    with open(tmp_path / "err.txt", "wb") as err:
        done = subprocess.run(
            [sys.executable, "-m", "numpy_transformer", *argv, "--out", str(tmp_path / "run")],
            stdout=subprocess.PIPE,
            stderr=err,
            timeout=TIMEOUT,
        )
    assert done.returncode == 0
    assert b"\r" not in (tmp_path / "err.txt").read_bytes()
    assert b"step 6" in done.stdout or b"6/6" in done.stdout, done.stdout.decode()
