"""learn prove --corpus: the proof on real text. Which short messages of a corpus it learns, the
learner's run weight for weight the textbook's when every function is exact, and what it prints."""

import re
import subprocess
import sys
from dataclasses import replace

import pytest
from learn_mistakes import solved_workbook

from numpy_transformer import workbook
from numpy_transformer.translator.tasks import PairsTask
from numpy_transformer.workbook.commands import proof_recipe
from numpy_transformer.workbook.messages import SHORT_MESSAGES
from numpy_transformer.workbook.proof import MESSAGES, NUMBERS, prove

VERBS = {"open": "ouvrir", "close": "fermer", "save": "enregistrer", "delete": "supprimer",
         "copy": "copier", "move": "déplacer", "print": "imprimer", "read": "lire"}  # fmt: skip
ADJECTIVES = {"new": "nouveau", "old": "ancien", "hidden": "caché", "empty": "vide",
              "shared": "partagé", "local": "local", "remote": "distant", "current": "actuel"}  # fmt: skip
NOUNS = {"file": "fichier", "folder": "dossier", "window": "fenêtre", "page": "page", "image": "image",
         "key": "clé", "user": "utilisateur", "group": "groupe", "list": "liste", "table": "table",
         "server": "serveur", "account": "compte", "message": "message", "device": "périphérique",
         "disk": "disque", "archive": "archive", "branch": "branche", "commit": "commit", "tag": "étiquette",
         "package": "paquet", "link": "lien", "font": "police", "color": "couleur", "printer": "imprimante",
         "network": "réseau"}  # fmt: skip


def messages() -> list[tuple[str, str]]:
    """1,600 short messages of common words: "open new file" -> "ouvrir le fichier nouveau"."""
    return [
        (f"{verb} {adjective} {noun}", f"{VERBS[verb]} le {NOUNS[noun]} {ADJECTIVES[adjective]}")
        for verb in VERBS
        for adjective in ADJECTIVES
        for noun in NOUNS
    ]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "numpy_transformer", *args], capture_output=True, text=True)


def test_the_short_messages_of_common_words_are_chosen_and_split_the_same_every_time():
    kept = messages()
    left_out = [
        ("Krenak", "krenak"),  # one word, and seen once
        ("file", "fichier"),  # one word
        ("open new zanzibar", "ouvrir le zanzibar nouveau"),  # a word seen once
        ("open new file and folder too", "ouvrir le fichier et le dossier aussi"),  # six words
        ("open file", "ouvrir le fichier le dossier le groupe le lien"),  # a target of eight words
    ]
    repeated = [("open new file", "une autre traduction")]  # each source once: the first translation
    train, dev, test = SHORT_MESSAGES.choose(kept + left_out + repeated)
    assert (len(train), len(dev), len(test)) == (1200, 200, 200)
    assert sorted(train + dev + test) == sorted(kept)
    assert (train, dev, test) == SHORT_MESSAGES.choose(kept + left_out + repeated)
    assert test != kept[:200]  # shuffled before it is split


def test_a_corpus_with_too_few_short_messages_is_refused_by_its_option_and_file():
    with pytest.raises(ValueError) as refused:
        SHORT_MESSAGES.choose(messages()[:1000], "--corpus small.tsv")
    assert str(refused.value) == (
        "--corpus small.tsv: 1000 of its 1000 pairs are short messages of common words (2 to 4 words, each "
        "seen 20 times or more), expected 1400 at least: give a larger corpus of program messages "
        "(examples/debian_messages.py builds one)"
    )


def test_the_proof_on_real_text_of_a_solved_workbook_is_the_textbooks_run_weight_for_weight(tmp_path):
    """The proof's engine on the messages (a small model, a few steps): the learner's run and the
    textbook's have identical weights and translate the unseen messages identically."""
    path = tmp_path / "mine.py"
    path.write_text(solved_workbook())
    block_table: dict = {}
    table, verdicts = workbook.learner_functions(path, block_table)
    assert all(v.status == "done" for v in verdicts)
    ran: set = set()
    theirs = workbook.training.guarded({**table, **block_table}, path, ran)
    recipe = replace(MESSAGES, d_model=16, N=1, h=2, d_ff=32, steps=12, test_size=40)
    task = PairsTask(*SHORT_MESSAGES.choose(messages()), MESSAGES.tokenizer)
    said: list[str] = []
    result = prove(task, theirs, recipe, say=said.append)
    assert "encoder_decoder_backward" in ran  # the learner's whole model ran, not the textbook's
    assert [line.split(" (")[0] for line in said] == [
        "your run: step 12 of 12",
        "your run: translating 40 messages it never saw",
        "the textbook's run: step 12 of 12",
        "the textbook's run: translating 40 messages it never saw",
    ], said
    assert result.identical and result.largest_difference == 0.0
    assert result.yours_translated == result.textbook_translated
    assert len(result.yours_translated.texts) == 40 and result.test == task.test[:40]
    assert 0.0 <= result.yours_translated.chrf <= 100.0


def test_learn_prove_on_a_corpus_prints_its_scores_and_translations_of_unseen_messages(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(solved_workbook())
    corpus = tmp_path / "messages.tsv"
    corpus.write_text("".join(f"{source}\t{target}\n" for source, target in messages()), encoding="utf-8")
    done = cli("learn", "prove", str(path), "--corpus", str(corpus), "--steps", "2", "--no-compare")
    assert done.returncode == 1, done.stderr  # two steps translate nothing yet
    lines = done.stdout.strip().splitlines()
    assert re.search(
        r", 2 steps of short program messages: exact on \d+\.\d%, BLEU \d+\.\d, chrF \d+\.\d on 200 messages it "
        r"never saw \(\d+ s, training and translating\)$",
        lines[0],
    ), lines[0]
    assert lines[1] == "your translations of messages it never saw (the reference after =):"
    test = SHORT_MESSAGES.choose(messages())[2]
    for line, (source, reference) in zip(lines[2:10], test):
        assert line.startswith(f"  {source}  ->  ") and line.endswith(f"  (= {reference})"), line
    assert lines[10] == "not yet: the target is BLEU 20"
    assert "learn prove: your run: step 2 of 2 (" in done.stderr
    assert "learn prove: your run: translating 200 messages it never saw" in done.stderr


def test_learn_prove_refuses_a_corpus_it_cannot_read_or_too_small_before_the_learners_file_runs(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("raise SystemExit('the learner file ran')\n")
    done = cli("learn", "prove", str(path), "--corpus", str(tmp_path / "none.tsv"))
    assert done.returncode == 2 and f"--corpus {tmp_path / 'none.tsv'}: no such file" in done.stderr, (
        done.stderr
    )
    small = tmp_path / "small.tsv"
    small.write_text(
        "".join(f"{source}\t{target}\n" for source, target in messages()[:1000]), encoding="utf-8"
    )
    done = cli("learn", "prove", str(path), "--corpus", str(small))
    assert done.returncode == 2 and "expected 1400 at least" in done.stderr, done.stderr
    assert "the learner file ran" not in done.stderr


def test_the_help_and_the_steps_name_each_proofs_own_recipe():
    shown = " ".join(cli("learn", "prove", "--help").stdout.split())
    assert (
        f"default: the proof's own, {NUMBERS.steps} on the numbers, {MESSAGES.steps} with --corpus" in shown
    )
    assert f"translate {MESSAGES.test_size} of them it never saw, with BLEU and chrF" in shown
    assert proof_recipe(None, real_text=True) is MESSAGES and proof_recipe(None) is NUMBERS
    assert proof_recipe(7, real_text=True).steps == 7
    with pytest.raises(
        ValueError, match=re.escape(f"[1, {10 * MESSAGES.steps}] (the proof's own: 1000), got 0")
    ):
        proof_recipe(0, real_text=True)
