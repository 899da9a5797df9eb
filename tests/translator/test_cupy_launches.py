"""The kernels a GPU step launches, held to a budget without a GPU (benchmarks/gpu_launches.py).

The stand-in counts what CuPy 14 would launch for each operation (tests/support/cupy_launches.py);
the counts of the launch model are checked here on operations whose launches CuPy's source fixes,
then every configuration of benchmarks/bench.py is held to its budget: no change adds a launch or a
host synchronisation unseen. A lower count lowers the budget in the same commit.
"""

import sys
from pathlib import Path

import cupy_launches
import pytest
from cupy_launches import LAUNCHES
from cupy_standin import make_module

from numpy_transformer.kernels import cuda_fused, using_kernels

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks")]

import bench  # noqa: E402
import gpu_launches  # noqa: E402

# (config, attention): (launches of a training step, its host syncs, launches of a decoding token)
# (the update guarded on the device so that the one sync comes at the step's end: 2 launches for the
# flag, and with the Adam kernel off 3 for its writes where the flag holds)
BUDGETS = {
    ("tiny", "mha"): (799, 1, 148),
    ("small", "mha"): (799, 1, 148),
    ("small", "mla"): (841, 1, 192),
    ("corpus", "mha"): (667, 1, 148),
    ("seed", "mha"): (2003, 1, 396),
    ("base", "mha"): (2003, 1, 396),
    ("base", "mla"): (2129, 1, 528),
}
# the same with every fused kernel switched on (NUMPY_TRANSFORMER_FUSED=all): what a GPU run that proves
# them all would launch
FUSED_BUDGETS = {
    ("tiny", "mha"): (267, 1, 70),
    ("small", "mha"): (267, 1, 70),
    ("small", "mla"): (309, 1, 114),
    ("corpus", "mha"): (264, 1, 70),
    ("seed", "mha"): (691, 1, 178),
    ("base", "mha"): (691, 1, 178),
    ("base", "mla"): (817, 1, 310),
}


@pytest.fixture(autouse=True)
def cuda_kernels():
    """The budgets are the CUDA kernel set's (the "fast" one, which a GPU run uses unless told
    otherwise), also where NUMPY_TRANSFORMER_KERNELS=reference runs the rest of the suite on the
    textbook."""
    with using_kernels("fast"):
        yield


def launches_of(call):
    LAUNCHES.clear()
    call()
    return dict(LAUNCHES)


def test_the_launch_model_counts_as_cupy_launches():
    xp = make_module()
    x, w = xp.ones((4, 5, 6), dtype=xp.float32), xp.ones((7, 6), dtype=xp.float32)
    rows = x.reshape(-1, 6)
    # a 3-D product with a weight's transpose: the weight copied, three pointer arrays, a batched GEMM
    assert launches_of(lambda: x @ w.T) == {"copy": 1, "mat_ptrs": 3, "gemm-batched": 1}
    assert launches_of(lambda: rows @ w.T) == {"gemm": 1}  # 2-D: the transpose is a flag
    assert launches_of(lambda: rows.T @ rows) == {"gemm": 1}
    heads = x.reshape(4, 5, 2, 3).transpose(0, 2, 1, 3)  # split_heads: a view, not contiguous
    assert launches_of(lambda: heads @ heads.swapaxes(-1, -2)) == {"copy": 2, "gemm-strided-batched": 1}
    assert launches_of(lambda: x.mean(axis=-1)) == {"reduction": 1, "elementwise": 1}
    assert launches_of(lambda: x * 2.0 + x) == {"elementwise": 2}
    assert launches_of(lambda: heads.reshape(4, 2, 15)) == {"copy": 1}  # no view of that layout
    assert launches_of(lambda: x.reshape(20, 6)) == {}
    assert launches_of(lambda: xp.concatenate([x, x, x])) == {"copy": 3}
    assert launches_of(lambda: xp.zeros((3, 3))) == {"memset": 1}

    def fused():
        with xp.one_kernel("layer_norm"):
            (x - x.mean(axis=-1, keepdims=True)).sum()

    assert launches_of(fused) == {"fused:layer_norm": 1}


def test_small_shapes_launch_what_the_configurations_launch():
    full = gpu_launches.count_launches("tiny", "mha")
    small = gpu_launches.count_launches("tiny", "mha", small_shapes=True)
    assert full["training"]["launches"] == small["training"]["launches"]
    assert full["training"]["by_family"] == small["training"]["by_family"]
    assert full["decoding"] == small["decoding"]


def test_every_configuration_of_the_benchmark_has_a_budget():
    assert set(BUDGETS) == set(FUSED_BUDGETS) == set(bench.RUNS)


@pytest.mark.parametrize("fused", ["none", "all"])
@pytest.mark.parametrize("run", sorted(BUDGETS))
def test_a_training_step_and_a_decoding_token_keep_to_their_budgets(run, fused, monkeypatch):
    monkeypatch.setenv(cuda_fused.ENV_VAR, fused)
    launches, syncs, per_token = (BUDGETS if fused == "none" else FUSED_BUDGETS)[run]
    counted = gpu_launches.count_launches(*run, small_shapes=True)
    training = counted["training"]
    assert training["launches"] <= launches, training["by_family"]
    assert training["syncs"] <= syncs, training["syncs_by_kind"]
    assert training["syncs_by_kind"] == {"get": 1}  # the one: the loss and the gradient norm, read together
    assert training["launches_after_last_sync"] == 0  # at the step's very end, after the (guarded) update
    assert counted["decoding"]["launches"] <= per_token, counted["decoding"]
    assert cupy_launches.total() > 0  # the stand-in counted (a decode ran last)
    fused_families = {family for family in training["by_family"] if family.startswith("fused:")}
    # every fused kernel the step has work for: corpus trains without dropout, and with it the attention's
    # softmax runs inside attention_dropout; bias_act is SiLU's and GELU's, where bench.py's blocks use ReLU;
    # in bench.py's pre-norm stacks every residual sum goes into a norm (the next connection's, the next
    # block's or the stack's final one), so dropout_add_norm takes them all and dropout_add has none
    dropout = bench.PRESETS[run[0]].dropout
    needs_dropout = {
        "dropout",
        "dropout_add",
        "dropout_add_norm",
        "layer_norm_add_dropout",
        "attention_dropout",
    }
    has_work = (
        set(cuda_fused.KERNELS)
        - {"bias_act", "dropout_add"}
        - ({"attention_softmax"} if dropout else needs_dropout)
    )
    assert fused_families == ({f"fused:{name}" for name in has_work} if fused == "all" else set())


def test_the_script_prints_its_last_line(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["gpu_launches.py", "--config", "tiny"])
    gpu_launches.main()
    last = capsys.readouterr().out.strip().splitlines()[-1]
    launches, syncs, _ = BUDGETS[("tiny", "mha")]
    assert last.startswith("launches per training step: ") and last.endswith(f", syncs: {syncs}")
    assert int(last.split(":")[1].split(",")[0]) <= launches


@pytest.mark.parametrize(
    "argv, environment, named",
    [
        (
            ["--fused", "layer-norm"],
            {},
            "argument --fused: expected all, none or fused kernel names joined by commas, of ",
        ),
        (["--fused", ""], {}, "argument --fused: expected all, none"),
        ([], {"NUMPY_TRANSFORMER_FUSED": "bogus"}, "NUMPY_TRANSFORMER_FUSED is 'bogus', expected all, none"),
        (["--fused", "all"], {"NUMPY_TRANSFORMER_KERNELS": "bogus"}, "NUMPY_TRANSFORMER_KERNELS is 'bogus'"),
    ],
)
def test_a_bad_fused_name_or_variable_is_refused_in_one_line_before_any_work(
    argv, environment, named, capsys, monkeypatch
):
    """Not a traceback from the first training step: the parser's one line, naming --fused (or the
    variable that was set) and the choices, and no model built."""
    # main sets the variable from --fused: set here first, so that monkeypatch puts it back after
    monkeypatch.setenv("NUMPY_TRANSFORMER_FUSED", "none")
    monkeypatch.delenv("NUMPY_TRANSFORMER_FUSED")
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.setattr(gpu_launches, "count_launches", lambda *a, **k: pytest.fail("work began"))
    monkeypatch.setattr(sys, "argv", ["gpu_launches.py", "--config", "tiny", *argv])
    with pytest.raises(SystemExit) as exited:
        gpu_launches.main()
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert named in err[-1] and "Traceback" not in "\n".join(err)
