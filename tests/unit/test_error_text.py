"""The text a failed run stores in runs.error: every failed rank named with its cause."""

from orchestrator.errors import first_line, ranks_error_text


class Wrapped(Exception):
    """Like Ray's RayTaskError: the worker's exception in ``cause``, a long text of its own."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"ray::Launcher.run_rank() (pid=1)\n{cause}")
        self.cause = cause


FORK_TRACEBACK = (
    "rank process 21133 raised:\nTraceback (most recent call last):\n"
    '  File "workloads/train.py", line 54, in _maybe_fault\n'
    "RuntimeError: injected fault on rank 1 at step 1 (LINKSWEEP_INJECT_FAULT)\n"
)


def test_every_failed_rank_is_named_with_its_traceback_cause_in_rank_order():
    failures = {
        0: Wrapped(RuntimeError("Connection closed by peer [127.0.0.1]:5000")),  # arrived first
        1: Wrapped(RuntimeError(FORK_TRACEBACK)),
    }
    text = ranks_error_text(failures, 2)
    lines = text.splitlines()
    assert lines[0] == "2 of 2 rank(s) failed"
    assert lines[1] == "rank 0: RuntimeError: Connection closed by peer [127.0.0.1]:5000"
    assert lines[2] == (
        "rank 1: RuntimeError: injected fault on rank 1 at step 1 (LINKSWEEP_INJECT_FAULT)"
    )
    assert "ray::Launcher.run_rank()" in text  # the lowest failed rank's full text follows


def test_a_rank_without_a_traceback_gets_its_first_line_and_the_text_is_bounded():
    text = ranks_error_text({3: ValueError("died\n" + "x" * 20000)}, 4)
    assert text.splitlines()[:2] == ["1 of 4 rank(s) failed", "rank 3: ValueError: died"]
    assert len(text) == 8000
    assert first_line(Wrapped(KeyError("k"))) == "KeyError: 'k'"


def test_every_failed_ranks_device_note_is_kept_not_only_the_lowest_ones():
    """Each failed rank's ``rank N device:`` note is in the summary, so ``runs.nodes`` gets the
    device every failed rank chose; only the lowest rank's full text is kept, so the others'
    notes were lost before."""
    from workloads.contract import DeviceDecision, noted_decisions

    d0 = DeviceDecision("nccl", "cuda:0", "0", "0")
    d1 = DeviceDecision("nccl", "cuda:1", "0,1", "1")
    e0, e1 = RuntimeError("NCCL error"), RuntimeError("invalid device ordinal")
    e0.add_note(d0.note(0))
    e1.add_note(d1.note(1))
    remote = RuntimeError(f"Traceback ...\nRuntimeError: invalid device ordinal\n{d1.note(1)}")
    for failures in ({0: e0, 1: e1}, {0: e0, 1: Wrapped(remote)}):
        text = ranks_error_text(failures, 2)
        assert noted_decisions(text) == {0: d0, 1: d1}
        assert text.splitlines()[1:5] == [
            "rank 0: RuntimeError: NCCL error",
            d0.note(0),
            "rank 1: RuntimeError: invalid device ordinal",
            d1.note(1),
        ]
