"""Reading text: lines of a file or of standard input (bounded, decoded, their control characters
made printable) and ``source<TAB>target`` corpora."""

from __future__ import annotations

import re
import select
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

MAX_LENGTH = 256  # tokens on a side of a corpus pair; longer pairs (a stray 10 MB line) are left out


UTF8_BOM = b"\xef\xbb\xbf"


UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


# Unicode's format controls (category Cf) that change how a terminal shows the text around them, or
# hide in it: bidi embeddings, overrides, isolates and marks, zero-width space, word joiner,
# invisible operators, the byte-order mark, interlinear annotations, and the tags outside a flag.
# The others are text: the joiners (emoji sequences, Persian, Indic scripts), the soft hyphen,
# Arabic's number signs and the format controls of Mongolian, hieroglyphs, shorthand and music.
_FORMAT = (
    r"\u061c\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    r"\U000e0001\U000e0020-\U000e007f"
)
# an emoji flag of tags (England's: U+1F3F4, tag letters, the cancel tag) is kept whole, the first
# alternative; any other control is the second
_CONTROL = re.compile(
    r"(\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f)"
    rf"|[\x00-\x1f\x7f-\x9f\u2028\u2029{_FORMAT}]"
)


def _escaped(match: re.Match[str]) -> str:
    return match.group(1) or match.group().encode("unicode_escape").decode("ascii")


def printable(text: str) -> str:
    """``text`` with its control characters (tab, newline, carriage return, NUL, the terminal's ESC,
    line and paragraph separators) and Unicode's format controls (bidi overrides and isolates
    U+202A-U+202E and U+2066-U+2069, the marks U+200E and U+200F, zero-width space U+200B, the
    byte-order mark, ...) written as Python escapes (\\t, \\n, \\x1b, \\u2028, \\u202e): one line
    of output per sentence, shown in the order it was written, and nothing a terminal would obey.
    The other format controls are text and are kept: the joiners U+200C and U+200D and an emoji
    flag's tags (emoji sequences, Persian, Indic scripts), the soft hyphen, Arabic's number signs,
    and the format controls of Mongolian, Egyptian hieroglyphs, shorthand and musical notation."""
    return _CONTROL.sub(_escaped, text)


def text_lines(lines: Iterable[bytes], name: str, start: int = 1) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of UTF-8 ``lines``, as a binary file yields them; ``name``
    (a file, "standard input") and the number name a line that is not UTF-8 text in a ValueError
    (text_line's).

    Lines end at b"\\n" only, so the numbers are the file's own, whatever the text holds (U+2028,
    U+0085, \\x0c and a lone \\r are characters of the line, where str.splitlines would end it);
    ``start`` numbers the first line given (a stream read in parts).
    """
    for number, line in enumerate(lines, start=start):
        if number == 1:
            refuse_utf16(line, name)
        yield number, text_line(line, name, number)


def refuse_utf16(first_line: bytes, name: str) -> None:
    """Refuse (ValueError naming ``name``) a text whose first line starts with a UTF-16 byte-order
    mark: none of its lines is UTF-8."""
    if first_line.startswith(UTF16_BOMS):
        raise ValueError(
            f"{name}:1: not UTF-8 text: it starts with a UTF-16 byte-order mark (convert it: "
            "iconv -f UTF-16 -t UTF-8)"
        )


def text_line(line: bytes, name: str, number: int) -> str:
    """The text of line ``number`` of ``name``, as a binary file yields it: its b"\\n" and a CRLF's
    \\r dropped, and line 1's UTF-8 byte-order mark. A line that is not UTF-8 is refused by name and
    number (ValueError); so is a NUL byte, valid UTF-8 but never text: it is what a UTF-16 or a
    binary file nearly always holds."""
    line = line[:-1] if line.endswith(b"\n") else line
    line = line[:-1] if line.endswith(b"\r") else line
    if number == 1:
        line = line.removeprefix(UTF8_BOM)
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{name}:{number}: not UTF-8 text: the line's byte {error.start + 1}, "
            f"{line[error.start]:#04x}, is not UTF-8 (a Latin-1 or Windows-1252 file? convert it: "
            "iconv -f LATIN1 -t UTF-8)"
        ) from None
    if "\0" in text:
        raise ValueError(
            f"{name}:{number}: not UTF-8 text: the line holds a NUL byte (a UTF-16 or binary file? "
            "convert UTF-16 with iconv -f UTF-16 -t UTF-8)"
        )
    return text


def line_batches(stream: Any, size: int, chunk: int = 1 << 16) -> Iterator[list[bytes]]:
    """The lines of a binary ``stream`` (standard input's raw file), in lists of at most ``size``.

    A list is handed on when it is full, or as soon as no more input is waiting (a user typing, a
    ``tail -f``): nothing waits for the end of the input, and what is held stays within one list
    and one ``chunk``. ``stream.read(chunk)`` must return what is available without waiting for
    all of it, as an unbuffered file does. The last line may lack its b"\\n".
    """
    try:
        descriptor: int | None = stream.fileno()
    except (AttributeError, OSError, ValueError):  # an in-memory stream: everything is waiting already
        descriptor = None

    def waiting() -> bool:
        if descriptor is None:
            return True
        try:
            return bool(select.select([descriptor], [], [], 0)[0])
        except (OSError, ValueError):  # a descriptor select cannot watch: read on, as a file
            return True

    lines: list[bytes] = []
    rest = bytearray()  # the line being read, grown in place: a 100 MB line is not copied per chunk
    while True:
        if lines and not waiting():  # the input pauses: hand on what has come
            yield lines
            lines = []
        data = stream.read(chunk)
        if data is None:  # a non-blocking descriptor with nothing yet
            assert descriptor is not None  # only a file descriptor can be non-blocking
            select.select([descriptor], [], [])
            continue
        if not data:
            break
        end = data.rfind(b"\n")
        if end < 0:
            rest += data
            continue
        complete = (bytes(rest) + data[:end]).split(b"\n")
        rest = bytearray(data[end + 1 :])
        for line in complete:
            lines.append(line + b"\n")
            if len(lines) == size:
                yield lines
                lines = []
    if rest:
        lines.append(bytes(rest))
    if lines:
        yield lines


def read_tsv(path: str | Path, flag: str = "--data") -> list[tuple[str, str]]:
    """Pairs from a UTF-8 ``source<TAB>target`` file, one pair a line; blank lines are skipped
    (:func:`read_numbered_tsv` without the line numbers)."""
    return [(source, target) for _, source, target in read_numbered_tsv(path, flag)]


def read_numbered_tsv(path: str | Path, flag: str = "--data") -> list[tuple[int, str, str]]:
    """(line number, source, target) from a UTF-8 ``source<TAB>target`` file; blank lines are skipped.

    A line is refused by file:line when it is not UTF-8 text, lacks the tab, has more than two
    columns (a third column is never dropped unseen: cut it first, ``cut -f 1,2``) or an empty side;
    a file that cannot be read, by ``flag`` (the option that named it) and path.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory: give the TSV file of sentence pairs")
    if not path.is_file():  # a FIFO or a device exists: "no such file" would send the user looking
        what = (
            "not a regular file, expected the TSV file of sentence pairs" if path.exists() else "no such file"
        )
        raise ValueError(f"{flag} {path}: {what}")
    pairs = []
    try:
        with open(path, "rb") as file:
            for number, line in text_lines(file, str(path)):
                if not line.strip() and "\t" not in line:
                    continue
                columns = line.split("\t")
                if len(columns) < 2:
                    raise ValueError(
                        f"{path}:{number}: no tab in the line, expected 'source<TAB>target': {line[:60]!r}"
                    )
                if len(columns) > 2:
                    raise ValueError(
                        f"{path}:{number}: {len(columns)} tab-separated columns, expected 2 "
                        f"('source<TAB>target'; keep the first two with cut -f 1,2): {line[:60]!r}"
                    )
                source, target = columns[0].strip(), columns[1].strip()
                if not source or not target:
                    side = "source" if not source else "target"
                    raise ValueError(
                        f"{path}:{number}: empty {side}, expected 'source<TAB>target': {line[:60]!r}"
                    )
                pairs.append((number, source, target))
    except OSError as error:
        raise ValueError(f"{flag} {path}: cannot be read ({error.strerror or error})") from error
    if not pairs:
        what = "is empty" if path.stat().st_size == 0 else "holds only blank lines"
        raise ValueError(f"{flag} {path}: the file {what}, it holds no sentence pairs")
    return pairs
