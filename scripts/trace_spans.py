"""What a GPU trace's ``ProfilerStep#k`` spans cover: one table row per traced step per trace.

Answers, on the first GPU node, what reading Kineto's source could not settle: does Kineto
build a ``gpu_user_annotation`` span ``ProfilerStep#k`` for each traced step, and how much of the
step does it cover? Per step it prints the CPU span (``user_annotation``, what linksweep marks
with ``record_function``), the GPU annotation span of the same name where there is one, the GPU
kernels that ran between the CPU span's launches (matched by correlation id to the runtime
calls inside the CPU span, on any thread), how many of those lie inside the GPU annotation span,
and the same for NCCL kernels. A GPU span that covers the step holds every kernel; the one the
reading predicts holds a few microseconds and no backward NCCL kernel.

Standard library only (the node has no linksweep venv when it may be asked):
``python3 scripts/trace_spans.py TRACE.json.gz ... [--csv OUT.csv]``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import re
import sys
from pathlib import Path

STEP = re.compile(r"^ProfilerStep#(\d+)$")
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
COLUMNS = (
    "trace", "step", "cpu_span_ms", "gpu_spans", "gpu_span_ms", "kernels_launched",
    "kernels_in_gpu_span", "nccl_kernels_launched", "nccl_in_gpu_span",
)  # fmt: skip


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data.get("traceEvents", data) if isinstance(data, dict) else data


def _inside(e: dict, span: dict) -> bool:
    return span["ts"] <= e["ts"] and e["ts"] + e.get("dur", 0) <= span["ts"] + span["dur"]


def step_rows(name: str, events: list[dict]) -> list[dict]:
    """One row per CPU ``ProfilerStep#k`` span of a trace (see the module docstring)."""
    complete = [e for e in events if e.get("ph") == "X" and "dur" in e]
    cpu_steps = [e for e in complete if e.get("cat") == "user_annotation" and STEP.match(e["name"])]
    gpu_steps = [e for e in complete if e.get("cat") == "gpu_user_annotation"
                 and STEP.match(e["name"])]  # fmt: skip
    launches = [e for e in complete if e.get("cat") in LAUNCH_CATS]
    kernels = {
        e.get("args", {}).get("correlation"): e for e in complete if e.get("cat") == "kernel"
    }
    rows = []
    for span in sorted(cpu_steps, key=lambda e: e["ts"]):
        own = [g for g in gpu_steps if g["name"] == span["name"]]
        launched = [
            kernels[c] for c in (e.get("args", {}).get("correlation") for e in launches
                                 if _inside(e, span)) if c in kernels
        ]  # fmt: skip
        nccl = [k for k in launched if "nccl" in k["name"].lower()]
        rows.append({
            "trace": name,
            "step": int(STEP.match(span["name"]).group(1)),
            "cpu_span_ms": round(span["dur"] / 1e3, 3),
            "gpu_spans": len(own),
            "gpu_span_ms": round(sum(g["dur"] for g in own) / 1e3, 3),
            "kernels_launched": len(launched),
            "kernels_in_gpu_span": sum(any(_inside(k, g) for g in own) for k in launched),
            "nccl_kernels_launched": len(nccl),
            "nccl_in_gpu_span": sum(any(_inside(k, g) for g in own) for k in nccl),
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+", type=Path, help="Chrome/Perfetto traces (.json[.gz])")
    p.add_argument("--csv", type=Path, default=None, help="also write the rows here")
    args = p.parse_args(argv)
    rows = [r for t in args.traces for r in step_rows(t.name, _events(t))]
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + " --- |" * len(COLUMNS))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in COLUMNS) + " |")
    if args.csv is not None:
        with args.csv.open("w", newline="") as f:
            w = csv.DictWriter(f, COLUMNS)
            w.writeheader()
            w.writerows(rows)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
