"""Build a real English->French (or German, Spanish...) corpus, offline, from the message catalogs
installed on this machine.

Every program translated with gettext ships its messages as compiled catalogs
(``/usr/share/locale/fr/LC_MESSAGES/*.mo``): the English original of each message beside the
French written by the program's human translators (Debian's, GNU's, GNOME's translation teams).
These are real translations, not generated ones: menu entries, error messages, option help,
with placeholders such as ``%s`` and ``%(name)s``.

    python examples/debian_messages.py --out data/messages-en-fr.tsv
    python examples/debian_messages.py --lang de --out data/messages-en-de.tsv
    numpy-transformer train --data data/messages-en-fr.tsv --out runs/messages

Kept: single-line messages of 1 to 25 words whose translation differs from the original; each
English message once (its first translation in catalog-name order), plural forms skipped. The
catalogs differ between systems, so the script prints how many pairs it wrote from how many
catalogs and the file's sha256, to compare with the figures in docs/results.md (measured on Debian 12
"bookworm" with the packages of this project's development image).
"""

from __future__ import annotations

import argparse
import gettext
import hashlib
import sys
from pathlib import Path

LOCALE_DIRS = ("/usr/share/locale", "/usr/share/locale-langpack")
MAX_WORDS = 25


def catalog_pairs(path: Path) -> list[tuple[str, str]]:
    """(English, French) single-form messages of one compiled catalog; an unreadable catalog gives none."""
    try:
        with open(path, "rb") as file:
            catalog = gettext.GNUTranslations(file)._catalog  # the parsed msgid -> msgstr table
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    return [
        (source, target)
        for source, target in catalog.items()
        if isinstance(source, str) and source and target
    ]


def keep(source: str, target: str) -> bool:
    one_line = "\n" not in source and "\n" not in target and "\t" not in source + target
    return (
        one_line
        and source != target
        and 1 <= len(source.split()) <= MAX_WORDS
        and len(target.split()) <= 2 * MAX_WORDS
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--lang", default="fr", help="the target language's locale name (fr, de, es, pt_BR...)"
    )
    parser.add_argument(
        "--out", default=None, help="the TSV file to write (default data/messages-en-LANG.tsv)"
    )
    args = parser.parse_args()
    folders = [Path(root) / args.lang / "LC_MESSAGES" for root in LOCALE_DIRS]
    catalogs = sorted(
        {path.resolve() for folder in folders for path in folder.glob("*.mo")},
        key=lambda path: path.name,
    )
    if not catalogs:
        print(
            f"no message catalogs for --lang {args.lang!r} in {', '.join(map(str, folders))}: install a "
            "package's locale of that language",
            file=sys.stderr,
        )
        return 1
    pairs: dict[str, str] = {}
    for catalog in catalogs:
        for source, target in catalog_pairs(catalog):
            source, target = " ".join(source.split()), " ".join(target.split())
            if keep(source, target):
                pairs.setdefault(source, target)
    out = Path(args.out or f"data/messages-en-{args.lang}.tsv")
    out.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{source}\t{target}\n" for source, target in pairs.items())
    out.write_text(text, encoding="utf-8")
    print(
        f"wrote {len(pairs)} pairs from {len(catalogs)} catalogs to {out} "
        f"(sha256 {hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
