"""What NVMe offload's async_io build needs, decided from a node's facts
(``workloads.aio_check.async_io_missing``), what a node answers to the preflight
(``node_nvme_facts``), and the preflight message built from it."""

from __future__ import annotations

import itertools
import os

import pytest

from workloads.aio_check import AioFacts, async_io_missing


def facts(**over) -> AioFacts:
    base = dict(
        cuda=False,
        cuda_home=None,
        nvcc=False,
        libaio=True,
        ninja=True,
        prebuilt=False,
        torch_cuda=None,
    )
    return AioFacts(**(base | over))


@pytest.mark.parametrize(
    "cuda,cuda_home,nvcc,libaio,ninja",
    list(
        itertools.product(
            [False, True], [None, "/usr/local/cuda"], [False, True], [False, True], [False, True]
        )
    ),
)
def test_every_combination_names_exactly_what_is_missing(cuda, cuda_home, nvcc, libaio, ninja):
    f = facts(
        cuda=cuda, cuda_home=cuda_home, nvcc=nvcc and cuda_home is not None, libaio=libaio,
        ninja=ninja, torch_cuda="12.8" if cuda else None,
    )  # fmt: skip
    msg = async_io_missing(f)
    want_toolkit = cuda and cuda_home is None
    want_nvcc = cuda and cuda_home is not None and not f.nvcc
    expected = [want_toolkit, want_nvcc, not libaio, not ninja]
    if not any(expected):
        assert msg is None
        return
    assert msg is not None
    assert ("CUDA toolkit" in msg and "CUDA_HOME" in msg) == want_toolkit
    assert ("has no bin/nvcc" in msg) == want_nvcc
    assert ("libaio-dev" in msg) == (not libaio)
    assert ("pip install ninja" in msg) == (not ninja)
    if want_toolkit or want_nvcc:
        assert "12.8" in msg  # the toolkit version torch was built with
    if not cuda:
        assert "CUDA" not in msg  # a CPU node builds async_io without CUDA: never blame it


def test_gpu_node_with_libaio_and_ninja_but_no_toolkit():
    """The case the old message got wrong: it blamed libaio on a node that has it."""
    msg = async_io_missing(facts(cuda=True, libaio=True, ninja=True, torch_cuda="12.8"))
    assert msg is not None and "libaio" not in msg and "CUDA 12.8 toolkit" in msg


def test_prebuilt_op_needs_nothing():
    assert async_io_missing(facts(cuda=True, libaio=False, ninja=False, prebuilt=True)) is None


def test_preflight_names_the_missing_toolkit(monkeypatch, tmp_path):
    """Failed on 24a5ba5: preflight asked only AsyncIOBuilder.is_compatible (libaio) and blamed
    libaio; on a GPU node without a CUDA toolkit it passed, and the run failed later. The node is
    asked through Ray (faked here at ``raycluster.nodes``' boundary: one GPU node)."""
    from orchestrator.raycluster.nodes import NodeAnswer
    from orchestrator.sweep import preflight as pf
    from orchestrator.sweep.spec import SpecError, parse_spec
    from workloads.aio_check import NodeNvmeFacts

    spec = parse_spec(
        {
            "name": "nvme",
            "nvme_path": str(tmp_path / "swap"),
            "grid": {"strategy": ["zero3"], "offload": ["nvme"]},
        }
    )
    gpu = {"node_id": "ab" * 28, "hostname": "g5", "ip": "10.0.0.5", "cpus": 8.0, "gpus": 1.0}
    answers = {"facts": facts(cuda=True, libaio=True, ninja=True, torch_cuda="12.8")}
    monkeypatch.setattr(pf, "alive_nodes", lambda: [gpu])
    monkeypatch.setattr(
        pf, "run_on_every_node",
        lambda fn, timeout_s, skip=(), args=(), only=None: [
            NodeAnswer(gpu, NodeNvmeFacts(answers["facts"], None, None))
        ],
    )  # fmt: skip
    with pytest.raises(SpecError) as err:
        pf.preflight(spec)
    text = str(err.value)
    assert "CUDA 12.8 toolkit" in text and "CUDA_HOME" in text and "g5" in text
    assert "libaio" not in text
    assert "allowed offloads without it: none, cpu" in text
    answers["facts"] = facts(cuda=True, cuda_home="/usr/local/cuda", nvcc=True, torch_cuda="12.8")
    pf.preflight(spec)  # a GPU node with the toolkit, libaio and ninja: nothing to say


def test_nvme_path_error_is_the_os_reason(tmp_path):
    from workloads.aio_check import nvme_path_error

    assert nvme_path_error(str(tmp_path / "a" / "b")) is None  # created, as a run would
    assert (tmp_path / "a" / "b").is_dir() and not any((tmp_path / "a" / "b").iterdir())
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert nvme_path_error(str(blocker / "swap")) == "Not a directory"


def test_nvme_path_probe_is_this_processs_own(tmp_path, monkeypatch):
    """Nodes sharing one folder (or two preflights at once) each probe with a file of their
    own: another's probe, even one that is in the way, is neither touched nor an error."""
    import workloads.aio_check as aio

    monkeypatch.setattr(aio.socket, "gethostname", lambda: "node-a")
    other = tmp_path / f".linksweep-write-test-node-b-{os.getpid()}"
    other.mkdir()  # were it this process's name, writing it would fail
    assert aio.nvme_path_error(str(tmp_path)) is None
    assert [p.name for p in tmp_path.iterdir()] == [other.name]


def test_node_facts_never_raise(monkeypatch, tmp_path):
    """What a node answers when torch or DeepSpeed cannot even be asked: an answer, not a crash
    of the Ray task (the preflight then names the node and the reason)."""
    import workloads.aio_check as aio

    def broken():
        raise ImportError("No module named 'deepspeed'")

    monkeypatch.setattr(aio, "aio_facts", broken)
    got = aio.node_nvme_facts(str(tmp_path / "swap"))
    assert got.aio is None and got.aio_error == "ImportError: No module named 'deepspeed'"
    assert got.nvme_path_error is None


def test_rank_side_error_names_the_missing_toolkit(monkeypatch, tmp_path):
    """A worker GPU node without nvcc: DeepSpeed's own error is a TypeError from
    ``os.path.join(None, "include")`` that names neither CUDA nor async_io (the old code re-raised
    it as is, since it matched neither 'async_io' nor 'libaio')."""
    torch = pytest.importorskip("torch")
    deepspeed = pytest.importorskip("deepspeed")
    import workloads.aio_check as aio
    import workloads.strategies as strategies

    def initialize(**_):
        raise TypeError("expected str, bytes or os.PathLike object, not NoneType")

    monkeypatch.setattr(deepspeed, "initialize", initialize)
    monkeypatch.setattr(strategies.dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(aio, "aio_facts", lambda: facts(cuda=True, torch_cuda="12.8"))
    cfg = type("Cfg", (), {"nvme_dir": str(tmp_path / "swap"), "lr": 1e-3, "ds_config": {},
                           "pg_timeout_s": 60.0})()  # fmt: skip
    with pytest.raises(RuntimeError, match="CUDA 12.8 toolkit") as err:
        strategies.ZeroStrategy(torch.nn.Linear(2, 2), torch.device("cpu"), cfg, None)
    assert "not NoneType" in str(err.value)  # DeepSpeed's words are kept
