"""orchestrator.analysis.flops: the FLOPs formula against PyTorch's own counter, the peak table, MFU."""

from __future__ import annotations

import pytest

from orchestrator.analysis.flops import PEAKS, efficiency, flops_per_token, lookup_peak


@pytest.fixture(scope="module")
def gpt2_tiny_eager():
    pytest.importorskip("torch")
    from workloads.model import build_model

    model = build_model("gpt2-tiny", 0)
    # FlopCounterMode does not see inside the fused CPU SDPA kernel; the eager path computes the
    # same attention matmuls (Q K^T, scores x V) as countable bmm ops.
    model.config._attn_implementation = "eager"
    return model


@pytest.mark.parametrize("seq_len", [64, 1024])
def test_formula_matches_torch_flop_counter_on_gpt2_tiny(gpt2_tiny_eager, seq_len):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from workloads.model import GPT2_SIZES, N_POSITIONS, n_params

    model = gpt2_tiny_eager
    batch = 1
    x = torch.randint(0, 50257, (batch, seq_len), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=x, labels=x).loss.backward()
    counted = counter.get_total_flops()
    n_layer, _, d = GPT2_SIZES["gpt2-tiny"]
    ours = efficiency(
        n_params=n_params(model),
        n_layer=n_layer,
        d_model=d,
        n_positions=N_POSITIONS,
        seq_len=seq_len,
        tokens_per_step=batch * seq_len,
        gpus=1,
        median_step_time_s=None,
        precision="fp32",
        gpu_name=None,
    )["model_flops_per_step"]
    assert ours == pytest.approx(counted, rel=0.05)
    if seq_len == 1024:  # the attention term matters: 6 N alone would be more than 5 % short
        attention = 12 * n_layer * d * seq_len * batch * seq_len
        assert ours - attention != pytest.approx(counted, rel=0.05)


def test_formula_terms():
    assert flops_per_token(1000, 2, 64, 128) == 6 * 1000 + 12 * 2 * 64 * 128
    with pytest.raises(ValueError, match="seq_len"):
        flops_per_token(1000, 2, 64, 0)


@pytest.mark.parametrize(
    "name,mode,value",
    [
        ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
        ("NVIDIA A100 80GB PCIe", "tf32", 156.0),
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
        ("NVIDIA H100 PCIe", "bf16", 756.5),
        ("NVIDIA H100 NVL", "bf16", 835.5),
        ("NVIDIA H200", "fp32", 67.0),
        ("NVIDIA H200 NVL", "bf16", 835.5),
        ("NVIDIA L40S", "bf16", 362.05),
        ("NVIDIA L4", "tf32", 60.0),
        ("NVIDIA A10", "bf16", 125.0),
        ("NVIDIA GeForce RTX 3090", "bf16", 71.0),
        ("NVIDIA GeForce RTX 4090", "tf32", 82.6),
        ("NVIDIA TITAN RTX", "fp32", 16.3),
        # variants with their own rows, never their sibling's (a 3090 Ti is not a 3090)
        ("NVIDIA GeForce RTX 3090 Ti", "bf16", 80.0),
        ("NVIDIA GeForce RTX 3090 Ti", "tf32", 40.0),
        ("NVIDIA GeForce RTX 4090 D", "bf16", 147.1),
        ("NVIDIA GeForce RTX 4090 D", "fp32", 73.5),
        ("NVIDIA GH200 480GB", "bf16", 989.5),
        ("NVIDIA GH200 144G HBM3e", "tf32", 494.5),
        ("NVIDIA H800", "bf16", 989.5),
        ("NVIDIA H800 80GB HBM3", "fp32", 67.0),
        ("NVIDIA H800 PCIe", "bf16", 756.5),
        ("NVIDIA B200", "bf16", 2250.0),
        ("NVIDIA B200", "tf32", 1100.0),
    ],
)
def test_peak_table_by_nvml_name(name, mode, value):
    peak, source = lookup_peak(name, mode)
    assert peak == value and source.startswith(mode)


@pytest.mark.parametrize(
    "name,not_this",
    [
        ("NVIDIA GeForce RTX 3090 Ti", 71.0),  # the 3090's row
        ("NVIDIA GeForce RTX 4090 D", 165.2),  # the 4090's row
        ("NVIDIA GH200 480GB", 989.4),  # "H200" inside "GH200" must not match the H200 row
        ("NVIDIA GB200", 2250.0),  # "B200" inside "GB200": other clocks, no row
        ("NVIDIA GeForce RTX 4090 Laptop GPU", 165.2),  # AD103, not AD102
    ],
)
def test_variants_never_borrow_a_siblings_peak(name, not_this):
    """Failed on 24a5ba5 for the 3090 Ti and 4090 D (they matched the 3090/4090 rows)."""
    assert lookup_peak(name, "bf16")[0] != not_this


def test_a10g_has_no_peak_and_says_why():
    """A10G (AWS g5) is not an A10: no published tensor figures, so no MFU rather than a
    wrong one; before, it fell through to 'not in the peak table'."""
    peak, why = lookup_peak("NVIDIA A10G", "bf16")
    assert peak is None
    assert "no peak for this GPU" in why and "A10G" in why and "peak_tflops" in why
    assert lookup_peak("NVIDIA A10", "bf16")[0] == 125.0  # the A10 keeps its row


def test_peak_table_gaps_are_said():
    assert lookup_peak("NVIDIA TITAN RTX", "bf16")[0] is None
    assert "no bf16 units" in lookup_peak("NVIDIA TITAN RTX", "bf16")[1]
    peak, why = lookup_peak("NVIDIA B300", "bf16")
    assert peak is None and "peak_tflops" in why
    assert lookup_peak(None, "fp32") == (None, "cpu run: no GPU peak (MFU is a GPU figure)")
    assert all(p.source and (p.fp32 is None or p.fp32 > 0) for p in PEAKS)
    # "A10" must not catch A100s
    assert lookup_peak("NVIDIA A100-PCIE-40GB", "bf16")[0] == 312.0


def _eff(**kw):
    args = dict(
        n_params=1_000_000,
        n_layer=2,
        d_model=64,
        n_positions=1024,
        seq_len=128,
        tokens_per_step=4 * 128,
        gpus=2,
        median_step_time_s=0.5,
        precision="bf16",
        gpu_name="NVIDIA H100 80GB HBM3",
    )
    return efficiency(**(args | kw))


def test_mfu_and_achieved_tflops():
    out = _eff()
    total = (6 * (1_000_000 - 1024 * 64) + 12 * 2 * 64 * 128) * 4 * 128
    assert out["model_flops_per_step"] == total
    assert out["achieved_tflops_per_gpu"] == pytest.approx(total / 2 / 0.5 / 1e12)
    assert out["mfu"] == pytest.approx(out["achieved_tflops_per_gpu"] / 989.4)
    over = _eff(peak_override=100.0)
    assert over["peak_tflops"] == 100.0 and "sweep file" in over["peak_source"]
    assert over["mfu"] == pytest.approx(over["achieved_tflops_per_gpu"] / 100.0)


def test_cpu_has_tflops_but_no_mfu():
    out = _eff(gpu_name=None, precision="fp32", peak_override=100.0)
    assert out["achieved_tflops_per_gpu"] > 0
    assert out["mfu"] is None and out["peak_tflops"] is None
    failed = _eff(n_params=None)
    assert set(failed.values()) == {None}


# GPUs with a datasheet that the table used to answer "not in the peak table" for: each NVML name
# resolves to its own row, dense figures, and a mode the GPU has no units for says so.
DATASHEET_PEAKS = [
    ("NVIDIA L40", 90.5, 90.5, 181.05, "L40 datasheet"),
    ("NVIDIA A40", 37.4, 74.8, 149.7, "A40 datasheet"),
    ("NVIDIA RTX A6000", 38.7, 77.4, 154.8, "RTX A6000 datasheet"),
    ("Tesla V100-SXM2-32GB", 15.7, None, None, "V100 SXM2"),
    ("Tesla V100-SXM2-16GB", 15.7, None, None, "V100 SXM2"),
    ("Tesla V100-PCIE-16GB", 14.0, None, None, "V100 PCIe"),
    ("Tesla V100S-PCIE-32GB", 16.4, None, None, "V100S PCIe"),
    ("Tesla T4", 8.1, None, None, "T4 datasheet"),
    ("NVIDIA A800-SXM4-80GB", 19.5, 156.0, 312.0, "A800 datasheets"),
    ("NVIDIA A800 80GB PCIe", 19.5, 156.0, 312.0, "A800 datasheets"),
    ("NVIDIA H20", 44.0, 74.0, 148.0, "HGX H20"),
    ("NVIDIA GB200", 80.0, 1250.0, 2500.0, "GB200 NVL72"),
]


@pytest.mark.parametrize("name,fp32,tf32,bf16,source", DATASHEET_PEAKS)
def test_datasheet_gpus_resolve_to_their_row(name, fp32, tf32, bf16, source):
    """Failed before: every one of these answered 'not in the peak table'."""
    for mode, want in (("fp32", fp32), ("tf32", tf32), ("bf16", bf16)):
        peak, why = lookup_peak(name, mode)
        assert peak == want, (name, mode)
        assert source in why
        if want is None:  # V100 and T4: no TF32 or BF16 units, said as such
            assert f"no {mode} units" in why and "not in the peak table" not in why
        else:
            assert why.startswith(mode)


@pytest.mark.parametrize(
    "near_miss,not_this",
    [
        ("NVIDIA L40S", 181.05),  # the L40's bf16: the L40S keeps its own row
        ("NVIDIA RTX A400", 149.7),  # "A40" inside "A400"
        ("NVIDIA RTX A4000", 149.7),  # "A40" inside "A4000"
        ("NVIDIA RTX 6000 Ada Generation", 154.8),  # not the RTX A6000
        ("Quadro RTX 6000", 154.8),
        ("NVIDIA H200", 148.0),  # "H20" inside "H200"
        ("NVIDIA GH200 480GB", 2500.0),  # not the GB200
        ("NVIDIA B200", 2500.0),  # "B200" is its own row, not the GB200's
    ],
)
def test_near_miss_names_do_not_take_a_new_row(near_miss, not_this):
    assert lookup_peak(near_miss, "bf16")[0] != not_this


def test_a10g_stays_unknown_and_unlisted_v100_boards_say_why():
    assert lookup_peak("NVIDIA A10G", "bf16")[0] is None
    peak, why = lookup_peak("Tesla V100-SXM3-32GB", "fp32")
    assert peak is None and "does not list" in why and "peak_tflops" in why
    assert lookup_peak("NVIDIA RTX A4000", "bf16")[0] is None  # no row: not the A40's
    assert lookup_peak("NVIDIA L40S", "bf16")[0] == 362.05


@pytest.mark.parametrize("gpus", [0, -1, 2.0, None])
def test_gpus_must_be_a_positive_count(gpus):
    with pytest.raises(ValueError, match=r"gpus must be a positive int .*got"):
        _eff(gpus=gpus)


def test_a_mig_instance_has_no_peak_of_its_own():
    """A 1g.10gb slice of an A100 has 1/7 of its compute: the A100's 312 TFLOP/s would put its
    MFU 7x too low, so the peak is unknown with why (before: the whole A100's)."""
    from orchestrator.analysis.flops import lookup_peak

    peak, why = lookup_peak("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "bf16")
    assert peak is None and "MIG instance" in why and "peak_tflops" in why
    assert lookup_peak("NVIDIA A100-SXM4-80GB", "bf16")[0] == 312.0
