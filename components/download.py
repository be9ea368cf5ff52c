"""CSV / JSON download buttons for the numbers behind a plot.

The file is encoded only when a user clicks the button (Streamlit's deferred download: ``data`` is a
callable), and a click does not rerun the page (``on_click="ignore"``). Encoding every table on every rerun cost up to a third of a cached page's render time (CalNF:
~0.1 s for 1.7 MB of CSV) and kept every payload in the session's media store.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st


def _finite_or_marker(v: float) -> float | str | None:
    """Strict JSON has no NaN or Infinity: NaN becomes null, ±inf the strings "inf" / "-inf" (float() reads them)."""
    if math.isfinite(v):
        return v
    return None if math.isnan(v) else ("inf" if v > 0 else "-inf")


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "f" and not np.isfinite(x).all():
            obj = x.astype(object)
            obj[np.isnan(x)] = None
            obj[np.isposinf(x)] = "inf"
            obj[np.isneginf(x)] = "-inf"
            return obj.tolist()
        return x.tolist() if x.dtype.kind in "biuf" else _jsonable(x.tolist())
    if isinstance(x, np.generic):
        return _jsonable(x.item())
    if isinstance(x, float):
        return _finite_or_marker(x)
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, set | frozenset):
        return [_jsonable(v) for v in sorted(x, key=repr)]
    return x


def to_json_bytes(data: Any) -> bytes:
    """Strict JSON (a browser's JSON.parse reads it): no NaN / Infinity tokens, numpy values as plain numbers."""
    return json.dumps(_jsonable(data), indent=1, allow_nan=False).encode()


def to_csv_bytes(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False).encode()


def _resolve(x):
    return x() if callable(x) else x


def download_csv(df: pd.DataFrame | Callable[[], pd.DataFrame], filename: str, label: str | None = None,
                 key: str | None = None) -> None:
    """A CSV download of ``df`` (or of what a zero-argument callable returns), encoded on click.

    A callable runs after the page script has finished: it must not read page variables that the script
    rebinds later (a loop variable, a reused ``df``); bind them as default arguments.
    """
    if isinstance(df, pd.DataFrame):
        df = df.copy()       # a page that edits its frame after this call must not change the file
    st.download_button(label or f"Download {filename}", lambda: to_csv_bytes(_resolve(df)), file_name=filename,
                       mime="text/csv", icon=":material/download:", key=key or f"dl-{filename}",
                       on_click="ignore")


def download_json(data: Any, filename: str, label: str | None = None, key: str | None = None) -> None:
    """A JSON download of ``data`` (or of what a zero-argument callable returns), encoded on click."""
    st.download_button(label or f"Download {filename}", lambda: to_json_bytes(_resolve(data)),
                       file_name=filename, mime="application/json", icon=":material/download:",
                       key=key or f"dl-{filename}", on_click="ignore")


def matrix_frame(mat: np.ndarray, row: str = "row", col: str = "col", value: str = "value") -> pd.DataFrame:
    """A 2-D array as a long table (row, col, value) for CSV export."""
    mat = np.asarray(mat)
    r, c = np.indices(mat.shape)
    return pd.DataFrame({row: r.ravel(), col: c.ravel(), value: mat.ravel()})
