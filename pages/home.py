"""Home gallery: all 38 papers as cards, with search and an area filter."""

import streamlit as st

from components.layout import ensure_app_navigation
from engine.registry import AREAS, PAPERS

ensure_app_navigation()     # /home opened first on a fresh server: hand over to app.py's navigation, as pages do
st.title("ICLR 2025 Explorer")
st.markdown(
    "Each page reproduces, live and at a small scale, the core mechanism of one ICLR 2025 paper. "
    "The claim badges on a page are measured by the engine on every run, and every page's URL stores "
    "its settings, so a shared link reproduces exactly the same view."
)

built = sum(p.built for p in PAPERS)
if built == len(PAPERS):
    st.caption(f"All {built} papers have a live page.")
else:
    st.caption(f"{built} of {len(PAPERS)} pages built; the rest are coming.")

# The search and the area filter live in the URL (/?q=graph&area=...), so a filtered gallery can be shared and
# comes back with the browser's Back button; a URL this page did not write (a link, Back / Forward) sets them. A
# bare URL (the menu's Home link, or the entry Streamlit leaves in the history when it switches pages) brings back
# the filter this session last had, as the pages do with their settings (components.state.bind_config).
qp = st.query_params
url_now = {k: qp.get_all(k) for k in qp.keys()}
seen = st.session_state.get("home:url_seen")
if seen and not ({"q", "area"} & set(url_now)):
    url_now = dict(seen)
if "home:q" not in st.session_state or url_now != seen:
    st.session_state["home:q"] = (url_now.get("q") or [""])[-1][:100]
    st.session_state["home:areas"] = [a for a in dict.fromkeys(url_now.get("area", [])) if a in AREAS]

c1, c2, c3 = st.columns([0.5, 0.3, 0.2], vertical_alignment="bottom")
query = c1.text_input("Search papers", key="home:q", placeholder="e.g. attention, graph, diffusion",
                      max_chars=100)
areas = c2.multiselect("Area", AREAS, key="home:areas")
wanted = {k: v for k, v in (("q", [query.strip()] if query.strip() else []), ("area", list(areas))) if v}
if {k: qp.get_all(k) for k in qp.keys()} != wanted:
    qp.from_dict(wanted)
st.session_state["home:url_seen"] = {k: qp.get_all(k) for k in qp.keys()}
# the filter only means something while some pages are still to come
only_built = built < len(PAPERS) and c3.toggle("Built pages only", key="home:built")

words = [w for w in query.lower().split() if w]


def matches(p) -> bool:
    text = f"{p.title} {p.summary} {p.slug} {p.area}".lower()
    if p.own_data:                                   # "upload", "audio", "csv" ... find the pages that take a file
        text += f" upload your own {p.own_data}".lower()
    if words and not all(w in text for w in words):
        return False
    if areas and p.area not in areas:
        return False
    return not (only_built and not p.built)


shown = [p for p in PAPERS if matches(p)]
if not shown:
    st.info("No paper matches this search.")


def _card(col, p) -> None:
    """One paper's card: title, area, one-line summary, link to its live page and to the paper."""
    with col.container(border=True, height="stretch"):
        st.markdown(f"**{p.title}**")
        st.caption(p.area)
        st.write(p.summary)
        if p.built:
            st.page_link(p.page, label="Open the live page", icon=":material/play_circle:")
            if p.own_data:
                st.badge(f"Upload {p.own_data}", icon=":material/upload_file:", color="blue")
        else:
            st.badge("coming", icon=":material/schedule:", color="gray")
        st.markdown(f"[paper]({p.url})")


# one row of three cards at a time, each card as tall as the tallest of its row, so the cards read row by row
for start in range(0, len(shown), 3):
    cols = st.columns(3)
    for col, p in zip(cols, shown[start:start + 3]):
        _card(col, p)
