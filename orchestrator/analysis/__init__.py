"""What the measurements mean: statistics, the communication and link models, compute
efficiency, the links themselves and the sentences a sweep's findings are told in. Pure: rows in,
figures out; no Ray, no database.

One module per job:
    stats       the measurement protocol's statistics: medians, intervals, sensitivity.
    theories    each strategy family's theory (the catalog's ``theory``): bytes per step and
                what the non-final micro-batches of an accumulation window promise.
    comm_model  bandwidth accounting and the expected collective volume per step.
    fsdp_theory FSDP2's and HSDP's bytes per step and per non-final micro-batch.
    zero_promise what DeepSpeed's ZeRO stage sends on a non-final micro-batch.
    linkmodel   how much of a variant's communication its step cannot hide; predictions.
    flops       model FLOPs per step, TFLOP/s per GPU, MFU; datasheet peaks.
    rated       a link's rated rate in the unit of busbw.
    links       what each link of a sweep physically is.
    headline    what a sweep found, in a sentence or two per link.
    flavours    how strategies and variants are named, worded and ordered, read off the catalog.
    trace_overlap communication, compute, overlapped and exposed time from a profiler trace.
    trace_collectives which collective each traced interval was; its busy and exposed time.
    trace_merge every rank's trace on rank 0's clock: rebased per-rank traces, one merged trace.
    trace_wait  every rank on one clock: collective instances matched across ranks, exposed
                communication split into waited and transfer, the straggler named.

May import: nothing.
"""
