"""The hand-run scripts still work: the widget-extremes sweep finds a flip that must be there."""

from tests import extremes


def test_extremes_sweep_sees_the_mechanism_switched_off(capsys):
    extremes.probe("engine.moe_continual", limit=60.0)
    out = capsys.readouterr().out
    # one expert is no mixture at all: the MoE-vs-single badge must flip there
    block = out.split("  experts=1:")[1].split("\n  ")[0:4]
    assert any("median G_T(MoE) / G_T(single): pass" in line and "-> FAIL" in line for line in block), out
    # a setting the engine refuses is reported as such, with the engine's message
    assert "  pool=1: refused: the pool (N = 1) must hold at least one task per cluster" in out, out
