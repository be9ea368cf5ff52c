"""Load the heavy libraries once per server process, in the background, after the first page has rendered.

A page's first run in a fresh server otherwise pays for library start-up that has nothing to do with
its paper: torch's import plus its first optimizer step (which imports torch._dynamo), about 3 s on
2 cores; librosa's first STFT (lazy submodules and numba's cache), about 3 s; scikit-learn, scipy.stats,
POT, pyvista, a few tenths each. The app starts this thread at the end of its first script run, so the
home gallery is not slowed; a page opened while it is still running simply waits for the same imports
(Python's import lock) instead of doing them twice.

``warm()`` does the work synchronously (the benchmark uses it to measure a warmed server);
``start()`` runs it once per process in a daemon thread. EXPLORER_PREWARM=0 turns it off.
"""

from __future__ import annotations

import importlib
import os
import threading
import time

# every library an engine or page imports at run time that costs more than ~0.1 s the first time
MODULES = (
    "torch",
    "scipy.linalg", "scipy.sparse.linalg", "scipy.stats", "scipy.signal", "scipy.optimize", "scipy.spatial",
    "sklearn.svm", "sklearn.ensemble", "sklearn.metrics", "sklearn.linear_model", "sklearn.cluster",
    "ot", "networkx", "librosa", "altair", "pyvista",
)

_lock = threading.Lock()
_thread: threading.Thread | None = None
timings: dict[str, float] = {}        # seconds per step of the last warm(), for the benchmark and tests
errors: dict[str, str] = {}           # a library that failed to load is skipped, never fatal


def enabled() -> bool:
    return os.environ.get("EXPLORER_PREWARM", "1").strip().lower() not in {"0", "false", "no", "off"}


def _step(name: str, fn) -> None:
    t = time.perf_counter()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - a missing optional library must not break the app
        errors[name] = f"{type(e).__name__}: {e}"
    timings[name] = time.perf_counter() - t


def _torch_first_step() -> None:
    import torch

    from engine.core.device import get_device

    get_device()                       # thread limits, as a page would set them
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.Adam([p], lr=1e-3)
    (p * p).sum().backward()
    opt.step()                         # the first step imports torch._dynamo (about 1.2 s)


def _librosa_first_stft() -> None:
    import librosa
    import numpy as np

    x = np.zeros(2048, np.float32)
    librosa.istft(librosa.stft(x, n_fft=256, hop_length=64), hop_length=64, length=len(x))
    librosa.filters.mel(sr=8000, n_fft=256, n_mels=16)


def warm() -> dict[str, float]:
    """Import every module of MODULES and run the first-call paths that are slow; returns the timings."""
    for name in MODULES:
        _step(name, lambda n=name: importlib.import_module(n))
    _step("torch first optimizer step", _torch_first_step)
    _step("librosa first STFT", _librosa_first_stft)
    from engine.core.device import limit_native_threads

    limit_native_threads()             # BLAS pools of libraries loaded just now
    return dict(timings)


def start() -> threading.Thread | None:
    """Start warm() in a daemon thread, once per process (later calls return the same thread)."""
    global _thread
    if not enabled():
        return None
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=warm, name="explorer-prewarm", daemon=True)
            _thread.start()
        return _thread
