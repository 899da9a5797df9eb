"""The training rungs (the schedules, clipping by the global norm, the Adam and AdamW step): the textbook's
own solution and a learner's right one pass, a stub fails, each catalogued mistake is caught with its
cause named; the workbook's textbook of them computes what numpy_transformer.optim computes; and a run of
the workbook trains with the learner's optimiser wherever their file defines it."""

from collections import Counter

import numpy as np
import pytest
from learn_training_mistakes import TRAINING_MISTAKES
from learn_training_rungs import CORRECT, SOLVED_TRAINING, TRAINING_HEADER

from numpy_transformer import functional, optim, workbook
from numpy_transformer.kernels import using_kernels
from numpy_transformer.module import Parameter
from numpy_transformer.workbook import optimiser
from numpy_transformer.workbook.exercises.training_mistakes import cosine
from numpy_transformer.workbook.exercises.training_symptoms import SYMPTOM_KEYS, Observed, mixed_arguments

RUNGS = [name for name in workbook.LADDER if name not in workbook.BY_NAME]  # the training rungs


def test_the_ladder_ends_at_the_optimiser():
    assert RUNGS == [
        "noam_learning_rate",
        "warmup_cosine_learning_rate",
        "clip_by_global_norm",
        "adam_step",
        "adamw_step",
    ]
    assert workbook.LADDER[: len(workbook.EXERCISES)] == tuple(e.backward for e in workbook.EXERCISES)
    assert workbook.LADDER[-1] == "adamw_step"


def test_the_textbooks_own_solution_and_a_learners_right_one_pass(tmp_path):
    textbook = workbook.check(functional.__file__, RUNGS)  # the textbook's file: optimiser.py's functions
    assert [v.status for v in textbook] == ["done"] * 5, workbook.format_verdicts(textbook)
    wrappers = tmp_path / "wrappers.py"
    wrappers.write_text(
        "from numpy_transformer.workbook import optimiser\n\n"
        + "".join(f"\ndef {name}(*args):\n    return optimiser.{name}(*args)\n\n" for name in RUNGS)
    )
    path = tmp_path / "mine.py"
    path.write_text(TRAINING_HEADER + SOLVED_TRAINING)
    for file in (wrappers, path):
        report, code = workbook.run_check(file, RUNGS)
        assert code == 0, report
        assert report.count("✔ exact") == 10 and "5 done" in report, report


def test_a_stub_fails(tmp_path):
    workbook.start(tmp_path)
    report, code = workbook.run_check(tmp_path / "my_backprop.py", RUNGS)
    assert code == 1 and report.count("to do: raises NotImplementedError") == 5, report
    path = tmp_path / "unchanged.py"
    path.write_text(
        "def noam_learning_rate(step, d_model, warmup):\n    return 0.001\n\n"
        "def warmup_cosine_learning_rate(step, peak, warmup, total, min_lr):\n    return peak\n\n"
        "def clip_by_global_norm(grads, max_norm):\n    return list(grads), max_norm\n\n"
        "def adam_step(param, grad, m, v, t, lr, beta1, beta2, eps):\n    return param, m, v\n\n"
        "def adamw_step(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):\n    return param, m, v\n"
    )
    verdicts = workbook.check(path, RUNGS)
    assert [v.status for v in verdicts] == ["wrong"] * 5, workbook.format_verdicts(verdicts)


def test_the_catalogue_covers_every_rung_and_every_cause_the_rungs_name():
    assert Counter(m.function for m in TRAINING_MISTAKES) == {
        "noam_learning_rate": 57,
        "warmup_cosine_learning_rate": 52,
        "clip_by_global_norm": 38,
        "adam_step": 54,
        "adamw_step": 40,
    }
    declared = {key for name in RUNGS for key, _ in workbook.TRAINING_BY_NAME[name].mistakes}
    named = {m.expected for m in TRAINING_MISTAKES} | {key for m in TRAINING_MISTAKES for key in m.also}
    assert (
        declared
        | set(SYMPTOM_KEYS)
        | {"writes_input", "writes_list", "returns_input", "rung_dtype", "keeps_state", "returns_order"}
        <= named
    )
    assert all(m.expected in workbook.SENTENCES for m in TRAINING_MISTAKES)
    for mistake in TRAINING_MISTAKES:
        assert mistake.source != CORRECT[mistake.function], mistake


_GRADED: dict[int, tuple] = {}


def _graded(tmp_path, index: int):
    if index not in _GRADED:
        mistake = TRAINING_MISTAKES[index]
        path = tmp_path / f"mistake_{index}.py"
        path.write_text(TRAINING_HEADER + mistake.source)
        (verdict,) = workbook.check(path, [mistake.function])
        _GRADED[index] = verdict, workbook.format_verdicts([verdict])
    return _GRADED[index]


def _named(verdict) -> set:
    wrong = [g for g in verdict.gradients if g.status == "wrong"]
    return {g.mistake for g in wrong} | {key for g in wrong for key in g.also} | {verdict.cause} - {None}


@pytest.mark.parametrize(
    "index", range(len(TRAINING_MISTAKES)), ids=[f"{m.function}-{m.expected}" for m in TRAINING_MISTAKES]
)
def test_each_catalogued_mistake_is_caught_and_its_cause_named(tmp_path, index):
    mistake = TRAINING_MISTAKES[index]
    verdict, report = _graded(tmp_path, index)
    assert verdict.status in ("wrong", "error"), report
    assert {mistake.expected, *mistake.also} == _named(verdict), report
    for key in (mistake.expected, *mistake.also):
        head = workbook.SENTENCES[key].split(":")[0].split("{")[0]
        assert head in report, report


def test_the_share_of_catalogued_mistakes_with_their_cause_named(tmp_path):
    """Measured on the catalogue (241 mistakes, written beside the grader and taken from twenty learners' cold
    attempts, some of them two slips at once): every one caught and its own causes named, none a wrong one: the paper's
    schedule 57 of 57, warm-up + cosine 52 of 52, clipping 38 of 38, Adam 54 of 54, AdamW 40 of 40."""
    right, wrong, total = Counter(), Counter(), Counter()
    for index, mistake in enumerate(TRAINING_MISTAKES):
        verdict, report = _graded(tmp_path, index)
        assert verdict.status in ("wrong", "error"), report
        total[mistake.function] += 1
        right[mistake.function] += mistake.expected in _named(verdict)
        wrong[mistake.function] += bool(_named(verdict) - {mistake.expected, *mistake.also})
    assert not +wrong, wrong
    assert all(right[name] / total[name] >= 0.9 for name in total), (right, total)
    assert right == total, (right, total)


def test_a_report_says_the_call_and_the_entry_where_it_differs(tmp_path):
    index = next(i for i, m in enumerate(TRAINING_MISTAKES) if m.expected == "clip_per_tensor")
    _, report = _graded(tmp_path, index)
    lines = report.splitlines()
    assert lines[0] == "✖ clip_by_global_norm  wrong", report
    assert "case three tensors, each under max_norm, together over it: call 1: grads[1] at (" in lines[1], (
        report
    )
    assert lines[2].strip().startswith("each gradient is clipped by its own norm"), report
    assert lines[3].strip() == "norm   ✔ exact", report


def test_an_adamw_step_calling_a_wrong_adam_step_says_to_fix_that_first(tmp_path):
    wrong = next(m for m in TRAINING_MISTAKES if m.expected == "eps_inside" and m.function == "adam_step")
    path = tmp_path / "mine.py"
    path.write_text(
        TRAINING_HEADER
        + wrong.source
        + "\ndef adamw_step(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):\n"
        "    return adam_step(param * (1 - lr * weight_decay), grad, m, v, t, lr, beta1, beta2, eps)\n"
    )
    (verdict,) = workbook.check(path, ["adamw_step"])
    assert verdict.status == "wrong" and "eps_inside" in _named(verdict)
    assert "it calls your adam_step, which is wrong: fix that first" in verdict.message


def test_hints_and_status_carry_the_training_rungs(tmp_path):
    workbook.start(tmp_path)
    path = tmp_path / "my_backprop.py"
    first, second = workbook.next_hint(path, "adam_step"), workbook.next_hint(path, "adam_step")
    assert "hint 1 of 2" in first and "1 - beta^t" in first and "sqrt" not in first
    assert "hint 2 of 2" in second and "m_hat = m / (1 - beta1^t)" in second
    rungs = {rung.name: rung for rung in workbook.status(path)}
    assert [rungs[name].state for name in RUNGS] == ["ready", "ready", "ready", "ready", "locked"]
    assert rungs["adamw_step"].behind == ("adam_step",)
    with pytest.raises(ValueError, match="did you mean adam_step"):
        workbook.check(path, ["adam_stepp"])


def _drawn(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def test_the_workbooks_textbook_is_optims_classes_bit_for_bit():
    """Five steps of the optimiser a workbook run makes from the textbook's functions (AdamW on the
    matrices, clipping, warm-up + cosine) and of optim's AdamW, clip_grad_norm and WarmupCosineSchedule
    on the textbook's kernels: identical weights; and the paper's schedule is NoamSchedule's."""
    shapes = {"w": (3, 4), "b": (4,)}
    params = {name: _drawn(shape, i) for i, (name, shape) in enumerate(shapes.items())}
    settings = optimiser.OptimiserSettings(
        lr=0.01, weight_decay=0.1, clip=0.5, schedule="cosine", warmup=2, total=5, min_lr=1e-3
    )
    ours = workbook.training_optimiser({}, settings)
    parameters = [(name, Parameter(value.copy())) for name, value in params.items()]
    with using_kernels("reference"):
        theirs = optim.AdamW(parameters, lr=0.01, weight_decay=0.1)
    schedule = optim.WarmupCosineSchedule(0.01, 2, 5, 1e-3)
    for step in range(1, 6):
        grads = {name: 3 * _drawn(shape, 10 * step + i) for i, (name, shape) in enumerate(shapes.items())}
        params = ours.step(params, grads)
        theirs.zero_grad()
        for name, parameter in parameters:
            parameter.accumulate(grads[name].copy())
        optim.clip_grad_norm([p for _, p in parameters], 0.5)
        theirs.step(schedule(step))
        for name, parameter in parameters:
            assert np.array_equal(params[name], parameter.data), (step, name)
    noam = optim.NoamSchedule(64, 10)
    assert [optimiser.noam_learning_rate(s, 64, 10) for s in (1, 10, 99)] == [noam(s) for s in (1, 10, 99)]


def test_the_optimiser_is_the_learners_where_they_wrote_it_and_the_textbooks_elsewhere():
    def mine(*args):
        return optimiser.adam_step(*args)

    chosen = workbook.training_optimiser(
        {"adam_step": mine, "relu_backward": print}, optimiser.OptimiserSettings(lr=1.0)
    )
    assert chosen.functions["adam_step"] is mine
    assert chosen.functions["adamw_step"] is optimiser.TEXTBOOK["adamw_step"]
    assert set(chosen.functions) == set(RUNGS)


def test_a_wrong_adam_step_changes_the_proofs_run_and_is_named(tmp_path):
    """learn prove's engine on a workbook solved but for Adam's bias correction: their adam_step runs,
    and the two runs' weights differ."""
    from learn_mistakes import solved_workbook

    from numpy_transformer.translator.tasks import make_task
    from numpy_transformer.workbook.commands import _proof_report
    from numpy_transformer.workbook.proof import Recipe, prove

    wrong = next(
        m for m in TRAINING_MISTAKES if m.expected == "no_bias_correction" and m.function == "adam_step"
    )
    path = tmp_path / "mine.py"
    path.write_text(solved_workbook().replace(CORRECT["adam_step"].lstrip("\n"), wrong.source.lstrip("\n")))
    block_table: dict = {}
    table, verdicts = workbook.learner_functions(path, block_table)
    assert [v.name for v in verdicts if v.status != "done"] == ["adam_step"]
    assert "adam_step" in block_table
    ran: set = set()
    theirs = workbook.training.guarded({**table, **block_table}, path, ran)
    recipe = Recipe(d_model=16, N=1, h=2, d_ff=32, steps=3, test_size=10)
    result = prove(make_task("numbers-en-fr", seed=0), theirs, recipe)
    assert "adam_step" in ran and "encoder_decoder_backward" in ran
    assert not result.identical
    lines, code = _proof_report(result, recipe, sorted(ran), [v for v in verdicts if v.status != "done"])
    assert code == 1 and any("learn check finds adam_step wrong" in line for line in lines)


def test_the_package_models_adam_update_is_the_learners_where_they_wrote_it():
    """optim.Adam and AdamW on the "learner" kernel set run the learner's adam_step and adamw_step (the
    update of learn train's package model): a right one gives the textbook's weights bit for bit, a wrong
    one other weights."""
    from numpy_transformer.workbook.optimiser import adam_update

    calls: list[str] = []

    def counted(name, function):
        def call(*args):
            calls.append(name)
            return function(*args)

        return call

    shapes = {"w": (3, 4), "b": (4,)}
    grads = [
        {name: _drawn(shape, 10 * step + i) for i, (name, shape) in enumerate(shapes.items())}
        for step in range(3)
    ]

    def trained(kernels, update=None):
        parameters = [(name, Parameter(_drawn(shape, i))) for i, (name, shape) in enumerate(shapes.items())]
        with using_kernels(kernels, adam_update=update) if update else using_kernels(kernels):
            adamw = optim.AdamW(parameters, lr=0.01, weight_decay=0.1)
            for step in range(3):
                adamw.zero_grad()
                for name, parameter in parameters:
                    parameter.accumulate(grads[step][name].copy())
                adamw.step()
        return {name: parameter.data for name, parameter in parameters}

    right = {name: counted(name, optimiser.TEXTBOOK[name]) for name in ("adam_step", "adamw_step")}
    textbook, yours = trained("reference"), trained({}, adam_update(right))
    assert (
        calls.count("adamw_step") == 3 and calls.count("adam_step") == 3
    )  # the matrix decays, the vector not
    assert all(np.array_equal(textbook[name], yours[name]) for name in shapes)

    def wrong_adam(param, grad, m, v, t, lr, beta1, beta2, eps):
        return optimiser.adam_step(param, grad, m, v, t + 1, lr, beta1, beta2, eps)

    assert not np.array_equal(textbook["b"], trained({}, adam_update({"adam_step": wrong_adam}))["b"])


def test_learn_train_updates_both_models_with_the_learners_optimiser_and_equals_the_textbooks_run(
    tmp_path, capsys
):
    """A file of a right relu and the right training rungs: the package's model updates its weights with
    their adam_step (its run's weights the textbook's run's, bit for bit), and blocks.py's
    encoder-decoder trains with their schedule, clipping and Adam beside the textbook's."""
    from numpy_transformer.translator.cli import main

    path = tmp_path / "mine.py"
    path.write_text(
        TRAINING_HEADER + "\ndef relu_backward(dout, cache):\n    return dout * cache\n" + SOLVED_TRAINING
    )
    quick = ["--task", "copy", "--steps", "6", "--d-model", "16", "--layers", "1", "--heads", "2",
             "--d-ff", "16", "--eval-every", "3", "--eval-size", "4", "--no-progress", "--show", "0",
             "--threads", "1", "--dropout", "0"]  # fmt: skip
    out = tmp_path / "run"
    assert main(["learn", "train", str(path), *quick, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "your functions: relu_backward\n" in said, said
    assert (
        "your optimiser: noam_learning_rate, warmup_cosine_learning_rate, clip_by_global_norm, adam_step, "
        "adamw_step (the package's model updates its weights with your adam_step and adamw_step, its clipping "
        "and schedule the package's; blocks.py's encoder-decoder trains with all of them after it)\n" in said
    ), said
    assert "the model ran your relu_backward, adam_step; not used by this model:" in said, said
    assert (
        "of blocks.py on your warmup_cosine_learning_rate, clip_by_global_norm, adam_step: dev loss" in said
    ), said
    assert "the textbook's:" in said
    with (
        np.load(out / "model.npz", allow_pickle=False) as yours,
        np.load(out / "textbook" / "model.npz", allow_pickle=False) as textbook,
    ):
        weights = [name for name in yours.files if name.startswith("param")]
        assert weights and all(np.array_equal(yours[name], textbook[name]) for name in weights)


def test_a_tuple_or_a_0d_array_where_a_list_and_a_float_are_asked_is_said(tmp_path):
    """A cold learner's clipping returned a tuple of arrays and its norm as a 0-d array: its values are
    right, its types not what the contract asks (the optimiser and a training log take a list, a float)."""
    path = tmp_path / "mine.py"
    for returned, said in (
        ("tuple(g * scale for g in grads), norm", "returned grads as tuple, expected a list of arrays"),
        ("[g * scale for g in grads], np.array(norm)", "returned norm as a 0-d array, expected a float"),
    ):
        path.write_text(
            TRAINING_HEADER
            + CORRECT["clip_by_global_norm"].replace("[g * scale for g in grads], norm", returned)
        )
        report, code = workbook.run_check(path, ["clip_by_global_norm"])
        assert code == 1 and said in report, report


def test_results_in_another_order_are_said_so_right_or_still_wrong(tmp_path):
    """(norm, grads) returned where (grads, norm) is asked: the order is said, and whether the results are
    right in it (a second slip, each array's mean of squares, is left for the next check)."""
    path = tmp_path / "mine.py"
    swapped = CORRECT["clip_by_global_norm"].replace(
        "[g * scale for g in grads], norm", "norm, [g * scale for g in grads]"
    )
    for source, then in (
        (swapped, "in it they are right"),
        (swapped.replace("(g * g).sum()", "(g * g).mean()"), "in it they are still wrong"),
    ):
        path.write_text(TRAINING_HEADER + source)
        report, code = workbook.run_check(path, ["clip_by_global_norm"])
        assert code == 1 and "in another order, (norm, grads): the order is (grads, norm)" in report, report
        assert then in report, report


def test_a_schedule_that_counts_its_own_steps_is_said_to_keep_state(tmp_path):
    """A schedule that counts its calls in place of using step gives two answers to one call: said so, with
    the argument that numbers the update (step); a right one that keeps a harmless cache is done."""
    path = tmp_path / "mine.py"
    counting = (
        CORRECT["noam_learning_rate"]
        .replace("def noam_learning_rate", "_calls = [0]\n\n\ndef noam_learning_rate")
        .replace("    return", "    _calls[0] += 1\n    step = _calls[0]\n    return")
    )
    path.write_text(TRAINING_HEADER + counting)
    report, code = workbook.run_check(path, ["noam_learning_rate"])
    assert (
        code == 1 and "keeps state between calls" in report and "(step, the number of this update)" in report
    )
    cached = CORRECT["noam_learning_rate"].replace(
        "def noam_learning_rate", "@functools.lru_cache(maxsize=None)\ndef noam_learning_rate"
    )
    path.write_text(TRAINING_HEADER + "import functools\n" + cached)
    report, code = workbook.run_check(path, ["noam_learning_rate"])
    assert code == 0 and "done" in report, report


def test_a_width_factor_kept_from_the_first_call_is_said_beside_a_constant_and_a_constant_alone_is_not(
    tmp_path,
):
    """d_model held at the value the first call handed in: a constant or a value kept from that call give
    the same numbers, and the sentence says both; held at a value a later call hands in, a constant alone."""
    path = tmp_path / "mine.py"
    right = CORRECT["noam_learning_rate"]
    kept = right.replace("def noam_learning_rate", "_scale = []\n\n\ndef noam_learning_rate").replace(
        "    return d_model ** -0.5",
        "    if not _scale:\n        _scale.append(d_model ** -0.5)\n    return _scale[0]",
    )
    constant = right.replace("    return d_model ** -0.5", "    d_model = 512\n    return d_model ** -0.5")
    for source, second in ((kept, True), (constant, False)):
        assert source != right
        path.write_text(TRAINING_HEADER + source)
        report, code = workbook.run_check(path, ["noam_learning_rate"])
        assert code == 1 and "d_model is not used" in report and "a constant written in its place" in report
        reading = (
            "is what the first call the grader made (its first case's call 1) handed in, so d_model kept from"
        )
        assert (reading in report) == second, report


@pytest.mark.parametrize(
    ("name", "old", "kept", "other", "said"),
    [
        (
            "warmup_cosine_learning_rate",
            "(total - warmup)",
            "_held.setdefault('length', total - warmup)",
            "(total - warmup + 3)",
            "the cosine's progress runs over other steps",
        ),
        (
            "adamw_step",
            "(1 - lr * weight_decay)",
            "(1 - _held.setdefault('share', lr * weight_decay))",
            "(1 - 2 * lr * weight_decay)",
            "the decay shrinks the parameter by another share of it",
        ),
    ],
)
def test_a_length_or_a_decay_kept_from_the_first_call_is_said_so_and_another_slip_is_not(
    tmp_path, name, old, kept, other, said
):
    """A value computed on the first call and kept for the calls after it (a global filled once) gives
    numbers the first call's arguments explain: said so beside the symptom; another slip, the symptom alone."""
    path = tmp_path / "mine.py"
    for new, second in ((kept, True), (other, False)):
        source = CORRECT[name].replace(old, new, 1)
        assert source != CORRECT[name]
        path.write_text(TRAINING_HEADER + "_held = {}\n" + source)
        report, code = workbook.run_check(path, [name])
        assert code == 1 and said in report, report
        reading = "of the first call the grader made (its first case's call 1)"
        assert (reading in report and "kept for every call after it" in report) == second, report


def test_the_clipping_cases_are_what_they_say():
    for seed in range(3):
        first, _, under, squared_over, zero = workbook.TRAINING_BY_NAME["clip_by_global_norm"].cases(
            np.random.default_rng(seed)
        )
        norms = [float(np.sqrt((g * g).sum())) for g in first.calls[0]["grads"]]
        assert max(norms) < first.fixed["max_norm"] < float(np.sqrt(np.sum(np.square(norms)))), norms
        assert all(
            float(np.sqrt(sum((g * g).sum() for g in call["grads"]))) < under.fixed["max_norm"]
            for call in under.calls
        )
        squared = float(sum((g * g).sum() for g in squared_over.calls[0]["grads"]))
        assert np.sqrt(squared) < squared_over.fixed["max_norm"] < squared, squared
        assert all(not np.any(g) for call in zero.calls for g in call["grads"])


def test_a_warm_up_case_starts_below_min_lr():
    """A floor of min_lr put on the warm-up too changes a rate only where the warm-up's line is below it."""
    cases = workbook.TRAINING_BY_NAME["warmup_cosine_learning_rate"].cases(np.random.default_rng(0))
    below = [
        (case.label, call["step"])
        for case in cases
        for call in case.calls
        if call["step"] <= case.fixed["warmup"]
        and 0 < case.fixed["peak"] * call["step"] / case.fixed["warmup"] < case.fixed["min_lr"]
    ]
    assert below, [case.label for case in cases]


def test_a_clipping_case_has_every_gradient_zero():
    """Gradients all zero are legal (norm 0, returned unchanged): a scale max_norm / norm computed whatever the
    norm divides by 0 there, which a call of one such case shows."""
    exercise = workbook.TRAINING_BY_NAME["clip_by_global_norm"]
    zero = [
        call["grads"]
        for case in exercise.cases(np.random.default_rng(0))
        for call in case.calls
        if all(not np.any(g) for g in call["grads"])
    ]
    assert zero, "no call hands every gradient zero"
    for grads in zero:
        clipped, norm = optimiser.clip_by_global_norm(grads, 1.0)
        assert norm == 0.0 and all(np.array_equal(c, g) for c, g in zip(clipped, grads))


def test_the_adamw_cases_hand_more_than_one_weight_decay():
    """A weight_decay held at one value whatever is handed in shows only where the cases hand several."""
    cases = workbook.TRAINING_BY_NAME["adamw_step"].cases(np.random.default_rng(0))
    assert len({case.fixed["weight_decay"] for case in cases}) > 1


def test_results_in_another_order_are_said_right_only_where_every_call_is(tmp_path):
    """Clipping's results returned as (norm, grads): "in it they are right" only where, put back in order, the
    function grades done on every call of every case; each catalogued clipping mistake so returned is still
    wrong in that order, and the report says why where it names the mistake alone."""
    sources = {"right": CORRECT["clip_by_global_norm"]} | {
        str(index): m.source
        for index, m in enumerate(TRAINING_MISTAKES)
        if m.function == "clip_by_global_norm" and m.expected != "returns_order"
    }
    swapped = 0
    for label, source in sources.items():
        if "return [g * scale for g in grads], norm" not in source:
            continue
        path = tmp_path / f"order_{label}.py"
        path.write_text(
            TRAINING_HEADER
            + source.replace("return [g * scale", "return norm, [g * scale", 1).replace(
                "for g in grads], norm", "for g in grads]", 1
            )
        )
        (verdict,) = workbook.check(path, ["clip_by_global_norm"])
        report = workbook.format_verdicts([verdict])
        swapped += 1
        assert verdict.cause == "returns_order", report
        assert ("in it they are right" in report) == (label == "right"), report
        if label != "right" and TRAINING_MISTAKES[int(label)].expected == "clip_always":
            assert "in it they are still wrong: the gradients are rescaled even where" in report, report
    assert swapped > 10, swapped
    arrays = (
        tmp_path / "order_on_arrays.py"
    )  # rescaled always by a division on arrays: nan where the norm is 0
    arrays.write_text(
        TRAINING_HEADER
        + next(m.source for m in TRAINING_MISTAKES if "return norm, [g * max_norm" in m.source)
    )
    report = workbook.format_verdicts(workbook.check(arrays, ["clip_by_global_norm"]))
    assert "in it they are still wrong: the gradients are rescaled even where" in report, report


def test_a_value_is_exact_only_where_every_case_compared_it(tmp_path):
    """A cold learner's spectral norm (numpy's norm(g, 2) of a matrix) under-reads the global norm: the
    gradients are wrong wherever that keeps them from being clipped, and never shown exact."""
    path = tmp_path / "mine.py"
    path.write_text(
        TRAINING_HEADER
        + CORRECT["clip_by_global_norm"].replace(
            "math.sqrt(sum(float((g * g).sum()) for g in grads))",
            "math.sqrt(sum(float(np.linalg.norm(g, 2)) ** 2 for g in grads))",
        )
    )
    report, code = workbook.run_check(path, ["clip_by_global_norm"])
    assert code == 1 and "✔" not in report and "grads  ✖ wrong" in report, report


def test_arguments_are_read_back_as_mixed_up_only_where_the_results_depend_on_the_value_moved():
    """A cold learner's progress without its brackets, step - warmup / (total - warmup), is held at 1 from
    the first step after the warm-up: its rates were once read back as total replaced by peak (the guard
    max(total - warmup, 1) made the progress the same whatever total was), and total replaced by step holds
    it at 1 too, as any total below step does. Set off a little, up and down, the value moved still gives
    them: no mix-up is said. A true swap (step and warmup) is still read back."""
    exercise = workbook.TRAINING_BY_NAME["warmup_cosine_learning_rate"]
    right = optimiser.TEXTBOOK[exercise.name]

    def unbracketed(step, peak, warmup, total, min_lr):
        if step <= warmup:
            return peak * step / warmup
        return min_lr + 0.5 * (peak - min_lr) * (
            1 + np.cos(np.pi * min(step - warmup / (total - warmup), 1.0))
        )

    def swapped(step, peak, warmup, total, min_lr):
        return right(warmup, peak, step, total, min_lr)

    def observed(learners):
        calls = [
            {**case.fixed, **call} for case in exercise.cases(np.random.default_rng(0)) for call in case.calls
        ]
        return [
            Observed(c, [np.array([float(learners(**c))])], [np.array([float(right(**c))])]) for c in calls
        ]

    assert mixed_arguments(cosine, observed(unbracketed)) is None
    assert mixed_arguments(cosine, observed(swapped)) == (
        "arguments_swapped",
        {"first": "warmup", "second": "step"},
    )


@pytest.mark.parametrize("name", ["adam_step", "adamw_step"])
def test_an_optimiser_cases_calls_are_successive_textbook_steps(name):
    exercise = workbook.TRAINING_BY_NAME[name]
    for case in exercise.cases(np.random.default_rng(0)):
        for before, after in zip(case.calls, case.calls[1:]):
            values = {**case.fixed, **before}
            stepped = optimiser.TEXTBOOK[name](*(values[argument] for argument in exercise.arguments))
            assert after["t"] == before["t"] + 1, case.label
            for key, value in zip(("param", "m", "v"), stepped):
                np.testing.assert_allclose(after[key], value, rtol=1e-12, atol=1e-15)


def test_a_wrong_value_alike_to_six_digits_shows_more_and_the_difference(tmp_path):
    """A cold learner's max_norm / (norm + 1e-6), a habit from PyTorch: here 1e-7, a relative error of
    about 1e-7, over the close limit, and the same to six digits."""
    path = tmp_path / "mine.py"
    path.write_text(
        TRAINING_HEADER
        + CORRECT["clip_by_global_norm"].replace("max_norm / norm if", "max_norm / (norm + 1e-7) if")
    )
    report, code = workbook.run_check(path, ["clip_by_global_norm"])
    assert code == 1 and "grads  ✖ wrong" in report and "(a difference of " in report, report
    shown = report.split("yours ")[1].split(" (a difference")[0]
    yours, expected = shown.split(", expected ")
    assert yours != expected, report


def test_a_runs_guard_leaves_the_packages_own_functions_in_their_modules(tmp_path):
    """The textbook's file hands the workbook's optimiser functions in as its own (learners_function):
    guarding them for a run must not put the guard into the optimiser's module."""
    before = {name: getattr(optimiser, name) for name in optimiser.TEXTBOOK}
    try:
        workbook.training.guarded(dict(before), functional.__file__)
        assert {name: getattr(optimiser, name) for name in before} == before
    finally:
        for name, function in before.items():
            setattr(optimiser, name, function)
    mine = tmp_path / "mine.py"
    mine.write_text(
        TRAINING_HEADER + SOLVED_TRAINING + "\ndef adamw_step(*args):\n    return adam_step(*args[:9])\n"
    )
    module = workbook.load_learner(mine)
    wrapped = workbook.training.guarded(
        {"adam_step": module.adam_step, "adamw_step": module.adamw_step}, mine
    )
    assert module.adam_step is wrapped["adam_step"]  # their own file's: their functions calling each other


def test_a_run_that_called_none_of_the_learners_functions_says_so_in_words():
    """Their adam_step left to the textbook (it returned None in check), the rest unused by the
    package's model: the line named nothing as if it were a function ("ran your nothing")."""
    from numpy_transformer.workbook.commands import LearnerTraining

    training = object.__new__(LearnerTraining)  # what_ran reads only these two, set by the run
    training.yours, training.ran = ["noam_learning_rate", "clip_by_global_norm"], set()
    assert training.what_ran() == [
        "the model ran none of your functions; not used by this model: noam_learning_rate, "
        "clip_by_global_norm; the rest was the textbook's"
    ]


def test_a_rung_that_writes_into_what_it_was_handed_is_graded_on_copies_too(tmp_path):
    """The write is refused by name, every argument written into named; its results, graded as they are
    when it is handed copies, are said right, or wrong with their own cause."""
    right_in_place = CORRECT["adam_step"].replace(
        "    m = beta1 * m + (1 - beta1) * grad\n    v = beta2 * v + (1 - beta2) * grad * grad\n",
        "    m *= beta1\n    m += (1 - beta1) * grad\n    v *= beta2\n    v += (1 - beta2) * grad * grad\n",
    )
    wrong_in_place = right_in_place.replace("v / (1 - beta2 ** t)", "v")
    verdicts = {}
    for label, source in (("right", right_in_place), ("wrong", wrong_in_place)):
        path = tmp_path / f"{label}.py"
        path.write_text(TRAINING_HEADER + source)
        (verdicts[label],) = workbook.check(path, ["adam_step"])
    right, wrong = verdicts["right"], verdicts["wrong"]
    assert right.status == wrong.status == "error" and right.cause == wrong.cause == "writes_input"
    assert "adam_step writes into m and v, which it was handed" in right.message, right.message
    assert right.message.endswith("handed copies, its results are right") and not right.gradients
    assert wrong.message.endswith("handed copies, its results are wrong too"), wrong.message
    assert {g.mistake for g in wrong.gradients if g.status == "wrong"} == {"bias_one_moment"}, wrong.gradients
    assert "handed copies" in workbook.format_verdicts([wrong]).splitlines()[0]
