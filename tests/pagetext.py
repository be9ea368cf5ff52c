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
