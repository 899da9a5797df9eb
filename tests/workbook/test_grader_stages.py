"""The grader's four stages, each alone: call the learner's code, compare with the textbook, grade
each gradient, localise a wrong block's mistake."""

import numpy as np
import pytest

from numpy_transformer.workbook import BY_NAME, load_learner
from numpy_transformer.workbook.grading import grader
from numpy_transformer.workbook.grading.verdicts import GradientVerdict, Raised


def first_case(name):
    return BY_NAME[name].cases(np.random.default_rng(0))[0]


def learners(tmp_path, source):
    path = tmp_path / "mine.py"
    path.write_text(source)
    return load_learner(path), path


def test_calling_their_code_gives_their_gradients_by_name_and_the_calls_it_made(tmp_path):
    module, path = learners(
        tmp_path,
        "from numpy_transformer.functional import linear_backward\n"
        "def relu_backward(dout, cache):\n    return dout * cache\n",
    )
    case = first_case("relu_backward")
    theirs = grader._call_learners_code(BY_NAME["relu_backward"], module, case, path, seed=0)
    assert len(theirs.grads) == 1 and np.array_equal(theirs.grads[0], theirs.upstream * theirs.cache)
    assert theirs.calls == []  # relu_backward calls no other backward


def test_calling_their_code_refuses_a_write_into_what_it_was_handed(tmp_path):
    module, path = learners(tmp_path, "def relu_backward(dout, cache):\n    dout *= cache\n    return dout\n")
    with pytest.raises(Raised, match="dout"):
        grader._call_learners_code(BY_NAME["relu_backward"], module, first_case("relu_backward"), path, 0)


def test_comparing_with_the_textbook_lines_up_a_blocks_dparams_key_by_key(tmp_path):
    from numpy_transformer.workbook import blocks

    module, path = learners(tmp_path, "")  # the textbook's own block: theirs is blocks.py's
    exercise = BY_NAME["feed_forward_backward"]
    case = first_case("feed_forward_backward")
    theirs = grader._call_learners_code(exercise, module, case, path, 0)
    textbook = grader._compare_with_textbook(exercise, case, path, theirs)
    keys = list(case.inputs["params"])
    assert textbook.names == ("dx", *[f"dparams[{key}]" for key in keys])
    assert len(textbook.grads) == len(textbook.expected) == 1 + len(keys)
    assert all(np.array_equal(mine, right) for mine, right in zip(textbook.grads, textbook.expected))
    assert blocks.feed_forward_backward.__module__ == blocks.__name__


def test_comparing_with_the_textbook_refuses_their_forward_when_it_differs(tmp_path):
    module, path = learners(
        tmp_path,
        "from numpy_transformer.functional import relu_forward as textbook_relu\n"
        "def relu_forward(x):\n    out, cache = textbook_relu(x)\n    return out * 2, cache\n"
        "def relu_backward(dout, cache):\n    return dout * cache\n",
    )
    exercise, case = BY_NAME["relu_backward"], first_case("relu_backward")
    theirs = grader._call_learners_code(exercise, module, case, path, 0)
    with pytest.raises(Raised, match="your relu_forward differs from the textbook's"):
        grader._compare_with_textbook(exercise, case, path, theirs)


def test_screening_a_gradient_says_what_cannot_be_compared_and_passes_the_rest_on():
    case = first_case("relu_backward")
    right = np.ones((2, 3))
    wrong_shape = grader._screen("dx", "x", np.ones((3, 2)), right, case, block=False)
    assert isinstance(wrong_shape, GradientVerdict) and wrong_shape.status == "wrong"
    assert "shape (3, 2), expected (2, 3)" in wrong_shape.detail
    complex_grad = grader._screen("dx", "x", right.astype(complex), right, case, block=False)
    assert isinstance(complex_grad, GradientVerdict) and "complex" in complex_grad.detail
    bias = grader._screen("db", "", right, right, case, block=False)
    assert isinstance(bias, GradientVerdict) and "expected None" in bias.detail
    passed = grader._screen("dx", "x", right * 2, right, case, block=False)
    assert isinstance(passed, np.ndarray) and np.array_equal(passed, right * 2)


def test_grading_each_gradient_finds_a_sign_flipped_and_the_right_one_exact(tmp_path):
    exercise, case = BY_NAME["relu_backward"], first_case("relu_backward")
    for source, status, mistake in (
        ("def relu_backward(dout, cache):\n    return dout * cache\n", "exact", None),
        ("def relu_backward(dout, cache):\n    return -(dout * cache)\n", "wrong", "sign"),
    ):
        module, path = learners(tmp_path, source)
        theirs = grader._call_learners_code(exercise, module, case, path, 0)
        textbook = grader._compare_with_textbook(exercise, case, path, theirs)
        verdicts = grader._grade_gradients(exercise, case, path, theirs, textbook)
        assert [(v.status, v.mistake) for v in verdicts.values()] == [(status, mistake)]
        assert (
            grader._localise(exercise, case, theirs, textbook, verdicts) is None
        )  # a layer: nothing to localise


def test_localising_names_the_piece_of_a_block_where_the_mistake_lives(tmp_path):
    from learn_mistakes import BLOCK_HEADER

    exercise, case = BY_NAME["feed_forward_backward"], first_case("feed_forward_backward")
    module, path = learners(
        tmp_path,
        BLOCK_HEADER + "def feed_forward_backward(dout, cache):\n"
        "    dh, dw2, db2 = linear_backward(dout, cache.second)\n"
        "    dh = dropout_backward(dh, cache.dropout)  # the relu forgotten\n"
        "    dx, dw1, db1 = linear_backward(dh, cache.first)\n"
        '    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}\n',
    )
    theirs = grader._call_learners_code(exercise, module, case, path, 0)
    textbook = grader._compare_with_textbook(exercise, case, path, theirs)
    verdicts = grader._grade_gradients(exercise, case, path, theirs, textbook)
    assert verdicts["dparams[w2]"].status == "exact" and verdicts["dparams[w1]"].status == "wrong"
    localised = grader._localise(exercise, case, theirs, textbook, verdicts)
    # the gradient reaching the first linear is the first wrong one, and the relu is what it lacks
    assert localised is not None and (localised.where, localised.mistake) == ("first", "relu_skipped")
