"""Cached runner: one engine run per (engine, Config), shared by all sessions.

Why not plain ``st.cache_data``: a cached function may not draw into a progress
bar created outside it (Streamlit refuses to replay such elements), and the
engine's progress callback is exactly that. So the store below keeps what
``st.cache_data`` would keep (a pickled copy of each Result, so no session can
mutate another's) inside one ``st.cache_resource`` object, with an LRU limit on
entries and bytes, and a per-key lock so that concurrent sessions asking for the
same view compute it once.
"""

from __future__ import annotations

import hashlib
import importlib
import pickle
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any

import streamlit as st

from components.layout import literal, note_engine_run

MAX_ENTRIES = 64
MAX_BYTES = 256 * 1024 * 1024


class ResultStore:
    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._data: OrderedDict[tuple, bytes] = OrderedDict()
        self._seconds: dict[tuple, float] = {}      # key -> how long the engine took to compute it
        self._bytes = 0
        self._lock = threading.Lock()
        self._key_locks: dict[tuple, list] = {}     # key -> [lock, sessions holding or waiting for it]
        self.hits = 0
        self.misses = 0

    @contextmanager
    def key_lock(self, key: tuple):
        """Held while one session computes ``key``, so others wait for its result instead of computing it again.

        A key's lock lives only while some session holds or waits for it: a long-lived server sees an unbounded
        number of distinct configs, and keeping a lock for each would grow without end.
        """
        with self._lock:
            entry = self._key_locks.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._lock:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._key_locks[key]

    def get(self, key: tuple) -> Any | None:
        with self._lock:
            blob = self._data.get(key)
            if blob is None:
                return None
            self._data.move_to_end(key)
            self.hits += 1
        return pickle.loads(blob)

    def put(self, key: tuple, value: Any, seconds: float | None = None) -> None:
        """Store ``value`` under ``key``; ``seconds``: how long computing it took (``seconds(key)`` returns it)."""
        blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self.misses += 1
            if key in self._data:
                self._bytes -= len(self._data.pop(key))
                self._seconds.pop(key, None)
            if len(blob) > self.max_bytes:
                return
            self._data[key] = blob
            if seconds is not None:
                self._seconds[key] = float(seconds)
            self._bytes += len(blob)
            while len(self._data) > self.max_entries or self._bytes > self.max_bytes:
                gone, old = self._data.popitem(last=False)
                self._bytes -= len(old)
                self._seconds.pop(gone, None)

    def seconds(self, key: tuple) -> float | None:
        """How long the engine took to compute the entry under ``key`` (None: not stored, or not timed)."""
        with self._lock:
            return self._seconds.get(key)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._seconds.clear()
            self._bytes = 0


@st.cache_resource(show_spinner=False)
def result_store() -> ResultStore:
    return ResultStore()


def cache_key(module_name: str, config, fn: str = "run", payload: bytes | None = None) -> tuple:
    """The result store's key for ``module.fn(config)`` (with an upload's bytes, through their SHA-256)."""
    digest = hashlib.sha256(payload).hexdigest() if payload is not None else None
    return (module_name, fn, type(config).__qualname__, repr(config), digest)


def run_cached(module_name: str, config, label: str = "Computing", fn: str = "run",
               payload: bytes | None = None) -> Any:
    """Return ``module.fn(config)``, computed once per config, with a live progress bar.

    ``payload`` (e.g. the bytes of an upload) is passed on as ``payload=`` and is part
    of the cache key through its SHA-256.
    """
    key = cache_key(module_name, config, fn, payload)
    store = result_store()
    hit = store.get(key)
    if hit is not None:
        note_engine_run(store.seconds(key), cached=True)
        return hit
    with store.key_lock(key):
        hit = store.get(key)
        if hit is not None:         # another session computed it while this one waited
            note_engine_run(store.seconds(key), cached=True)
            return hit
        bar = st.progress(0.0, text=f"{label}…")
        last = [0.0]

        def progress(fraction: float, message: str = "") -> None:
            now = time.monotonic()
            if fraction < 1.0 and now - last[0] < 0.05:
                return  # throttle: at most ~20 bar updates a second
            last[0] = now
            bar.progress(min(1.0, max(0.0, float(fraction))), text=message or f"{label}…")

        try:
            module = importlib.import_module(module_name)
            started = time.perf_counter()
            if payload is None:
                result = getattr(module, fn)(config, progress=progress)
            else:
                result = getattr(module, fn)(config, progress=progress, payload=payload)
            seconds = time.perf_counter() - started
        finally:
            bar.empty()
        store.put(key, result, seconds=seconds)
        note_engine_run(seconds, cached=False)
        return result


def run_or_message(module_name: str, config, label: str = "Computing", fn: str = "run",
                   payload: bytes | None = None) -> Any | None:
    """``run_cached``, but an ``engine.core.InputError`` becomes a clear message and ``None``; the page goes on."""
    from engine.core import InputError

    try:
        return run_cached(module_name, config, label=label, fn=fn, payload=payload)
    except InputError as e:
        from components.layout import error_text

        st.error(error_text(str(e)), icon=":material/error:")
        return None


def run_on_upload(module_name: str, config, upload, max_bytes: int, label: str, fallback: str) -> Any | None:
    """``module.run_upload(config, payload=<the file's bytes>)`` for a ``st.file_uploader`` value, or ``None``.

    ``None`` when nothing is uploaded, and, with a message, when the file is over ``max_bytes`` or the engine
    refuses it (``InputError``); ``fallback`` then says what the page shows instead (its generated data)."""
    if upload is None:
        return None
    result = None
    if upload.size > max_bytes:
        st.error(f"{literal(upload.name)}: {upload.size / 2**20:.1f} MB is over the {max_bytes // 2**20} MB "
                 "limit; it was ignored.", icon=":material/error:")
    else:
        result = run_or_message(module_name, config, label=label, fn="run_upload", payload=upload.getvalue())
    if result is None:
        st.caption(f":material/info: {fallback}")
    return result


def run_or_stop(module_name: str, config, label: str = "Computing", fn: str = "run",
                payload: bytes | None = None) -> Any:
    """``run_cached``, but an ``engine.core.InputError`` becomes a clear message and stops the page."""
    result = run_or_message(module_name, config, label=label, fn=fn, payload=payload)
    if result is None:
        st.stop()
    return result
