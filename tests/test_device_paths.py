"""The GPU code path, checked on the CPU: every engine keeps its tensors on one device.

tests/devicecheck.py makes get_device() return a fake accelerator and records every torch call that a CUDA
device would refuse. The first tests show that the checker catches each kind of mistake it looks for (so an
empty finding list means something); the last two run every engine's default config under it, and the largest
setting (live training) of each engine that declares USES_DEVICE.
"""
import importlib

import numpy as np
import pytest
import torch

from engine.registry import built_papers
from tests.devicecheck import FAKE, check_engine, device_engines, fake_accelerator, fewer_iterations


def _findings(fn):
    with fake_accelerator() as chk:
        import engine.core.device as d

        fn(d.get_device())
    return list(chk.problems)


def test_fake_device_is_the_accelerator_for_engines():
    import engine.attention_sink as m

    with fake_accelerator():
        assert m.get_device() == FAKE and m.get_device().type == "cuda"
    assert m.get_device().type == "cpu"


@pytest.mark.parametrize("case, expect", [
    ("host operand", True),
    ("host operand, 0-dim", False),
    ("both on the device", False),
    ("device taken from a tensor", False),
    ("numpy of a device tensor", True),
    ("numpy after cpu()", False),
    ("module left on the host", True),
    ("module moved", False),
    ("host generator, device draw", True),
    ("device generator, device draw", False),
    ("cat across devices", True),
    ("host tensor, device indices", True),
])
def test_checker_catches_what_cuda_refuses(case, expect):
    def body(dev):
        x = torch.ones(4, 3, device=dev)
        if case == "host operand":
            x + torch.ones(4, 3)
        elif case == "host operand, 0-dim":
            x * torch.tensor(2.0)
        elif case == "both on the device":
            x + torch.zeros(4, 3, device=dev)
        elif case == "device taken from a tensor":
            x + torch.arange(3, device=x.device)
        elif case == "numpy of a device tensor":
            np.asarray(x.sum(0))
        elif case == "numpy after cpu()":
            (x * 2).cpu().numpy()
        elif case == "module left on the host":
            torch.nn.Linear(3, 2)(x)
        elif case == "module moved":
            torch.nn.Linear(3, 2).to(dev)(x).detach().cpu().numpy()
        elif case == "host generator, device draw":
            torch.randn(3, generator=torch.Generator().manual_seed(0), device=dev)
        elif case == "device generator, device draw":
            torch.randn(3, generator=torch.Generator(device=dev).manual_seed(0), device=dev)
        elif case == "cat across devices":
            torch.cat([x, torch.ones(1, 3)])
        elif case == "host tensor, device indices":
            torch.ones(5)[torch.tensor([0, 2], device=dev)]

    assert bool(_findings(body)) is expect, case


def test_checker_catches_a_net_left_on_the_host_in_an_engine_helper():
    """Engine-level check: unbalanced FM's Euler integrator with a velocity net that was never moved."""
    import engine.unbalanced_fm as ufm

    x0 = np.zeros((8, 2), np.float32)
    net_host = ufm._velocity_net(torch)
    assert _findings(lambda dev: ufm.euler(net_host, x0, 2, dev))
    assert not _findings(lambda dev: ufm.euler(ufm._velocity_net(torch).to(dev), x0, 2, dev))


def test_device_engines_are_found():
    mods = device_engines()
    assert len(mods) >= 10 and "engine.attention_sink" in mods


@pytest.mark.parametrize("module", [p.module for p in built_papers()])
def test_default_run_keeps_one_device(module):
    """Every engine's default run (the 22 that keep torch on the CPU must not touch the device at all)."""
    assert check_engine(module) == []


@pytest.mark.parametrize("module", device_engines())
def test_largest_setting_keeps_one_device(module):
    """HEAVY_CONFIG: the live-training paths that the default view (often a shipped checkpoint) skips, with its
    iteration counts cut to a quarter (``fewer_iterations``: the same branches and sizes, fewer identical steps;
    ``python -m tests.devicecheck --heavy`` runs them in full)."""
    m = importlib.import_module(module)
    assert check_engine(module, fewer_iterations(m.HEAVY_CONFIG)) == []


def test_fewer_iterations_cuts_only_iteration_counts():
    """Only whole-number iteration widgets change, to about a quarter, on their widget's grid and inside its range;
    a config without such a field (or already at the minimum) comes back equal."""
    import engine.calnf as calnf
    import engine.deep_ruot as ruot
    import engine.mcqa_mechanics as mcqa
    from engine.core.params import widget_specs

    for eng in (calnf, ruot):
        heavy, cut = eng.HEAVY_CONFIG, fewer_iterations(eng.HEAVY_CONFIG)
        specs = widget_specs(type(heavy))
        changed = {k for k in specs if getattr(heavy, k) != getattr(cut, k)}
        assert changed and all(k in ("steps", "iters", "iters3") for k in changed)
        for k in changed:
            lo, step = specs[k].lo, specs[k].step
            assert lo <= getattr(cut, k) <= max(lo, getattr(heavy, k) // 4) and (getattr(cut, k) - lo) % step == 0
            specs[k].validate(getattr(cut, k))
    # 750 steps: a quarter is 187, and the grid below it from the minimum 100 in steps of 50 gives 150
    assert fewer_iterations(calnf.HEAVY_CONFIG).steps == 150 and fewer_iterations(calnf.HEAVY_CONFIG).compare_all
    assert fewer_iterations(mcqa.HEAVY_CONFIG) == mcqa.HEAVY_CONFIG


def test_command_line_sweeps_the_widget_branches(capsys):
    from tests.devicecheck import main

    assert main(["--pages", "qnn-ansatz", "--branches"]) == 0
    out = capsys.readouterr().out
    assert "engine.qnn_ansatz [default]: ok" in out and "[entangler='cnot']: ok" in out
