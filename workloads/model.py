"""gpt2 configs with random init: weights are never downloaded, the real sizes are benchmarked.

May import: torch, transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a model is built: the sizes table stays light
    import torch

# (n_layer, n_head, n_embd) of the published gpt2 family; gpt2-tiny is a CPU-sized stand-in that
# keeps gpt2's vocabulary (50257) and positions (1024), so its embedding and LM head are real-size.
GPT2_SIZES = {
    "gpt2": (12, 12, 768),
    "gpt2-medium": (24, 16, 1024),
    "gpt2-large": (36, 20, 1280),
    "gpt2-xl": (48, 25, 1600),
    "gpt2-tiny": (2, 2, 64),
}
VOCAB_SIZE = 50257
N_POSITIONS = 1024


def build_model(name: str, seed: int) -> torch.nn.Module:
    """A randomly initialised GPT2LMHeadModel; the same seed gives the same weights on every rank."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    n_layer, n_head, n_embd = GPT2_SIZES[name]
    config = GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_positions=N_POSITIONS,
        n_layer=n_layer,
        n_head=n_head,
        n_embd=n_embd,
        # No dropout: step time and loss should depend on the link, not on RNG state.
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
    )
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config)


def n_params(model: torch.nn.Module) -> int:
    """Trainable parameters, counted once (gpt2 ties the LM head to the token embedding)."""
    return sum(
        p.numel() for p in {id(p): p for p in model.parameters() if p.requires_grad}.values()
    )
