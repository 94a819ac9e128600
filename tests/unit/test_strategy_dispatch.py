"""The rank side builds the class the catalog's entry names (``workloads.strategies.
make_strategy``): an unknown strategy is an error naming the allowed values, never ZeRO; and
what workloads/fsdp.py knows of its strategies comes from the catalog."""

from __future__ import annotations

import dataclasses
import types

import pytest

from workloads import catalog, fsdp, strategies


class Recorded:
    """A workload class that only keeps its arguments."""

    def __init__(self, model, device, cfg, autocast_dtype):
        self.args = (model, device, cfg, autocast_dtype)


def test_an_unknown_strategy_is_an_error_naming_the_allowed_values():
    cfg = types.SimpleNamespace(strategy="zero4")
    with pytest.raises(ValueError, match="zero4") as err:
        strategies.make_strategy(None, None, cfg, None)
    for name in catalog.names():
        assert repr(name) in str(err.value)


def test_each_entry_names_a_workload_class_with_the_strategy_signature():
    expected = {
        "ddp": strategies.DDPStrategy,
        "zero": strategies.ZeroStrategy,
        "fsdp2": fsdp.FsdpStrategy,
    }
    for name in catalog.names():
        entry = catalog.strategy(name)
        assert catalog.resolve(entry.workload) is expected[entry.family], name


def test_make_strategy_builds_the_class_the_entry_names(monkeypatch):
    entry = dataclasses.replace(
        catalog.strategy("ddp"), name="probe", workload=f"{__name__}:Recorded"
    )
    monkeypatch.setitem(catalog.STRATEGIES, "probe", entry)
    cfg = types.SimpleNamespace(strategy="probe")
    built = strategies.make_strategy("model", "device", cfg, "bf16")
    assert isinstance(built, Recorded) and built.args == ("model", "device", cfg, "bf16")


def test_fsdp_reads_its_strategies_and_flavours_from_the_catalog():
    assert catalog.names("fsdp2") == fsdp.FSDP_STRATEGIES
    for name in fsdp.FSDP_STRATEGIES:
        assert fsdp.GRAD_SYNC[name] == catalog.offered("grad_sync", name)
        options = fsdp.FsdpOptions(name, hsdp_shard_size=2 if fsdp.hybrid(name) else None)
        assert options.grad_sync == catalog.default("grad_sync", name)
    with pytest.raises(ValueError, match="is not one of"):
        fsdp.FsdpOptions("zero3")


def test_the_mesh_is_one_dimensional_unless_the_strategy_is_hybrid():
    flat = [s for s in catalog.names("fsdp2") if not fsdp.hybrid(s)]
    hybrid = [s for s in catalog.names("fsdp2") if fsdp.hybrid(s)]
    assert flat and hybrid
    assert fsdp.mesh_shape(flat[0], 4, None) == (4,)
    assert fsdp.mesh_shape(hybrid[0], 4, 2) == (2, 2)
    with pytest.raises(ValueError, match="does not divide world_size=4"):
        fsdp.mesh_shape(hybrid[0], 4, 3)
    with pytest.raises(ValueError, match="applies to"):
        fsdp.FsdpOptions(flat[0], hsdp_shard_size=2)
