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
        return torch.device("cuda")
    _limit_threads(torch)
    return torch.device("cpu")


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


def device_label() -> str:
    """Human-readable label, without importing torch if no page has imported it."""
    if "torch" not in sys.modules:
        return "CPU (torch not loaded yet)"
    import torch

    if _force_cpu():
        return "CPU (forced by EXPLORER_FORCE_CPU)"
    if torch.cuda.is_available():
        return f"CUDA: {torch.cuda.get_device_name(0)}"
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
