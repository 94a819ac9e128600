"""Compute efficiency of a run: model FLOPs per optimizer step, achieved TFLOP/s per GPU, MFU.

Pure: numbers in, numbers out (the model's sizes come from ``workloads/model.py``'s table).

Model FLOPs (what the model needs, not what the hardware did: no recomputation, no padding,
no optimizer), per token of one training step, after PaLM (Chowdhery et al. 2022, "PaLM:
Scaling Language Modeling with Pathways", arXiv:2204.02311, Appendix B):

    flops_per_token = 6 * N + 12 * L * d * T

- ``6 N``: every weight takes part in one multiply-add (2 FLOPs) per token in the forward pass
  and two in the backward pass (gradient w.r.t. the input and w.r.t. the weight): 2N + 4N.
  N is the parameter count without the position embedding (1024 x d, a table lookup, no
  matmul). gpt2 ties its token embedding to the LM head, so the embedding's V x d weights are
  counted once, as the output projection's matmul (2 V d per token forward, real compute; for
  gpt2-tiny most of it). LayerNorm weights and biases are counted as if they were matmul
  weights, an overcount of well under 1 %.
- ``12 L d T``: attention's two matmuls that have no weights, Q K^T and scores x V: 2 T d FLOPs
  each per token per layer forward (T = seq_len keys, d = n_embd over all heads), x 3 for
  forward + backward. Counted over the full T x T score matrix, as the kernels compute it (the
  causal mask does not skip work in them).

Checked against ``torch.utils.flop_counter.FlopCounterMode`` on gpt2-tiny with eager attention
(tests/unit/test_flops.py: within 0.1 % at seq_len 64 to 1024; the counter does not see
attention inside PyTorch's fused CPU SDPA kernel, so the test uses the eager path). Per optimizer step: ``flops_per_token x tokens per step`` over all
ranks (micro_batch_size x grad_accum x seq_len x world_size).

Achieved TFLOP/s per GPU = model FLOPs per step / distinct GPUs / median step time / 1e12.
MFU = achieved / peak, where peak is the GPU's dense (not 2:4-sparse) figure for the run's
math: bf16 tensor cores for ``bf16``; TF32 tensor cores for ``fp32`` when the run let matmuls
use TF32 (``torch.backends.cuda.matmul.allow_tf32``, off by default in PyTorch), else plain
FP32. The table is keyed by the GPU's name as NVML reports it; a sweep's ``peak_tflops``
overrides it. On CPU: TFLOP/s only, MFU NULL.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "PEAKS",
    "Peak",
    "efficiency",
    "flops_per_step",
    "flops_per_token",
    "lookup_peak",
]


def flops_per_token(n_params: int, n_layer: int, d_model: int, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward): 6 N + 12 L d T (PaLM, Appendix B)."""
    for name, value in (
        ("n_params", n_params),
        ("n_layer", n_layer),
        ("d_model", d_model),
        ("seq_len", seq_len),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return 6.0 * n_params + 12.0 * n_layer * d_model * seq_len


def flops_per_step(
    n_params: int, n_layer: int, d_model: int, seq_len: int, tokens_per_step: int
) -> float:
    """Model FLOPs of one optimizer step; ``tokens_per_step`` over all ranks and micro-steps."""
    return flops_per_token(n_params, n_layer, d_model, seq_len) * tokens_per_step


@dataclass(frozen=True)
class Peak:
    """Dense peak TFLOP/s of one GPU model per math mode (None: the GPU has no such units, or,
    for every mode, no published figure: then ``source`` says why)."""

    pattern: str
    """Regex searched in the NVML name (case-insensitive)."""
    fp32: float | None
    tf32: float | None
    bf16: float | None
    source: str


# Order matters: the first pattern that matches the NVML name wins (H100 NVL before H100 SXM).
# Names are NVML's (``nvidia-smi --query-gpu=name``): "NVIDIA GeForce RTX 3090 Ti", "NVIDIA
# GeForce RTX 4090 D", "NVIDIA A10G", "NVIDIA GH200 480GB", "NVIDIA H800", "NVIDIA B200".
# A variant with its own silicon or clocks gets its own row and is excluded from its sibling's
# pattern, so a 3090 Ti never borrows the 3090's peak (wrong MFU, silently).
PEAKS: tuple[Peak, ...] = (
    Peak(
        r"\bA100\b",
        19.5,
        156.0,
        312.0,
        "NVIDIA A100 Tensor Core GPU datasheet (SXM4 and PCIe: FP32 19.5, TF32 156, BF16 312; "
        "dense)",
    ),
    Peak(
        r"\bA800\b",
        19.5,
        156.0,
        312.0,
        "NVIDIA A800 datasheets (A800 40GB Active; A800 80GB PCIe and SXM: FP32 19.5, TF32 156, "
        "BF16 312 dense; 312 / 624 with sparsity): the A100's compute, with less NVLink",
    ),
    Peak(
        r"\bH100\b.*\bNVL\b",
        60.0,
        417.5,
        835.5,
        "NVIDIA H100 datasheet, H100 NVL column (TF32 835, BF16 1671 with sparsity; halved)",
    ),
    Peak(
        r"\bH100\b.*\bPCIe\b",
        51.0,
        378.0,
        756.5,
        "NVIDIA H100 Tensor Core GPU Architecture whitepaper, H100 PCIe (dense)",
    ),
    Peak(
        r"\bH100\b",
        67.0,
        494.7,
        989.4,
        "NVIDIA H100 Tensor Core GPU Architecture whitepaper, H100 SXM5 (dense)",
    ),
    Peak(
        r"\bH200\b.*\bNVL\b",
        60.0,
        417.5,
        835.5,
        "NVIDIA H200 datasheet, H200 NVL column (TF32 835, BF16 1671 with sparsity; halved)",
    ),
    Peak(
        r"\bH200\b",
        67.0,
        494.7,
        989.4,
        "NVIDIA H200 datasheet, H200 SXM column (TF32 989, BF16 1979 with sparsity; halved)",
    ),
    Peak(
        r"\bGH200\b",
        67.0,
        494.5,
        989.5,
        "NVIDIA GH200 Grace Hopper Superchip datasheet, the H100-class GPU (FP32 67; TF32 989, "
        "BF16 1979 with sparsity; halved)",
    ),
    Peak(
        r"\bH800\b.*\bPCIe\b",
        51.0,
        378.0,
        756.5,
        "NVIDIA H800 PCIe datasheet: the H100 PCIe's compute (FP32 51; TF32 756, BF16 1513 with "
        "sparsity; halved); the H800 cuts FP64 and NVLink, not tensor math",
    ),
    Peak(
        r"\bH800\b",
        67.0,
        494.5,
        989.5,
        "NVIDIA H800 SXM5 datasheet: the H100 SXM's compute (FP32 67; TF32 989, BF16 1979 with "
        "sparsity; halved); the H800 cuts FP64 and NVLink, not tensor math",
    ),
    Peak(
        r"\bH20\b",
        44.0,
        74.0,
        148.0,
        "NVIDIA HGX H20 specifications as NVIDIA gave them to partners and the press reported "
        "them (FP32 44, TF32 74, FP16/BF16 148 dense, FP8 296); there is no H20 datasheet on "
        "nvidia.com",
    ),
    Peak(
        r"\bGB200\b",
        80.0,
        1250.0,
        2500.0,
        "NVIDIA GB200 NVL72 specifications, per Blackwell GPU at up to 1,200 W (FP32 80; TF32 "
        "2.5 PF, FP16/BF16 5 PF with sparsity; halved)",
    ),
    Peak(
        r"\bB200\b",
        75.0,
        1100.0,
        2250.0,
        "NVIDIA HGX B200 specifications, per GPU at 1,000 W (FP32 75; TF32 2.2 PF, FP16/BF16 "
        "4.5 PF with sparsity; halved). GB200's GPUs report 'NVIDIA GB200' and run at 1,200 W: "
        "not this row",
    ),
    Peak(
        r"\bL40S\b",
        91.6,
        183.0,
        362.05,
        "NVIDIA L40S datasheet (TF32 183, BF16 362.05 dense; 366 / 733 with sparsity)",
    ),
    Peak(
        r"\bL40\b",
        90.5,
        90.5,
        181.05,
        "NVIDIA L40 datasheet (FP32 90.5; TF32 90.5, BF16 181.05 dense; 181 / 362.1 with "
        "sparsity). The L40S is its own row: 'L40' never matches 'L40S'",
    ),
    Peak(
        r"\bL4\b",
        30.3,
        60.0,
        121.0,
        "NVIDIA L4 datasheet (TF32 120, BF16 242 with sparsity; halved)",
    ),
    Peak(
        r"\bA10\b",
        31.2,
        62.5,
        125.0,
        "NVIDIA A10 datasheet (TF32 62.5, BF16 125 dense; 125 / 250 with sparsity)",
    ),
    Peak(
        r"\bA10G\b",
        None,
        None,
        None,
        "AWS's A10G (g5 instances) is a GA102 variant with its own clocks; NVIDIA publishes no "
        "A10G datasheet and AWS no tensor TFLOP/s, so the A10's figures do not apply and there "
        "is no sourced peak",
    ),
    Peak(
        r"\bA40\b",
        37.4,
        74.8,
        149.7,
        "NVIDIA A40 datasheet (FP32 37.4; TF32 74.8, BF16 with FP32 accumulate 149.7 dense; "
        "149.6 / 299.4 with sparsity)",
    ),
    Peak(
        r"\bRTX A6000\b",
        38.7,
        77.4,
        154.8,
        "NVIDIA RTX A6000 datasheet (FP32 38.7; tensor 309.7 = FP16 with sparsity, so 154.8 "
        "dense; GA102's professional boards run BF16 with FP32 accumulate at the FP16 rate and "
        "TF32 at half of it, as the A40 datasheet lists them: TF32 77.4 is that ratio, not a "
        "printed figure). Not the RTX 6000 Ada Generation or the Quadro RTX 6000",
    ),
    Peak(
        r"\bRTX 3090 Ti\b",
        40.0,
        40.0,
        80.0,
        "NVIDIA GeForce RTX 3090 Ti specifications (40 shader TFLOPS, 320 tensor TFLOPS = FP16 "
        "with sparsity and FP16 accumulate), at the GA102 whitepaper's GeForce ratios (the 3090: "
        "285 -> TF32 35.6 = /8, BF16 with FP32 accumulate 71 = /4; dense)",
    ),
    Peak(
        r"\bRTX 3090\b(?!\s*Ti\b)",
        35.6,
        35.6,
        71.0,
        "NVIDIA Ampere GA102 GPU Architecture whitepaper, GeForce RTX 3090 (TF32 35.6, BF16 with "
        "FP32 accumulate 71; dense)",
    ),
    Peak(
        r"\bRTX 4090 D\b",
        73.5,
        73.5,
        147.1,
        "NVIDIA GeForce RTX 4090 D specifications (14,592 CUDA cores, 114 SMs, 2.52 GHz boost: "
        "FP32 73.5) at the Ada whitepaper's RTX 4090 rates per SM (TF32 = FP32, BF16 with FP32 "
        "accumulate = 2 x FP32; dense)",
    ),
    Peak(
        r"\bRTX 4090\b(?!\s*(D|Laptop)\b)",
        82.6,
        82.6,
        165.2,
        "NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4090 (TF32 82.6, BF16 with FP32 "
        "accumulate 165.2; dense)",
    ),
    Peak(
        r"\bTITAN RTX\b",
        16.3,
        None,
        None,
        "NVIDIA TITAN RTX specifications (FP32 16.3 boost); Turing has no TF32 or BF16 tensor "
        "cores",
    ),
    Peak(
        r"\bV100S\b",
        16.4,
        None,
        None,
        "NVIDIA V100 datasheet, V100S PCIe (FP32 16.4; tensor 130 is FP16 only): Volta has no "
        "TF32 or BF16 units (torch emulates bf16 on it)",
    ),
    Peak(
        r"\bV100\b.*\bSXM2\b",
        15.7,
        None,
        None,
        "NVIDIA V100 datasheet, V100 SXM2 (FP32 15.7; tensor 125 is FP16 only): Volta has no "
        "TF32 or BF16 units (torch emulates bf16 on it)",
    ),
    Peak(
        r"\bV100\b.*\bPCIE\b",
        14.0,
        None,
        None,
        "NVIDIA V100 datasheet, V100 PCIe (FP32 14; tensor 112 is FP16 only): Volta has no TF32 "
        "or BF16 units (torch emulates bf16 on it)",
    ),
    Peak(
        r"\bV100\b",
        None,
        None,
        None,
        "a V100 board the V100 datasheet does not list (SXM3, FHHL, DGXS: other clocks and "
        "power); Volta has no TF32 or BF16 units in any case",
    ),
    Peak(
        r"\bT4\b",
        8.1,
        None,
        None,
        "NVIDIA T4 datasheet (FP32 8.1; mixed-precision FP16/FP32 tensor 65): Turing has no TF32 "
        "or BF16 units (torch emulates bf16 on it)",
    ),
)


def math_mode(precision: str, tf32: bool) -> str:
    """bf16 | tf32 | fp32: which units the run's matmuls used."""
    if precision == "bf16":
        return "bf16"
    return "tf32" if tf32 else "fp32"


def lookup_peak(gpu_name: str | None, mode: str) -> tuple[float | None, str]:
    """(dense peak TFLOP/s, source) for an NVML GPU name and math mode; None with the reason."""
    if not gpu_name:
        return None, "cpu run: no GPU peak (MFU is a GPU figure)"
    if re.search(r"\bMIG\b", gpu_name):  # torch names an instance "<GPU> MIG 1g.10gb"
        return None, (
            f"{gpu_name}: a MIG instance computes on a share of the GPU's SMs, so the whole "
            "GPU's peak does not apply; set peak_tflops in the sweep file"
        )
    for peak in PEAKS:
        if re.search(peak.pattern, gpu_name, flags=re.IGNORECASE):
            if peak.fp32 is None and peak.tf32 is None and peak.bf16 is None:
                return None, f"{gpu_name}: no peak for this GPU ({peak.source}); set peak_tflops"
            value = getattr(peak, mode)
            if value is None:
                return None, f"{gpu_name}: no {mode} units ({peak.source})"
            return value, f"{mode}: {peak.source}"
    return None, f"{gpu_name}: not in the peak table; set peak_tflops in the sweep file"


def efficiency(
    *,
    n_params: int | None,
    n_layer: int,
    d_model: int,
    n_positions: int,
    seq_len: int,
    tokens_per_step: int,
    gpus: int,
    median_step_time_s: float | None,
    precision: str,
    gpu_name: str | None,
    tf32: bool = False,
    peak_override: float | None = None,
) -> dict[str, float | str | None]:
    """The run's efficiency columns (``runs``): FLOPs per step, TFLOP/s per GPU, peak, MFU.

    n_params: the model's parameters, counted once (tied LM head); n_positions: rows of its
    position embedding, subtracted from N (see the module docstring). gpus: the distinct GPUs
    the run's ranks used (two ranks sharing one GPU count once, so its TFLOP/s and MFU are the
    GPU's, not half of it); on CPU, the world size (a rank's CPU share stands in for a GPU).
    """
    if not isinstance(gpus, int) or gpus < 1:
        raise ValueError(
            f"gpus must be a positive int (distinct GPUs, or ranks on CPU), got {gpus!r}"
        )
    out: dict[str, float | str | None] = {
        "model_flops_per_step": None,
        "achieved_tflops_per_gpu": None,
        "peak_tflops": None,
        "peak_source": None,
        "mfu": None,
    }
    matmul_params = (n_params or 0) - n_positions * d_model  # the position table is a lookup
    if matmul_params < 1:  # no parameter count (no rank trained), or not a gpt2 of this size
        return out
    total = flops_per_step(matmul_params, n_layer, d_model, seq_len, tokens_per_step)
    out["model_flops_per_step"] = total
    if median_step_time_s and median_step_time_s > 0:
        out["achieved_tflops_per_gpu"] = total / gpus / median_step_time_s / 1e12
    mode = math_mode(precision, tf32)
    if gpu_name and peak_override is not None:
        peak, source = peak_override, f"{mode}: peak_tflops from the sweep file"
    else:
        peak, source = lookup_peak(gpu_name, mode)
    out["peak_tflops"], out["peak_source"] = peak, source
    if peak and out["achieved_tflops_per_gpu"] is not None:
        out["mfu"] = out["achieved_tflops_per_gpu"] / peak
    return out
