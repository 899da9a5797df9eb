"""The proof on real text: which pairs of a corpus of program messages it learns and translates.

A corpus of program messages (``examples/debian_messages.py`` builds one offline from the
gettext catalogs installed on the machine) holds tens of thousands of pairs, most of them too long
or too rare for a small model trained for minutes: language and place names seen once, option help
of twenty words. The proof keeps the short messages made of the corpus's common words ("File not
found", "invalid option", "Cannot open %s"), which a model of width 64 learns in a few thousand
steps, and holds some of them out, unseen, to translate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy

Pairs = list[tuple[str, str]]


def _words(text: str) -> list[str]:
    return text.lower().split()


@dataclass(frozen=True)
class ShortMessages:
    """The pairs whose source has ``fewest_words`` to ``most_words`` words and whose target has at
    most ``most_words + 2`` (French says "the" and "of" more often than English), every word of
    either side (lower case, split at spaces) seen at least ``least_seen`` times on its side of the
    whole corpus; each source once. Shuffled (``seed``), ``held_out`` of them are the test set, as many
    again the dev set, and the rest is trained on."""

    fewest_words: int = 2
    most_words: int = 4
    least_seen: int = 20
    held_out: int = 200
    least_training: int = 1000  # fewer teach too little to prove anything (a rule, not measured)
    seed: int = 0

    def choose(
        self, pairs: Sequence[tuple[str, str]], where: str = "the corpus"
    ) -> tuple[Pairs, Pairs, Pairs]:
        """(train, dev, test) of ``pairs`` (a corpus's (source, target) texts). A corpus with too few
        such pairs is a ValueError that starts with ``where`` (the option and its file) and says how
        many it has and how many the proof needs."""
        seen_source = Counter(word for source, _ in pairs for word in _words(source))
        seen_target = Counter(word for _, target in pairs for word in _words(target))
        chosen: dict[str, str] = {}
        for source, target in pairs:
            source_words, target_words = _words(source), _words(target)
            if (
                self.fewest_words <= len(source_words) <= self.most_words
                and 1 <= len(target_words) <= self.most_words + 2
                and all(seen_source[word] >= self.least_seen for word in source_words)
                and all(seen_target[word] >= self.least_seen for word in target_words)
            ):
                chosen.setdefault(source, target)
        needed = 2 * self.held_out + self.least_training
        if len(chosen) < needed:
            raise ValueError(
                f"{where}: {len(chosen)} of its {len(pairs)} pairs are short messages of common words "
                f"({self.fewest_words} to {self.most_words} words, each seen {self.least_seen} times or more), "
                f"expected {needed} at least: give a larger corpus of program messages "
                "(examples/debian_messages.py builds one)"
            )
        kept = list(chosen.items())
        order = numpy.random.default_rng(self.seed).permutation(len(kept))
        shuffled = [kept[i] for i in order]
        held = self.held_out
        return shuffled[2 * held :], shuffled[held : 2 * held], shuffled[:held]


SHORT_MESSAGES = ShortMessages()
