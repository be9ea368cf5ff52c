"""Device-placement check for the GPU code path, run on a CPU-only machine.

No engine has run on a GPU in this project, so a tensor left on the host while the rest of a computation moves
to ``get_device()`` would only show on a GPU host, as a traceback. This module finds such mistakes without one:

* ``get_device()`` is made to return ``torch.device("cpu", 0)``. Torch computes on it exactly as on the CPU, but
  a call site that asks for that device (``device=dev``, ``.to(dev)``, ``module.to(dev)``) can be told apart from
  one that asks for nothing, which on a GPU host means the CPU.
* A ``TorchFunctionMode`` tags every tensor it sees as "dev" (on the accelerator) or "host", follows the tags
  through every torch call, and records each call that a CUDA device would refuse: tensors of both kinds in one
  op (host 0-dim tensors excepted, as CUDA allows them), ``.numpy()`` / ``np.asarray`` of a dev tensor, a host
  generator drawing dev numbers, a host tensor indexed by dev indices.

``python -m tests.devicecheck [--pages a,b] [--all] [--heavy] [--branches]`` prints the findings for the default
config (or HEAVY_CONFIG; ``--branches``: also each other option of every choice / checkbox widget) of every
engine that declares ``USES_DEVICE = True`` (``--all``: every engine);
``tests/test_device_paths.py`` asserts there are none.

What it cannot see: work done outside torch's Python API (C++ autograd, which keeps devices consistent by
itself), calls into ``torch.cuda`` (a branch on ``device.type == "cuda"`` is taken, but a CUDA-only call in it
would fail here; no engine has one), speed, and numerics (float precision, non-deterministic kernels) that
differ on a real GPU.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import os
import re
import sys

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

DEV, HOST = "dev", "host"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OURS = tuple(os.path.join(ROOT, d) + os.sep for d in ("engine", "components", "pages", "tests"))


class _FakeDevice(str):
    """The fake accelerator: torch reads it as the string "cpu:0"; code that asks for ``.type`` is told "cuda",
    so branches written for a GPU (e.g. "numpy only on the CPU") take their GPU side."""

    type = "cuda"
    index = 0

    def __repr__(self):
        return "device(type='cuda', index=0) [fake: cpu:0]"


FAKE = _FakeDevice("cpu:0")


def _device_tag(d) -> str | None:
    """Tag of a device argument: FAKE (or 'cpu:0', 'cuda') is the accelerator, any other cpu is the host."""
    if d is None:
        return None
    if isinstance(d, _FakeDevice) or isinstance(d, int):
        return DEV
    d = torch.device(d)
    if d.type == "cuda" or (d.type == "cpu" and d.index is not None):
        return DEV
    return HOST


def _flatten(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _flatten(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _flatten(y, out)
    return out


class _TaggedGenerator(torch.Generator):
    """torch.Generator that remembers which device it was made for (CUDA needs the generator on the op's device)."""

    def __new__(cls, device="cpu"):
        g = super().__new__(cls, device="cpu")
        g.tag = _device_tag(device) or HOST
        return g


class DeviceChecker(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.tags = WeakIdKeyDictionary()
        self.problems: dict[str, int] = {}

    # -- bookkeeping -------------------------------------------------------------------------------------------------
    def tag(self, t) -> str | None:
        got = self.tags.get(t)
        if got is None and isinstance(t, torch.nn.Parameter):
            return HOST  # made before the check began: parameters are born on the host unless moved
        return got

    def set_tag(self, x, tag):
        if tag is None:
            return
        for t in _flatten(x, []):
            self.tags[t] = tag

    def report(self, what: str):
        import traceback

        frames = [f for f in traceback.extract_stack()[:-2]
                  if os.path.abspath(f.filename).startswith(_OURS) and not f.filename.endswith("devicecheck.py")]
        where = f"{os.path.relpath(frames[-1].filename, ROOT)}:{frames[-1].lineno}" if frames else "?"
        key = f"{where}: {what}"
        self.problems[key] = self.problems.get(key, 0) + 1

    # -- the mode ----------------------------------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        owner = getattr(getattr(func, "__self__", None), "__name__", "")
        ins = _flatten(list(args), []) + _flatten(list(kwargs.values()), [])

        if name == "__set__" and owner == "data":  # param.data = x: the parameter now lives where x lives
            out = func(*args, **kwargs)
            self.set_tag(args[0], self.tag(args[1]))
            return out
        if name == "__get__" and owner == "device":  # t.device names the fake accelerator for dev tensors
            out = func(*args, **kwargs)
            return FAKE if self.tag(args[0]) == DEV else out
        if name in ("numpy", "__array__") and ins and self.tag(ins[0]) == DEV:
            self.report(f"{name}() of a tensor on the accelerator (needs .cpu() first)")
        if name == "__getitem__" and len(ins) > 1 and self.tag(ins[0]) == HOST and any(
                self.tag(t) == DEV for t in ins[1:]):
            self.report("host tensor indexed with accelerator indices")

        out = func(*args, **kwargs)

        # where does the result live?
        if name in ("cpu",):
            tag = HOST
        elif name in ("cuda",):
            tag = DEV
        elif name in ("to", "type_as", "new_tensor", "new_zeros", "new_ones", "new_empty", "new_full"):
            tag = self._to_tag(name, args, kwargs)
        elif "device" in kwargs and kwargs["device"] is not None:
            tag = _device_tag(kwargs["device"])
        elif name == "from_numpy":
            tag = HOST
        else:
            tag = self._mixed(name, ins)
            if tag is None and not ins and isinstance(out, torch.Tensor):
                tag = HOST  # a factory asked for no device: the CPU on every host
        if name in ("to", "cpu", "cuda") and out is args[0] and tag is not None and tag != self.tag(out):
            out = out.view_as(out)  # on the CPU .to()/.cpu() return the tensor itself; a GPU copy is a new tensor
        gen = kwargs.get("generator")
        if gen is not None and tag is not None and getattr(gen, "tag", HOST) != tag:
            self.report(f"{name}: a {getattr(gen, 'tag', HOST)} generator draws {tag} numbers")
        self.set_tag(out, tag)
        return out

    def _to_tag(self, name, args, kwargs):
        src = self.tag(args[0]) if args and isinstance(args[0], torch.Tensor) else None
        if name == "type_as":
            return self.tag(args[1])
        if name.startswith("new_"):
            return _device_tag(kwargs.get("device")) or src
        target = kwargs.get("device")
        for a in args[1:]:
            if isinstance(a, torch.Tensor):
                return self.tag(a)
            if isinstance(a, (str, torch.device, int)) and not isinstance(a, bool):
                target = a
        if kwargs.get("other") is not None:
            return self.tag(kwargs["other"])
        return _device_tag(target) or src

    _CROSS_OK = frozenset({"copy_", "__setitem__", "to", "__get__", "__set__", "__getitem__",
                           "_has_compatible_shallow_copy_type"})

    def _mixed(self, name, ins):
        dev = any(self.tag(t) == DEV for t in ins)
        host_big = [t for t in ins if self.tag(t) == HOST and t.dim() > 0]
        if dev and host_big and name not in self._CROSS_OK:
            self.report(f"{name}: host tensor {tuple(host_big[0].shape)} mixed with accelerator tensors")
        if name == "__setitem__" and len(ins) >= 2 and self.tag(ins[0]) == DEV and self.tag(ins[-1]) == HOST \
                and ins[-1].dim() > 0 and len(ins) > 2:
            self.report("advanced-index assignment of a host tensor into an accelerator tensor")
        if name == "__getitem__" and ins:
            return self.tag(ins[0])
        if dev:
            return DEV
        if any(self.tag(t) == HOST for t in ins):
            return HOST
        return None


@contextlib.contextmanager
def fake_accelerator():
    """Within the block get_device() returns the fake accelerator and the checker watches torch; yields it."""
    import engine.core.device as core_device

    checker = DeviceChecker()
    orig_get = core_device.get_device
    orig_gen = torch.Generator
    orig_param_new = torch.nn.Parameter.__new__
    orig_param_raw = torch.nn.Parameter.__dict__["__new__"]  # the staticmethod itself, put back as it was
    patched = []

    def fake_get_device():
        orig_get()  # keeps the thread limits
        return FAKE

    for mod in list(sys.modules.values()):
        name = getattr(mod, "__name__", "") or ""
        if (name == "engine" or name.startswith("engine.") or name.startswith("components")) and \
                getattr(mod, "get_device", None) is orig_get:
            patched.append(mod)
            mod.get_device = fake_get_device

    def param_new(cls, data=None, requires_grad=True):
        p = orig_param_new(cls, data, requires_grad)
        if data is not None:
            checker.set_tag(p, checker.tag(data) or HOST)
        return p

    orig_load = torch.load

    def load(*args, **kwargs):  # map_location=<accelerator>: load on the CPU, then mark every tensor as dev
        target = _device_tag(kwargs.get("map_location")) if not callable(kwargs.get("map_location")) else None
        if target == DEV:
            kwargs["map_location"] = "cpu"
        out = orig_load(*args, **kwargs)
        checker.set_tag(out, target)
        return out

    torch.Generator = _TaggedGenerator
    torch.nn.Parameter.__new__ = staticmethod(param_new)
    torch.load = load
    try:
        with checker:
            yield checker
    finally:
        torch.Generator = orig_gen
        torch.load = orig_load
        torch.nn.Parameter.__new__ = orig_param_raw
        for mod in patched:
            mod.get_device = orig_get


def result_leaks(checker: DeviceChecker, result) -> list[str]:
    """Fields of a Result that still hold accelerator tensors (the page would call .numpy() on them)."""
    out = []
    fields = dataclasses.fields(result) if dataclasses.is_dataclass(result) else []
    for f in fields:
        for t in _flatten(getattr(result, f.name), []):
            if checker.tag(t) == DEV:
                out.append(f.name)
                break
    return out


def device_engines() -> list[str]:
    from engine.registry import built_papers

    mods = []
    for p in built_papers():
        m = importlib.import_module(p.module)
        if getattr(m, "USES_DEVICE", False):
            mods.append(p.module)
    return mods


_ITERATION_FIELD = re.compile(r"(^|_)(steps|iters\d*|epochs)$")


def fewer_iterations(config, factor: int = 4):
    """``config`` with every iteration-count widget (a whole-number field named ``steps``, ``*_steps``, ``iters``,
    ``iters3``, ``epochs``, ...) cut to 1/``factor`` of its value, on its widget's grid and not below its minimum.
    Everything else (the branches, the sizes) stays as it is. Where a tensor lives does not depend on how many
    times the same training step runs, so the suite checks HEAVY_CONFIG's code paths this way at a fraction of
    the cost; ``python -m tests.devicecheck --heavy`` runs them in full."""
    from engine.core.params import Int, widget_specs

    cut = {}
    for name, spec in widget_specs(type(config)).items():
        v = getattr(config, name)
        if isinstance(spec, Int) and _ITERATION_FIELD.search(name) and v > spec.lo:
            cut[name] = max(spec.lo, spec.lo + (v // factor - spec.lo) // spec.step * spec.step)
    return dataclasses.replace(config, **cut)


def check_engine(module: str, config=None) -> list[str]:
    m = importlib.import_module(module)
    for obj in list(vars(m).values()):  # drop models cached by earlier runs, so every model is made (and moved) here
        if callable(getattr(obj, "cache_clear", None)):
            obj.cache_clear()
    with fake_accelerator() as chk:
        res = m.run(config if config is not None else m.Config())
        m.claims(res)
    findings = [f"{k} (x{n})" for k, n in sorted(chk.problems.items())]
    findings += [f"Result.{f} holds accelerator tensors" for f in result_leaks(chk, res)]
    return findings


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", default="", help="comma-separated slugs (default: every USES_DEVICE engine)")
    ap.add_argument("--all", action="store_true", help="every built engine, not only the USES_DEVICE ones")
    ap.add_argument("--heavy", action="store_true", help="run HEAVY_CONFIG (live training) instead of the default")
    ap.add_argument("--branches", action="store_true",
                    help="also every other option of each choice / checkbox widget, one widget at a time")
    a = ap.parse_args(argv)
    if a.all:
        from engine.registry import built_papers

        mods = [p.module for p in built_papers()]
    else:
        mods = device_engines()
    if a.pages:
        want = {s.strip().replace("-", "_") for s in a.pages.split(",")}
        mods = [m for m in mods if m.split(".")[-1] in want]
    bad = 0
    for mod in mods:
        m = importlib.import_module(mod)
        configs = [("default" if not a.heavy else "HEAVY_CONFIG", m.HEAVY_CONFIG if a.heavy else m.Config())]
        if a.branches:
            configs += _branch_configs(m)
        for label, cfg in configs:
            try:
                findings = check_engine(mod, cfg)
            except ValueError as e:  # InputError: a combination the engine refuses with a message
                print(f"{mod} [{label}]: refused ({e})", flush=True)
                continue
            bad += bool(findings)
            print(f"{mod} [{label}]: {'ok' if not findings else f'{len(findings)} finding(s)'}", flush=True)
            for f in findings:
                print("   ", f, flush=True)
    return 1 if bad else 0


def _branch_configs(m) -> list[tuple[str, object]]:
    """The default config with one choice / checkbox widget set to each of its other options."""
    from engine.core.params import Bool, Choice, Multi, widget_specs
    from tests.extremes import _values

    d, out = m.Config(), []
    for name, spec in widget_specs(m.Config).items():
        if not isinstance(spec, Bool | Choice | Multi):
            continue
        for v in _values(spec, getattr(d, name)):
            try:
                out.append((f"{name}={v!r}", dataclasses.replace(d, **{name: v})))
            except ValueError:
                continue
    return out


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    sys.exit(main())
