"""Training data and tokenizer, with honest fall-backs.

- ``wikitext-2-raw-v1`` comes through ``datasets.load_dataset`` when the hub or its local cache
  is reachable; otherwise the run falls back to the builtin corpus and says so in its record.
- ``builtin`` is a small corpus shipped in this repo (``workloads/data/builtin.txt``, written
  for linksweep, same license as the code), loaded through datasets' ``text`` loader.
- any other value is a path to a local text file, loaded the same way.

Tokenizer: the gpt2 tokenizer from the local cache when present, else a byte-level fallback
(token id = byte value). The model keeps gpt2's vocabulary size either way, so parameter counts
and the embedding/LM-head cost stay those of real gpt2.

Blocks of ``seq_len`` tokens are cut from the concatenated text (as run_clm.py does); each rank
reads a disjoint, seeded-shuffled share and cycles through it.

May import: datasets, huggingface_hub, torch, transformers.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

BUILTIN_PATH = Path(__file__).parent / "data" / "builtin.txt"
HUB_HOST = "huggingface.co"


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """A TCP connect to the hub, so an offline machine fails in seconds, not after retries."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        return False
    try:
        with socket.create_connection((HUB_HOST, 443), timeout=timeout_s):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class TextSource:
    lines: list[str]
    description: str  # stored in runs.data_source


def _load_text_file(path: str) -> list[str]:
    """A local file through datasets' ``text`` loader, offline: online, datasets would first
    count the load on the hub (``load.increase_load_count``, a HEAD request to S3)."""
    import datasets

    with hub_offline():
        ds = datasets.load_dataset("text", data_files=str(path), split="train")
    return [t for t in ds["text"] if t.strip()]


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """datasets and huggingface_hub offline for the body of the ``with``: their env variables
    (``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE``) and the constants each library made of them
    when it was imported (``datasets.config.HF_HUB_OFFLINE``,
    ``huggingface_hub.constants.HF_HUB_OFFLINE``). Setting the env alone does nothing once they
    are imported, and they always are (the rank's imports phase; the fork server preloads them):
    the "cache only" attempt then asked the hub anyway, and an offline node paid datasets'
    five retries, 23 s a run here, before the builtin fallback."""
    import datasets.config
    import huggingface_hub.constants as hub_constants

    saved_env = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    saved = [(m, m.HF_HUB_OFFLINE) for m in (datasets.config, hub_constants)]
    os.environ.update({k: "1" for k in saved_env})
    for module, _ in saved:
        module.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for module, value in saved:
            module.HF_HUB_OFFLINE = value
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _load_wikitext(offline: bool) -> list[str]:
    import datasets

    with hub_offline() if offline else contextlib.nullcontext():
        ds = datasets.load_dataset("wikitext", "wikitext-2-raw-v1", split="train")
    return [t for t in ds["text"] if t.strip()]


def load_text(dataset: str) -> TextSource:
    """Resolve the sweep's ``dataset`` value to text lines and a description of what was used."""
    if dataset == "wikitext-2-raw-v1":
        errors = []
        for offline in (True, False):  # cache first (fast), then the hub if reachable
            if not offline and not hub_reachable():
                errors.append("hub unreachable")
                break
            try:
                lines = _load_wikitext(offline)
                where = "cache" if offline else "hub"
                return TextSource(lines, f"wikitext-2-raw-v1 ({where}, datasets)")
            except Exception as exc:  # noqa: BLE001 - any loader failure means fall back
                errors.append(f"{'cache' if offline else 'hub'}: {type(exc).__name__}")
        lines = _load_text_file(str(BUILTIN_PATH))
        why = "; ".join(errors)
        return TextSource(lines, f"builtin (fallback: wikitext-2-raw-v1 unavailable: {why})")
    if dataset == "builtin":
        return TextSource(_load_text_file(str(BUILTIN_PATH)), "builtin (datasets text loader)")
    return TextSource(_load_text_file(dataset), f"file:{os.path.abspath(dataset)}")


class ByteTokenizer:
    """Byte-level fallback: one token per UTF-8 byte, ids 0..255, EOS = 50256 as in gpt2."""

    eos_token_id = 50256
    name = "byte-level fallback (gpt2 tokenizer not cached; ids 0-255 of gpt2's 50257)"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


def load_tokenizer():
    """gpt2's tokenizer from the local cache, else :class:`ByteTokenizer`. Returns (tok, name)."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained("gpt2", local_files_only=True)
        return tok, "gpt2 (local cache)"
    except Exception:  # noqa: BLE001 - not cached: use the fallback and record it
        tok = ByteTokenizer()
        return tok, tok.name


def make_blocks(lines: list[str], tokenizer, seq_len: int) -> torch.Tensor:
    """Concatenate the text with EOS separators and cut it into [n_blocks, seq_len] blocks."""
    ids: list[int] = []
    for line in lines:
        ids.extend(tokenizer.encode(line))
        ids.append(tokenizer.eos_token_id)
    n = len(ids) // seq_len
    if n < 1:
        raise ValueError(
            f"dataset has {len(ids)} tokens, fewer than one block of seq_len={seq_len}"
        )
    return torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)


def batches(
    blocks: torch.Tensor, micro_batch_size: int, rank: int, world_size: int, seed: int
) -> Iterator[torch.Tensor]:
    """Endless micro-batches from this rank's share of the blocks, reshuffled each epoch."""
    share = blocks[rank::world_size] if len(blocks) >= world_size else blocks
    gen = torch.Generator().manual_seed(seed + rank)
    epoch_pos = 0
    order = torch.randperm(len(share), generator=gen)
    while True:
        idx = []
        for _ in range(micro_batch_size):
            if epoch_pos == len(order):
                order = torch.randperm(len(share), generator=gen)
                epoch_pos = 0
            idx.append(order[epoch_pos])
            epoch_pos += 1
        yield share[torch.stack(idx)]
