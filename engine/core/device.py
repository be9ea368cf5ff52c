"""Device choice: CUDA when present, CPU otherwise; EXPLORER_FORCE_CPU=1 forces CPU.

torch is imported lazily so that merely importing engine.core stays cheap.
"""

from __future__ import annotations

import os
import sys

FORCE_CPU_ENV = "EXPLORER_FORCE_CPU"


def _force_cpu() -> bool:
    return os.environ.get(FORCE_CPU_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def get_device():
    """Return a torch.device: cuda if available and not forced off, else cpu (with a thread limit)."""
    import torch

    if not _force_cpu() and torch.cuda.is_available():
        _deterministic_cuda(torch)
        return torch.device("cuda")
    _limit_threads(torch)
    return torch.device("cpu")


def _deterministic_cuda(torch) -> None:
    """A shared link should give the same numbers on the same kind of GPU, so CUDA runs use torch's deterministic
    kernels where it has them (cuBLAS needs its workspace setting for that, read when cuBLAS starts). warn_only:
    an op without a deterministic kernel warns and still runs, rather than stopping a page.

    float32 matrix products and cuDNN convolutions / RNNs are kept at full float32 precision: torch lets cuDNN
    convolutions use TF32 (a 10-bit mantissa) by default, which would move a GPU run's numbers much further from
    the CPU's than float32 rounding does."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if not torch.are_deterministic_algorithms_enabled():
        torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    torch.backends.cudnn.rnn.fp32_precision = "ieee"


_native_limited_for: frozenset = frozenset()


def _limit_threads(torch) -> None:
    """One intra-op thread unless EXPLORER_TORCH_THREADS says otherwise (see engine.core.nn).

    numpy/scipy BLAS pools are limited too, each time a new native library has been loaded since the last
    call: with torch loaded beside them, a 2-thread OpenBLAS pool can make a small eigh 100x slower on 2 cores.
    """
    global _native_limited_for
    n = max(1, int(os.environ.get("EXPLORER_TORCH_THREADS", "1")))
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    loaded = frozenset(k for k in ("numpy", "scipy", "sklearn", "torch") if k in sys.modules)
    if loaded != _native_limited_for:
        limit_native_threads()
        _native_limited_for = loaded


def device_label(load_torch: bool = False) -> str:
    """Human-readable label; without ``load_torch`` it does not import torch if nothing has imported it yet."""
    if "torch" not in sys.modules and not load_torch:
        return "CPU (torch not loaded yet)"
    import torch

    if _force_cpu():
        return "CPU (forced by EXPLORER_FORCE_CPU)"
    if torch.cuda.is_available():
        return f"CUDA: {torch.cuda.get_device_name(0)}"
    return "CPU"


def follows_device(module) -> bool:
    """Whether an engine module puts its torch work on the device ``get_device`` picks (so it would use a GPU).

    Such engines say so with ``USES_DEVICE = True``. The others are numpy code or keep their small torch
    models on the CPU (some call ``get_device`` only for its thread limits); their pages must not name a
    GPU as the compute device."""
    return getattr(module, "USES_DEVICE", False) is True


def engine_device_label(module) -> str:
    """``device_label()`` for an engine that follows the device choice; for the others, the CPU, and why."""
    if follows_device(module):
        return device_label(load_torch=True)    # the engine's run imports torch anyway
    if "torch" in sys.modules and not _force_cpu():
        import torch

        if torch.cuda.is_available():
            return "CPU (this page's engine does not use the GPU)"
    return "CPU"


def limit_native_threads() -> None:
    """One BLAS/OpenMP thread per process unless EXPLORER_TORCH_THREADS says otherwise.

    A Streamlit server runs several sessions at once on two cores; extra native threads
    spin against each other and make small numpy/scipy/sklearn calls many times slower.
    Applies to the libraries already loaded (numpy's BLAS); torch is limited in get_device.
    """
    n = max(1, int(os.environ.get("EXPLORER_TORCH_THREADS", "1")))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(n)
