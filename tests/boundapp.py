"""A small app bound to the URL the way every page is (settings, one view-only widget, a share link), for AppTest.

tests/test_core.py and tests/test_components.py open it with their own settings classes and view widgets.
"""

from __future__ import annotations


def bound_app(config_cls, slug, view, link_first):
    # AppTest.from_function runs this function's source as a script: everything it needs is imported inside
    import json

    import streamlit as st

    from components.state import bind_config, bind_view, share_link
    from engine.core.params import to_query

    name = view.label
    cfg = bind_config(config_cls, slug, views=(name,))
    link = share_link(cfg) if link_first else None        # most pages show the link before their view widgets
    picked = bind_view(slug, name, view)
    st.text(json.dumps({**to_query(cfg), name: picked}))    # what the page computes and draws with
    st.text(link if link_first else share_link(cfg))


def open_bound(config_cls, slug, view, query=None, link_first=False):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(bound_app, args=(config_cls, slug, view, link_first), default_timeout=30)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    return at.run()


def shown(at):
    """(settings and view the page drew with, query string of its share link); a stopped page has neither."""
    import json
    from urllib.parse import parse_qsl

    assert not at.exception, [e.value for e in at.exception]
    texts = [t.value for t in at.text]
    assert len(texts) == 2, "the page stopped before drawing its results"
    return json.loads(texts[0]), dict(parse_qsl(texts[1], keep_blank_values=True))


def url(at):
    return {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
