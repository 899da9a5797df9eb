"""A learner's own block-level mistakes, made cold (tests/support/cold_learner_mistakes.py): each is
caught, and `learn check` names its cause; the share named at each level is measured."""

from collections import Counter

import pytest
from cold_learner_mistakes import COLD_HEADER, COLD_MISTAKES, ColdMistake

from numpy_transformer import workbook
from numpy_transformer.workbook import blocks
from numpy_transformer.workbook.verdicts import FunctionVerdict

SYMPTOMS = {"factor", "zero"}  # what a gradient looks like, not why

# the learner wrote against the blocks before post-norm blocks, dropout and latent attention: their
# functions unpack those caches; until their sources are ported, they run only on that layout
WRITTEN_FOR = blocks.ResidualCache._fields == ("norm", "sublayer", "norm_first")
on_their_blocks = pytest.mark.skipif(
    not WRITTEN_FOR,
    reason="the learner's sources unpack the caches of the blocks before dropout and post-norm",
)


def _graded(tmp_path, mistake: ColdMistake) -> tuple[FunctionVerdict, str]:
    path = tmp_path / f"{mistake.id}.py"
    path.write_text(COLD_HEADER + mistake.source)
    (verdict,) = workbook.check(path, [mistake.function])
    return verdict, workbook.format_verdicts([verdict])


def _named(verdict: FunctionVerdict) -> set[str]:
    """The causes a verdict names: its headline's, its gradients', an error's."""
    keys = {g.mistake for g in verdict.gradients if g.status == "wrong"}
    keys |= {verdict.localised.mistake} if verdict.localised else set()
    keys |= {verdict.cause}
    return {key for key in keys if key is not None} - SYMPTOMS


def _right(mistake: ColdMistake, verdict: FunctionVerdict, report: str) -> bool:
    """Whether the report names the cause the learner's mistake has."""
    if mistake.expected is None:
        return False
    if mistake.expected not in workbook.SENTENCES:  # a phrase of the grader's own message
        return mistake.expected in report
    head = workbook.SENTENCES[mistake.expected].split(":")[0].split("{")[0]
    return mistake.expected in _named(verdict) and head in report


def test_the_cold_catalogue_holds_the_learners_96_mistakes():
    assert len(COLD_MISTAKES) == 96
    assert len({m.id for m in COLD_MISTAKES}) == 96
    assert Counter(m.function for m in COLD_MISTAKES) == {
        "residual_backward": 17,
        "feed_forward_backward": 10,
        "encoder_block_backward": 21,
        "decoder_block_backward": 20,
        "encoder_decoder_backward": 28,
    }
    for mistake in COLD_MISTAKES:
        assert f"def {mistake.function}(" in mistake.source, mistake.id
        assert mistake.expected is None or " " in mistake.expected or mistake.expected in workbook.SENTENCES


@on_their_blocks
@pytest.mark.parametrize("mistake", COLD_MISTAKES, ids=[m.id for m in COLD_MISTAKES])
def test_each_cold_mistake_is_caught_and_its_cause_named(tmp_path, mistake):
    verdict, report = _graded(tmp_path, mistake)
    assert verdict.status in ("wrong", "error"), report
    assert report.startswith(f"✖ {mistake.function}"), report
    if mistake.expected is not None:
        assert _right(mistake, verdict, report), report
    if verdict.localised is not None and mistake.expected in workbook.SENTENCES:
        assert verdict.localised.mistake == mistake.expected or verdict.localised.mistake is None, report


@on_their_blocks
def test_the_share_of_cold_mistakes_with_their_cause_named(tmp_path):
    """Measured: 95 of the 96 with the right cause named (M21, a contrived one, is caught with none);
    no wrong cause; each level at 0.9 or more."""
    right: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for mistake in COLD_MISTAKES:
        verdict, report = _graded(tmp_path, mistake)
        assert verdict.status in ("wrong", "error"), report
        total[mistake.function] += 1
        right[mistake.function] += _right(mistake, verdict, report)
    shares = {name: right[name] / total[name] for name in total}
    assert all(share >= 0.9 for share in shares.values()), shares
    assert sum(right.values()) / sum(total.values()) >= 0.98, shares


def test_the_textbook_aid_inside_a_block_keeps_the_headline_and_its_cause(tmp_path):
    from learn_mistakes import BLOCK_MISTAKES, HEADER

    first = "def encoder_block_backward(dout, cache):\n"
    mistake = next(
        m for m in BLOCK_MISTAKES if m.function == "encoder_block_backward" and m.expected == "skipped"
    )
    found = []
    for name, source in (("plain", mistake.source), ("aided", mistake.source.replace(first, first + AID, 1))):
        path = tmp_path / f"{name}.py"
        path.write_text(HEADER + "from numpy_transformer.workbook import textbook\n" + source)
        (verdict,) = workbook.check(path, [mistake.function])
        report = workbook.format_verdicts([verdict])
        assert verdict.localised is not None, report
        found.append((verdict.localised.mistake, report.splitlines()[1]))
    assert found[0] == found[1] and found[0][0] == "skipped", found


AID = "    _tb = textbook(cache, dout)  # the guide's aid: the textbook's gradients, for cmp\n"


def test_a_wrong_function_it_calls_is_said_first(tmp_path):
    path = tmp_path / "work.py"
    path.write_text(
        """
from numpy_transformer.functional import dropout_backward, linear_backward


def relu_backward(dout, cache):
    return dout


def feed_forward_backward(dout, cache):
    dhidden, dw2, db2 = linear_backward(dout, cache.second)
    dhidden = relu_backward(dropout_backward(dhidden, cache.dropout), cache.activation)
    dx, dw1, db1 = linear_backward(dhidden, cache.first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
"""
    )
    report, code = workbook.run_check(path, ["feed_forward_backward"])
    assert code == 1
    lines = report.splitlines()
    assert lines[0].startswith("✖ feed_forward_backward  wrong"), report
    assert lines[1].strip() == "it calls your relu_backward, which is wrong: fix that first", report


def test_a_gradient_returned_in_a_lower_dtype_is_wrong_and_named(tmp_path):
    path = tmp_path / "work.py"
    path.write_text(
        """
from numpy_transformer.workbook import blocks


def encoder_block_backward(dout, cache):
    dx, dparams = blocks.encoder_block_backward(dout, cache)
    return dx.astype("float32"), dparams
"""
    )
    (verdict,) = workbook.check(path, ["encoder_block_backward"])
    report = workbook.format_verdicts([verdict])
    (dx,) = [g for g in verdict.gradients if g.name == "dx"]
    assert dx.status == "wrong" and dx.mistake == "dtype", report
    assert "dtype float32, expected float64" in report
    assert all(g.status != "wrong" for g in verdict.gradients if g.name != "dx"), report
