"""Every engine's ``HEAVY_CONFIG`` (the largest setting its widgets allow, timed by tests/bench.py) is a
setting a user can actually reach: a valid Config, every field inside its widget's range and on the
widget's step grid, and unchanged by the shared-link round trip (to_query -> from_query). No timing here."""

import dataclasses
import importlib
import math

import pytest

from engine.core.params import Float, Int, from_query, to_query, widget_specs
from engine.registry import built_papers

MODULES = [p.module for p in built_papers()]
HEAVY = [m for m in MODULES if hasattr(importlib.import_module(m), "HEAVY_CONFIG")]


def _on_grid(spec, v) -> bool:
    """A slider with a step reaches lo + k * step; its upper end is also reachable through a link."""
    step = getattr(spec, "step", None)
    if not step or v == spec.hi:
        return True
    k = (v - spec.lo) / step
    return math.isclose(k, round(k), abs_tol=1e-6)


def test_every_engine_defines_a_heavy_config():
    assert HEAVY == MODULES, sorted(set(MODULES) - set(HEAVY))


@pytest.mark.parametrize("module", HEAVY)
def test_heavy_config_is_reachable_through_the_widgets(module):
    mod = importlib.import_module(module)
    heavy = mod.HEAVY_CONFIG
    assert type(heavy) is mod.Config
    values = {f.name: getattr(heavy, f.name) for f in dataclasses.fields(mod.Config)}
    assert mod.Config(**values) == heavy  # passes the Config's own validation (__post_init__) again
    specs = widget_specs(mod.Config)
    for f in dataclasses.fields(mod.Config):
        v = getattr(heavy, f.name)
        if f.name not in specs:  # no widget: a user cannot change it, so it must stay at its default
            assert v == f.default, f"{module}.{f.name} has no widget but is set to {v!r}"
            continue
        spec = specs[f.name]
        assert spec.validate(v) == v, f"{module}.{f.name}={v!r}"  # raises ParamError when out of range
        if isinstance(spec, Int | Float):
            assert _on_grid(spec, v), f"{module}.{f.name}={v!r} is off the slider's step {spec.step}"
    cfg, notices = from_query(mod.Config, to_query(heavy))
    assert notices == []
    assert cfg == heavy
