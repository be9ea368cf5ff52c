"""Small torch helpers shared by engines: MLPs, a generic training loop, checkpoints.

Only engines that need torch import this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch import nn

from engine.core.progress import Progress, report

ASSETS = Path(__file__).resolve().parents[2] / "assets"


def asset_path(name: str) -> Path:
    return ASSETS / name


def mlp(sizes: Iterable[int], act: type[nn.Module] = nn.ReLU, layernorm: bool = False,
        bias: bool = True) -> nn.Sequential:
    """Plain MLP: Linear (+ LayerNorm) + activation between layers, linear output."""
    sizes = list(sizes)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b, bias=bias))
        if i < len(sizes) - 2:
            if layernorm:
                layers.append(nn.LayerNorm(b))
            layers.append(act())
    return nn.Sequential(*layers)


def make_optimizer(params, name: str = "adam", lr: float = 1e-3, weight_decay: float = 0.0, **kw):
    # foreach: one fused call per step for all parameters instead of a Python loop over them; on CPU
    # torch defaults to the loop, which dominates the step time of our small models (same numbers)
    name = name.lower()
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, foreach=True, **kw)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=True, **kw)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay, foreach=True, **kw)
    raise ValueError(f"unknown optimizer {name!r}")


def train_loop(
    params,
    loss_fn: Callable[[int], torch.Tensor],
    steps: int,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    optimizer: str = "adam",
    progress: Progress | None = None,
    message: str = "training",
    on_step: Callable[[int, float], None] | None = None,
    report_every: int = 10,
    grad_clip: float | None = None,
    cosine: bool = False,
    before_step: Callable[[], None] | None = None,
) -> list[float]:
    """Minimise ``loss_fn(step)`` over ``steps`` optimiser steps; return the loss history.

    ``loss_fn`` builds its own batch from the step index, so the loop is shared by
    full-batch and minibatch engines alike (see ``batch_indices``). ``cosine`` anneals
    the learning rate to zero over the run. ``before_step`` runs between the backward pass
    and the optimiser step (e.g. a custom gradient clipping).
    """
    params = list(params)
    opt = make_optimizer(params, optimizer, lr, weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, int(steps))) if cosine else None
    history: list[float] = []
    for step in range(int(steps)):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(step)
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        if before_step is not None:
            before_step()
        opt.step()
        if sched is not None:
            sched.step()
        value = float(loss.detach())
        history.append(value)
        if on_step is not None:
            on_step(step, value)
        if step % report_every == 0 or step == steps - 1:
            report(progress, (step + 1) / steps, f"{message}: step {step + 1}/{steps}, loss {value:.4g}")
    return history


def save_state(module: nn.Module, path: Path, extra: dict | None = None) -> None:
    """Save a state dict plus plain metadata (tensors, numbers, strings only)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state": module.state_dict(), "extra": extra or {}}, path)


def load_state(path: Path, map_location="cpu") -> dict:
    """Load a checkpoint written by ``save_state`` (weights only, never pickled code)."""
    return torch.load(path, map_location=map_location, weights_only=True)


def set_cpu_threads(n: int | None = None) -> None:
    """Keep torch from oversubscribing a small CPU box.

    Default: one intra-op thread (``EXPLORER_TORCH_THREADS`` overrides). The engines' tensors
    are small, and on a busy 2-core machine (a server with several sessions) extra OpenMP
    threads spin and make small ops orders of magnitude slower.
    """
    from engine.core.device import _limit_threads

    if n is None:
        _limit_threads(torch)
    elif torch.get_num_threads() != max(1, n):
        torch.set_num_threads(max(1, n))


def batch_indices(n: int, batch: int, steps: int, generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """Index tensors for ``steps`` minibatches: epochs of seeded shuffles of range(n)."""
    out: list[torch.Tensor] = []
    batch = max(1, min(batch, n))
    while len(out) < steps:
        perm = torch.randperm(n, generator=generator)
        for i in range(0, n - batch + 1, batch):
            out.append(perm[i:i + batch])
            if len(out) == steps:
                break
    return out


def symmetric_sparse_propagator(P, device=None) -> tuple[Callable, torch.Tensor]:
    """A symmetric scipy sparse matrix P (e.g. a block-diagonal graph operator) as a differentiable map
    x -> P x on torch tensors, and the torch CSR tensor itself. Since P = P^T the backward pass is the same
    product, P g, so no transposed copy is built (torch's sparse CSR autograd cannot do that cheaply)."""
    import warnings

    P = P.tocsr()
    with warnings.catch_warnings():   # torch notes that sparse CSR support is "beta"
        warnings.simplefilter("ignore", UserWarning)
        Pt = torch.sparse_csr_tensor(torch.as_tensor(P.indptr, dtype=torch.int64),
                                     torch.as_tensor(P.indices, dtype=torch.int64),
                                     torch.as_tensor(P.data, dtype=torch.float32), size=P.shape,
                                     check_invariants=False)
    if device is not None:
        Pt = Pt.to(device)

    class _SymProp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return Pt @ x

        @staticmethod
        def backward(ctx, g):
            return Pt @ g

    return _SymProp.apply, Pt
