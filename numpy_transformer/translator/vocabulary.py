"""Vocabularies: the special tokens and their ids (``SpecialIds``: the package's own, or a pretrained
Marian model's), token <-> id tables, and sentences encoded for translating."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"


SPECIALS = (PAD, BOS, EOS, UNK)


PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)


@dataclass(frozen=True)
class SpecialIds:
    """The ids a vocabulary gives its special tokens: the padding, the decoder's start token, the end
    of a sentence and the unknown token. This package's vocabularies put <pad>, <bos>, <eos>, <unk>
    at 0-3; a Marian model's put </s> at 0, <unk> at 1, <pad> last, and start the decoder from <pad>."""

    pad: int = PAD_ID
    bos: int = BOS_ID
    eos: int = EOS_ID
    unk: int = UNK_ID


DEFAULT_IDS = SpecialIds()


class Vocab:
    """Token <-> id, with <pad>=0, <bos>=1, <eos>=2, <unk>=3 first, or a saved list's own special
    ``ids`` (a pretrained model's)."""

    ids = DEFAULT_IDS

    def __init__(self, tokens: Iterable[str]) -> None:
        self.itos = list(SPECIALS) + sorted(set(tokens) - set(SPECIALS))
        self.stoi = {token: index for index, token in enumerate(self.itos)}

    @classmethod
    def from_list(cls, itos: Sequence[str], ids: SpecialIds = DEFAULT_IDS) -> Vocab:
        """The vocabulary of a saved list; its special tokens at ``ids`` (the defaults: 0-3, named as SPECIALS)."""
        if ids == DEFAULT_IDS and tuple(itos[:4]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with {SPECIALS}, got {tuple(itos[:4])}")
        outside = {name: value for name, value in asdict(ids).items() if not 0 <= value < len(itos)}
        if outside:
            raise ValueError(f"special ids {outside} lie outside the vocabulary of {len(itos)} tokens")
        vocab = cls([])
        vocab.itos = list(itos)
        vocab.stoi = {token: index for index, token in enumerate(vocab.itos)}
        vocab.ids = ids
        return vocab

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: Sequence[str]) -> tuple[list[int], list[str]]:
        """Ids for the tokens, and the list of tokens that were unknown (mapped to <unk>)."""
        unknown = [t for t in tokens if t not in self.stoi]
        return [self.stoi.get(t, self.ids.unk) for t in tokens], unknown

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens up to the first <eos>, without <bos>/<pad>."""
        tokens = []
        for index in ids:
            index = int(index)
            if index == self.ids.eos:
                break
            if index not in (self.ids.pad, self.ids.bos):
                tokens.append(self.itos[index])
        return tokens
