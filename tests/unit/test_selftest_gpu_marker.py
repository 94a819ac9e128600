"""The ``gpu`` marker's skip decision (tests/conftest.py ``gpu_skip_reason``): decided on
``torch.cuda.is_available()``, never on nvidia-smi being installed, and the reason names the
torch build, so a CPU-only wheel on a GPU node reads as what it is."""

from __future__ import annotations

from conftest import gpu_skip_reason  # tests/conftest.py: pytest puts tests/ on sys.path


def test_runs_where_cuda_is_available():
    assert gpu_skip_reason(True, "2.13.0+cu128, CUDA build 12.8") is None


def test_skips_without_cuda_naming_the_torch_build():
    reason = gpu_skip_reason(False, "2.13.0+cpu, CUDA build none")
    assert reason == (
        "needs CUDA: torch.cuda.is_available() is False (torch 2.13.0+cpu, CUDA build none)"
    )


def test_skip_reason_carries_why_cuda_failed():
    reason = gpu_skip_reason(False, "2.13.0+cu128, CUDA build 12.8", "RuntimeError: driver too old")
    assert reason is not None and reason.endswith(": RuntimeError: driver too old")


class _Item:
    """What the hook uses of a pytest item: its markers."""

    def __init__(self, *marks: str):
        self.marks = set(marks)
        self.added: list = []

    def get_closest_marker(self, name: str):
        return name if name in self.marks else None

    def add_marker(self, mark) -> None:
        self.added.append(mark)


def test_hook_skips_only_gpu_tests_and_asks_cuda_only_when_one_is_collected(monkeypatch):
    import conftest

    asked = []

    def facts():
        asked.append(1)
        return False, "2.13.0+cpu, CUDA build none", ""

    monkeypatch.setattr(conftest, "_cuda_facts", facts)
    plain = _Item("slow")
    conftest.skip_gpu_tests_without_cuda([plain])
    assert asked == [] and plain.added == []

    gpu = _Item("gpu")
    conftest.skip_gpu_tests_without_cuda([plain, gpu])
    assert asked == [1] and plain.added == []
    (mark,) = gpu.added
    assert mark.name == "skip" and "torch.cuda.is_available() is False" in mark.kwargs["reason"]

    monkeypatch.setattr(
        conftest, "_cuda_facts", lambda: (True, "2.13.0+cu128, CUDA build 12.8", "")
    )
    gpu = _Item("gpu")
    conftest.skip_gpu_tests_without_cuda([gpu])
    assert gpu.added == []
