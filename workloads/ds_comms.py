"""DeepSpeed's comms logger, switched on only for the profiled pass.

While the logger is enabled DeepSpeed synchronises the device after every collective, so it
stays off during timed steps (the run's DeepSpeed config has it disabled) and is enabled here,
after them. Sizes are converted to nccl-tests' convention (full buffer; DeepSpeed logs the local
shard for all_gather) so DDP and ZeRO rows in ``comms`` compare directly.
"""

from __future__ import annotations


def start() -> None:
    import deepspeed.comm as dcomm

    dcomm.reset_log()
    dcomm.configure(enabled=True, prof_all=True, verbose=False, debug=False)


def stop(world_size: int) -> list[dict]:
    import deepspeed.comm as dcomm

    from orchestrator.comm_model import canonical_op, nccl_msg_bytes, parse_comms_summary

    summary = dcomm.log_summary(return_dict=True)  # synchronises all ranks
    dcomm.configure(enabled=False, prof_all=False)
    dcomm.reset_log()
    out = []
    for rec in parse_comms_summary(summary or {"summary": None}):
        try:
            op = canonical_op(rec.op)
        except ValueError:  # barriers and other non-collectives
            continue
        out.append(
            {
                "op": op,
                "msg_bytes": nccl_msg_bytes(op, rec.msg_bytes, world_size),
                "count": rec.count,
                "total_time_s": rec.total_time_s,
            }
        )
    return out
