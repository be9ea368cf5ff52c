"""Page furniture: paper header, claims panel, "how it works", device indicator."""

from __future__ import annotations

import re

import streamlit as st

from components import seed_notes
from components.state import ENGINE_RUNS_KEY, PAGE_SLUG_KEY
from engine.core.claims import Claim
from engine.registry import get


def ensure_app_navigation() -> None:
    """Hand control back to app.py when Streamlit ran a page file on its own.

    Streamlit decides once per server process whether the app is an old-style "pages/ folder" app: until
    some session has executed ``st.navigation`` (in app.py), a folder named ``pages`` next to the entry
    script makes it run the requested page file directly, with a plain file-name sidebar and without
    app.py's set-up. That is what a visitor sees who opens a shared page link on a freshly started
    server. The first page run in that state switches the flag off and reruns, so app.py builds the real
    navigation and shows the same page (its URL path is the file stem in both cases).
    """
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # a Streamlit without this flag has no such mode to leave
        return
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def paper_header(slug: str, idea: str, caveat: str | None = None) -> None:
    """Title, the idea in one paragraph (our words), and the paper link."""
    ensure_app_navigation()
    paper = get(slug)
    st.title(paper.title)
    st.caption(f"ICLR 2025 · {paper.area} · [paper]({paper.url})")
    st.markdown(idea)
    if caveat:
        st.info(caveat, icon=":material/info:")


def claims_panel(claims: list[Claim], title: str = "Claims, measured on this run") -> None:
    """One badge per claim: statement, measured value, threshold, pass/fail."""
    st.subheader(title)
    n_pass = sum(c.passed for c in claims)
    st.caption(f"{n_pass} of {len(claims)} reproduced with the current settings. Each number below was "
               "measured by the engine on a run with these settings (the sidebar says how long it took and whether "
               "it was computed just now or served from the cache); change the settings and they are measured "
               "again.")
    for c in claims:
        with st.container(border=True):
            left, right = st.columns([0.8, 0.2], vertical_alignment="center")
            with left:
                st.markdown(f"**{plain(c.statement)}**")
                line = c.describe()
                if c.detail:
                    line += f" — {c.detail}"
                st.caption(plain(line))
                flip = seed_notes.note(st.session_state.get(PAGE_SLUG_KEY), c.label)
                if flip:
                    st.caption(f":material/casino: {flip}")
            with right:
                if c.passed:
                    st.badge("reproduced", icon=":material/check_circle:", color="green")
                else:
                    st.badge("not reproduced", icon=":material/cancel:", color="red")


def how_it_works(markdown: str) -> None:
    with st.expander("How it works", icon=":material/functions:", expanded=False):
        st.markdown(markdown)


def device_indicator() -> None:
    """Sidebar line naming the device this page's engine computes on.

    The page is the one ``state.bind_config`` recorded. An engine that does not declare ``USES_DEVICE`` is
    reported as running on the CPU even when a GPU is present, without importing torch; for one that does,
    torch is imported here (its run imports it anyway)."""
    import importlib

    from engine.core.device import device_label, engine_device_label
    from engine.registry import BY_SLUG

    paper = BY_SLUG.get(st.session_state.get(PAGE_SLUG_KEY, ""))
    label = engine_device_label(importlib.import_module(paper.module)) if paper and paper.module else device_label()
    st.sidebar.caption(f":material/memory: Compute: {label}")
    # below it, the time of this page run's engine runs (note_engine_run fills it as they finish)
    st.session_state[ENGINE_RUNS_KEY] = {"slot": st.sidebar.empty(), "runs": []}


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s >= 1 else f"{s:.2f} s"


def engine_time_text(runs: list[tuple[float | None, bool]]) -> str:
    """The sidebar line for a page run's engine runs, each ``(seconds it took to compute, served from the cache)``."""
    timed = [s for s, _ in runs if s is not None]
    total = _seconds(sum(timed)) if timed else "untimed"
    fresh = sum(not cached for _, cached in runs)
    if len(runs) == 1:
        how = ", computed just now" if fresh else " when it was computed; now from the cache"
        return f":material/timer: Engine time for this view: {total}{how}"
    if fresh == len(runs):
        how = "all computed just now"
    elif fresh == 0:
        how = "when they were computed; now from the cache"
    else:
        how = f"{fresh} computed just now, {len(runs) - fresh} from the cache"
    return f":material/timer: Engine time for this view: {total} in {len(runs)} runs ({how})"


def note_engine_run(seconds: float | None, cached: bool) -> None:
    """Record one engine run of this page run (``seconds``: how long computing it took, also when it now comes from
    the cache) and update the sidebar line under the device indicator. Does nothing where that line was not made."""
    log = st.session_state.get(ENGINE_RUNS_KEY)
    if not log:
        return
    log["runs"].append((seconds, cached))
    log["slot"].caption(engine_time_text(log["runs"]))


def show_error(message: str) -> None:
    st.error(message, icon=":material/error:")


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$])")


_CLAIM_SPECIAL = re.compile(r"([*_~$`\\])")


def plain(text: str) -> str:
    """Engine-written claim text for Markdown: the characters a claim uses as plain symbols (c*, e_pro, ~n³, a $ amount)
    but Markdown could read as emphasis, strike-through, LaTeX or code are backslash-escaped; the rest is left as is,
    so a claim reads exactly as the engine wrote it."""
    return _CLAIM_SPECIAL.sub(r"\\\1", str(text))


_ERROR_SPECIAL = re.compile(r"([\\*_\[\]<>~$|#])")


def error_text(text: str) -> str:
    """Engine text that may quote an upload (a refusal message, a note on how a file was read) for Markdown:
    outside the message's own `code` spans, every character Markdown would read as a link, emphasis, HTML, LaTeX,
    a table or a heading is backslash-escaped, so the quoted part shows as typed; the code spans stay as written."""
    parts = re.split(r"(`[^`\n]*`)", str(text))
    return "".join(p if p.startswith("`") and p.endswith("`") and len(p) > 1 else _ERROR_SPECIAL.sub(r"\\\1", p)
                   for p in parts)


def literal(text: str) -> str:
    """User-supplied text (an uploaded file's name) for a Markdown string: every character that Markdown or its
    LaTeX would read ($, *, _, [, ...) is backslash-escaped, so it shows as typed."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", str(text))
