"""The dtype of each collective: DDP's recorder (fp32, or torch's bf16 / fp16 compress hooks)
and DeepSpeed's comms logger keep it with each collective's bytes, and the bytes DDP sends equal
``comm_model``'s theory for each compression.

Real collectives on a one-rank gloo group in this process (no Ray, no second process): a
one-rank all_reduce still runs the hook and the logger, and message bytes do not depend on the
number of ranks.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from orchestrator.analysis import comm_model
from tests.unit.tiny_lm import TinyLM
from workloads import ds_comms
from workloads.contract import RunConfig
from workloads.strategies import DDPStrategy, ddp_comm_hook


@pytest.fixture(scope="module")
def one_rank_group(tmp_path_factory):
    """A one-rank gloo group for the module (left as it was found afterwards)."""
    if dist.is_initialized():
        yield
        return
    store = dist.FileStore(str(tmp_path_factory.mktemp("pg") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _cfg(compression: str, overlap: str) -> RunConfig:
    """A one-step DDP run compressing as ``compression`` says, through ``RunConfig.axes``
    (``grad_compression``)."""
    return RunConfig(
        run_id="r",
        strategy="ddp",
        grad_accum=1,
        bucket_mb=None,
        offload="none",
        model="tiny",
        dataset="builtin",
        precision="bf16",
        seq_len=8,
        micro_batch_size=2,
        steps=1,
        warmup_steps=0,
        seed=0,
        lr=1e-3,
        profile_steps=1,
        pg_timeout_s=60.0,
        overlap_comm=overlap,
        axes={"grad_compression": compression},
    )


WIRE = {"none": ("fp32", 4), "bf16": ("bf16", 2), "fp16": ("fp16", 2)}


@pytest.mark.parametrize("overlap", ["default", "false"])
@pytest.mark.parametrize("compression", ["none", "bf16", "fp16"])
def test_ddp_counts_the_bytes_and_dtype_it_sends(one_rank_group, compression, overlap):
    dtype, nbytes = WIRE[compression]
    model = TinyLM()
    n_params = sum(p.numel() for p in model.parameters())
    strategy = DDPStrategy(model, torch.device("cpu"), _cfg(compression, overlap), torch.bfloat16)
    batch = torch.randint(0, 64, (2, 8))
    strategy.profile_start()
    strategy.micro_step(batch, boundary=True)
    strategy.optimizer_step()
    records = strategy.profile_stop()
    # bf16 autocast: fp32 gradients, sent in the compression's dtype
    assert {c.dtype for c in strategy.collectives} == {dtype}
    sent = sum(r.msg_bytes * r.count for r in records)
    assert sent == n_params * nbytes
    theory, note = comm_model.run_expectation(
        "ddp", 1, "bf16", 2, n_params, None, ddp_compression=compression
    )
    assert theory.msg_bytes_per_step == sent
    assert note.endswith(f"; all_reduce in {dtype}")
    assert {r.dtype for r in records} == {dtype}
    assert all(r.time_s > 0 for r in strategy.collectives)  # timed, one by one
    # the gradients came back in the parameters' dtype, averaged (one rank: unchanged)
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())


def test_ddp_hook_is_torchs_own_for_the_compression():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    assert ddp_comm_hook("none") == (None, default_hooks.allreduce_hook)
    assert ddp_comm_hook("bf16") == (None, default_hooks.bf16_compress_hook)
    assert ddp_comm_hook("fp16") == (None, default_hooks.fp16_compress_hook)
    state, hook = ddp_comm_hook("powersgd", 4)
    assert hook is powerSGD_hook.powerSGD_hook
    assert state.matrix_approximation_rank == 4
    with pytest.raises(ValueError, match=r"grad_compression='fp8' is not one of \['none'"):
        ddp_comm_hook("fp8")


def test_deepspeed_logger_keeps_each_collectives_dtype(one_rank_group):
    dcomm = pytest.importorskip("deepspeed.comm")
    from deepspeed.comm import comm as dcomm_module

    dcomm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    original = dcomm_module.get_msg_size_from_args
    ds_comms.start()
    dcomm.all_reduce(torch.ones(100, dtype=torch.bfloat16))
    dcomm.all_reduce(torch.ones(10, dtype=torch.float32))
    out = torch.empty(64, dtype=torch.bfloat16)
    dcomm.all_gather_into_tensor(out, torch.ones(64, dtype=torch.bfloat16))
    summary = dcomm.log_summary(return_dict=True)
    logged = {
        (r.op, r.msg_bytes, r.dtype)
        for r in ds_comms.parse_comms_summary(summary)
        if r.op != "log_summary_barrier"
    }
    records = ds_comms.stop(1)
    assert logged == {
        ("all_reduce", 200, "bf16"),
        ("all_reduce", 40, "fp32"),
        ("all_gather_into_tensor", 128, "bf16"),
    }
    assert {(r.op, r.msg_bytes) for r in records} == {
        ("all_reduce", 200),
        ("all_reduce", 40),
        ("all_gather", 128),
    }
    if hasattr(records[0], "dtype"):
        assert {(r.op, r.msg_bytes, r.dtype) for r in records} == {
            ("all_reduce", 200, "bf16"),
            ("all_reduce", 40, "fp32"),
            ("all_gather", 128, "bf16"),
        }
    # the profiled pass is over: DeepSpeed's own functions are back
    assert dcomm_module.get_msg_size_from_args is original
    assert "append" not in vars(dcomm_module.comms_logger)


def test_untagged_names_parse_as_before():
    summary = {
        "summary": {
            "all_reduce | [Caller Func: f] | dtype=fp32": {
                8: {"count": 2, "total_latency_ms": 1.0, "msg_size_bytes": 8}
            },
            "broadcast": {4: {"count": 1, "total_latency_ms": 2.0, "msg_size_bytes": 4}},
        }
    }
    got = ds_comms.parse_comms_summary(summary)
    assert [(r.op, r.dtype) for r in got] == [
        ("all_reduce | [Caller Func: f]", "fp32"),
        ("broadcast", None),
    ]
    assert ds_comms.dtype_name(torch.bfloat16) == "bf16"
    assert ds_comms.dtype_name(torch.int64) == "int64"
