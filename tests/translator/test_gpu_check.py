"""benchmarks/gpu_check.py, the one command that proves a GPU, proven itself without one."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


@pytest.mark.slow
def test_the_dry_run_runs_every_section_on_the_stand_in_and_says_no_gpu(tmp_path):
    pytest.importorskip("torch", reason="the training-step and translating sections compare with PyTorch")
    pytest.importorskip("transformers", reason="the translating section builds a Marian model")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["title"].startswith("no GPU")
    assert (tmp_path / "report.md").read_text().startswith("# GPU check: no GPU")
    sections = report["sections"]
    assert list(sections) == [
        "environment",
        "cupy_tests",
        "kernels_on_device",
        "cpu_vs_gpu",
        "training_step",
        "translate",
        "numbers_en_fr",
        "fused_kernels",
        "launch_counts",
    ]
    assert {name: section["status"] for name, section in sections.items()} == dict.fromkeys(
        sections, "passed"
    )
    assert "tests collected" in sections["cupy_tests"]["summary"]  # collected only: no GPU here
    assert sections["numbers_en_fr"]["steps"] == 6 and sections["numbers_en_fr"]["test_n"] == 1000
    assert not sections["translate"]["rows"][0]["sentences_differing"]


def test_a_section_past_the_deadline_is_stopped_and_reported(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--dry-run",
            "--out",
            str(tmp_path),
            "--sections",
            "training_step",
            "translate",
            "--deadline-s",
            "0.5",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    sections = json.loads((tmp_path / "report.json").read_text())["sections"]
    assert sections["training_step"]["status"] == "STOPPED (deadline)"
    assert sections["translate"]["status"] == "SKIPPED (deadline)"


def test_a_deadline_stops_our_code_and_waits_out_another_librarys(monkeypatch):
    """The deadline is raised where the code running is ours; in another library's (PyTorch's Python,
    reached from its C++, where an exception cannot unwind: the process aborts) it is tried again
    a moment later."""
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", SCRIPT)
    gpu_check = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts the checkout's folders first
    spec.loader.exec_module(gpu_check)
    armed = []
    monkeypatch.setattr(gpu_check.signal, "setitimer", lambda which, seconds: armed.append(seconds))
    foreign = {}
    exec(
        compile("import sys\nframe = sys._getframe()", "/elsewhere/torch/nn/modules/module.py", "exec"),
        foreign,
    )
    gpu_check._deadline(gpu_check.signal.SIGALRM, foreign["frame"])
    assert armed == [gpu_check.RETRY_S]
    with pytest.raises(gpu_check.Deadline):
        gpu_check._deadline(gpu_check.signal.SIGALRM, sys._getframe())  # this test: the checkout's


@pytest.mark.skipif(
    importlib.util.find_spec("cupy") is not None, reason="CuPy is installed: this checks a machine without it"
)
def test_without_cupy_it_says_no_gpu_and_checks_nothing(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stdout.startswith("no GPU: ") and "--dry-run" in result.stdout
    assert not (tmp_path / "report.json").exists()
