"""ZeRO's NVMe teardown: each rank counts and removes only its own ``rank{k}`` swap folders.

DeepSpeed 0.19.8 swaps each rank to folders of its own under the run's NVMe path
(``swap_tensor/optimizer_utils.py``: ``zero_stage_3/optimizer/rank{k}``;
``partitioned_param_swapper.py``: ``zero_stage_3/{dtype}params/rank{k}``). Ranks on one node
share the run's folder: the rank done first removed the whole folder, its peer's swap files
with it, and every rank counted every rank's files. Built as DeepSpeed lays the folder out; no
engine (the strategy's teardown is what is tested)."""

from __future__ import annotations

from pathlib import Path

from workloads.strategies import ZeroStrategy


class _Engine:
    destroyed = False

    def destroy(self) -> None:
        self.destroyed = True


def _swap_layout(root: Path, ranks: int, files: dict[int, int]) -> None:
    for k in range(ranks):
        for sub in ("zero_stage_3/optimizer", "zero_stage_3/float32params"):
            folder = root / sub / f"rank{k}"
            folder.mkdir(parents=True)
            for i in range(files[k]):
                (folder / f"{i}.tensor.swp").write_bytes(b"x")


def _strategy(root: Path, rank: int) -> ZeroStrategy:
    s = ZeroStrategy.__new__(ZeroStrategy)  # the teardown's state, without an engine
    s.nvme_dir, s.rank, s.engine = str(root), rank, _Engine()
    return s


def test_each_rank_counts_and_removes_only_its_own_swap_folders(tmp_path):
    # rank 1 and rank 11 too: "rank1" must not match "rank11"
    _swap_layout(tmp_path, 12, {k: (3 if k == 0 else 2) for k in range(12)})
    first = _strategy(tmp_path, 0)
    assert first.swap_files() == 6  # its optimizer and parameter files, no peer's
    first.teardown()
    assert first.engine.destroyed
    assert not (tmp_path / "zero_stage_3/optimizer/rank0").exists()
    assert not (tmp_path / "zero_stage_3/float32params/rank0").exists()
    peer = _strategy(tmp_path, 1)
    assert peer.swap_files() == 4  # still there after rank 0 was done
    assert (tmp_path / "zero_stage_3/optimizer/rank11").is_dir()
    peer.teardown()
    assert (tmp_path / "zero_stage_3/optimizer/rank11").is_dir()
    assert tmp_path.is_dir()  # the run's folder is the driver's to remove


def test_no_nvme_folder_no_files(tmp_path):
    s = _strategy(tmp_path, 0)
    s.nvme_dir = None
    assert s.swap_files() == 0
    s.teardown()
