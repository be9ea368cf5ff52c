"""CSV / JSON download buttons for the numbers behind a plot."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return x


def to_json_bytes(data: Any) -> bytes:
    return json.dumps(_jsonable(data), indent=1).encode()


def download_csv(df: pd.DataFrame, filename: str, label: str | None = None, key: str | None = None) -> None:
    st.download_button(label or f"Download {filename}", df.to_csv(index=False).encode(), file_name=filename,
                       mime="text/csv", icon=":material/download:", key=key or f"dl-{filename}")


def download_json(data: Any, filename: str, label: str | None = None, key: str | None = None) -> None:
    st.download_button(label or f"Download {filename}", to_json_bytes(data), file_name=filename,
                       mime="application/json", icon=":material/download:", key=key or f"dl-{filename}")


def matrix_frame(mat: np.ndarray, row: str = "row", col: str = "col", value: str = "value") -> pd.DataFrame:
    """A 2-D array as a long table (row, col, value) for CSV export."""
    mat = np.asarray(mat)
    r, c = np.indices(mat.shape)
    return pd.DataFrame({row: r.ravel(), col: c.ravel(), value: mat.ravel()})
