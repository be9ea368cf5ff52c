"""ICLR 2025 Explorer: entry point. Builds the navigation from engine/registry.py.

Keep this file light: it runs on every page view and must not import torch.
"""

from pathlib import Path

import streamlit as st

from components import prewarm
from engine.core.device import limit_native_threads
from engine.registry import AREAS, PAPERS, short_name

limit_native_threads()

# the tab icon is a file the app serves itself (components/favicon.py draws it): a Material-symbol icon here would
# make every browser fetch it from Google's font CDN, and a server without internet would show none
st.set_page_config(page_title="ICLR 2025 Explorer", page_icon=str(Path(__file__).parent / "assets" / "favicon.png"),
                   layout="wide")

home = st.Page("pages/home.py", title="Home: all 38 papers", icon=":material/home:", default=True)
sections: dict[str, list] = {"Explorer": [home]}
for area in AREAS:
    pages = [st.Page(p.page, title=short_name(p), icon=p.icon, url_path=p.url_path)
             for p in PAPERS if p.area == area and p.built]
    if pages:
        sections[area] = pages

nav = st.navigation(sections)
# Plotly hides a chart's toolbar until the pointer hovers it, except on devices without hover (phones, tablets),
# where the toolbar is always shown and covers the right end of the chart's title, legend or subplot titles. There
# it moves into a band of its own above the chart. Chart titles are HTML above the chart (components/charts.show), so
# they wrap in a narrow column instead of running past the chart's edge. Metric labels and values wrap too: Streamlit
# cuts them off with an ellipsis, and four metrics in a row on a 1024 px laptop (sidebar open) or a tablet lost
# words ("B → A share, Deep…") or half a value ("+0.40 / -0.…"). A display formula wider than a phone scrolls
# sideways inside its own box instead of running past the page's edge, where it was cut off; so does a wide table.
st.html("""<style>
.explorer-chart-title { font-size: 15px; font-weight: 600; line-height: 1.35; padding-left: 6px; }
.stElementContainer:has(.explorer-chart-title) { margin-bottom: -0.6rem; }
.explorer-fs-title { position: absolute; top: 6px; left: 16px; right: 200px; z-index: 2; pointer-events: none;
  font-size: 15px; font-weight: 600; line-height: 1.35; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
[data-testid="stMetricLabel"], [data-testid="stMetricLabel"] *, [data-testid="stMetricValue"],
[data-testid="stMetricValue"] * { white-space: normal !important; overflow: visible !important;
  text-overflow: clip !important; overflow-wrap: anywhere; }
.katex-display { overflow-x: auto; overflow-y: hidden; padding: 2px 0; }
[data-testid="stMarkdownContainer"] table { display: block; max-width: 100%; overflow-x: auto; }
@media (hover: none) {
  .stElementContainer:has(.js-plotly-plot) { margin-top: 28px; overflow: visible !important; }
  .js-plotly-plot { overflow: visible !important; }
  .js-plotly-plot .modebar-container { top: -28px !important; }
}
</style>""")
st.sidebar.caption("ICLR 2025 Explorer · every claim badge is measured when the page runs (a few read curves or "
                   "weights our own training scripts ship); numbers quoted from offline runs are marked as such.")
# A small script levels side-by-side chart titles and gives charts their titles back in the PNG export and the
# full-screen view (components/page_script.js).
st.sidebar.html(f"<script>{(Path(__file__).parent / 'components' / 'page_script.js').read_text()}</script>",
                unsafe_allow_javascript=True)
try:
    nav.run()
finally:
    # once per server process, after the first page has drawn: load torch, librosa, scikit-learn, ... in the
    # background, so the first page a visitor opens does not pay ~6 s of library start-up (components/prewarm.py)
    prewarm.start()
