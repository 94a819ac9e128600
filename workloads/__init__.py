"""Code that runs inside Ray workers: gpt2 training (DDP, ZeRO), link microbenchmarks, telemetry.

Nothing here imports the orchestrator's store or Ray scheduling: workers return plain records
and the driver, the only DuckDB writer, stores them.
"""
