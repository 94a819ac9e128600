"""The text of an offline run: wikitext's "cache only" attempt really is offline once datasets
is imported (it always is in a rank), so an air-gapped node falls back to the builtin corpus
without asking the hub (it paid datasets' five retries, 23 s a run, before)."""

from __future__ import annotations

import os
import socket

import datasets.config
import huggingface_hub.constants

from workloads import data


def test_no_name_is_looked_up_when_the_hub_is_unreachable(monkeypatch, tmp_path):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path)  # nothing cached
    monkeypatch.setattr(data, "hub_reachable", lambda timeout_s=3.0: False)
    looked_up = []

    def no_network(host, *args, **kwargs):
        looked_up.append(host)
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    before = (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    env_before = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    text = data.load_text("wikitext-2-raw-v1")
    assert looked_up == []
    assert text.description.startswith("builtin (fallback: wikitext-2-raw-v1 unavailable: cache:")
    assert text.description.endswith("hub unreachable)") and text.lines
    # the libraries and the env are as they were
    assert before == (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    assert {k: os.environ.get(k) for k in env_before} == env_before


def test_offline_mode_holds_inside_the_block_only():
    with data.hub_offline():
        assert datasets.config.HF_HUB_OFFLINE is True
        assert huggingface_hub.constants.HF_HUB_OFFLINE is True
        assert os.environ["HF_HUB_OFFLINE"] == os.environ["HF_DATASETS_OFFLINE"] == "1"
    assert datasets.config.HF_HUB_OFFLINE is huggingface_hub.constants.HF_HUB_OFFLINE is False
