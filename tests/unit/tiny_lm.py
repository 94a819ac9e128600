"""A two-layer stand-in for gpt2 with its calling convention (``input_ids``, ``labels`` ->
``.loss``): a DDP run on one gloo rank in a unit test, in seconds."""

from __future__ import annotations

import types

import torch


class TinyLM(torch.nn.Module):
    """An embedding and a linear head, seeded: the same weights in every test."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(64, 32)
        self.head = torch.nn.Linear(32, 64)

    def forward(self, input_ids, labels):
        logits = self.head(self.emb(input_ids))
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return types.SimpleNamespace(loss=loss)
