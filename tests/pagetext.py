"""Open one page headless with a query string and return the texts it shows (for tests of page-side wording)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def page_texts(page: str, query: dict[str, str] | None = None, timeout: int = 300) -> list[str]:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=timeout)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return [el.value for kind in ("info", "warning", "error", "caption", "markdown")
            for el in at.get(kind) if isinstance(getattr(el, "value", None), str)]


def open_page(page: str, query: dict[str, str] | None = None, seed: tuple = (), timeout: int = 300):
    """Run pages/<page>.py headless (with ``query`` as its URL's query string) and return the AppTest.

    ``seed`` holds (engine module name, config, result) triples that go into the page's result store first, so a
    test that already has an engine's result does not make the page compute it a second time. The page still asks
    the store for the config it builds itself: if that is another config, it computes that one, and a test
    comparing what it shows with the seeded result fails as it should."""
    from streamlit.testing.v1 import AppTest

    from components import runner

    for module_name, config, result in seed:
        runner.result_store().put(runner.cache_key(module_name, config), result)
    at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=timeout)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def _plotly_array(v):
    """A trace field as plotly.js gets it: typed arrays arrive base64-encoded ({"dtype", "bdata", "shape"})."""
    import base64

    import numpy as np

    if isinstance(v, dict) and "bdata" in v:
        out = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        shape = v.get("shape")
        return out.reshape([int(n) for n in str(shape).split(",")]) if shape else out
    return v


def chart_traces(at, key: str) -> list[dict]:
    """The traces (dicts, numeric arrays decoded) of the plotly chart the page drew with ``key``."""
    import json

    for el in at.get("plotly_chart"):
        if el.proto.id.split("-", 2)[-1] == key:
            return [{k: _plotly_array(v) for k, v in t.items()} for t in json.loads(el.proto.spec)["data"]]
    raise LookupError(f"no chart with key {key!r}")


def values(v):
    """A trace field (x / y / z ...) as a float numpy array: typed arrays are decoded (and reshaped when they carry
    a shape), lists become float arrays with NaN for None (plotly's gaps); a missing field (None) stays None."""
    import numpy as np

    if v is None:
        return None
    return np.asarray(_plotly_array(v), dtype=float)


def figures(at) -> dict[str, dict]:
    """Every plotly chart the page drew, by key: the figure as plotly.js gets it (typed arrays still encoded; read
    numbers with ``values``)."""
    import json

    return {el.proto.id.split("-", 2)[-1]: json.loads(el.proto.spec) for el in at.get("plotly_chart")}


def charts(at) -> dict[str, list[dict]]:
    """Every plotly chart the page drew, by key: its list of traces (typed arrays still encoded)."""
    return {k: fig["data"] for k, fig in figures(at).items()}
