"""scripts/deepspeed_ops.py: which ops count as built (the file torch leaves), and its names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import deepspeed_ops  # noqa: E402


def test_an_op_is_built_when_its_library_is_where_torch_puts_it(tmp_path):
    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "cpu_adam" / "cpu_adam.so").write_bytes(b"")
    (tmp_path / "async_io").mkdir()  # a build that never finished: no library
    assert deepspeed_ops.missing(cache=str(tmp_path)) == ["async_io", "deepspeed_shm_comm"]
    assert deepspeed_ops.missing(["cpu_adam"], cache=str(tmp_path)) == []
    assert deepspeed_ops.missing(["cpu_adam"], cache="") == ["cpu_adam"]  # no cache: none built


def test_the_quickstart_builds_only_what_its_sweep_uses_and_a_wrong_name_is_named(capsys):
    assert set(deepspeed_ops.QUICKSTART_OPS) < set(deepspeed_ops.OPS)
    with pytest.raises(SystemExit):
        deepspeed_ops.main(["async-io"])
    err = capsys.readouterr().err
    assert "async-io unknown" in err and "async_io, cpu_adam, deepspeed_shm_comm, quickstart" in err
