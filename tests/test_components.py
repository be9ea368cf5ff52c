"""The shared Streamlit helpers in components/: URL binding, cached runs, claims panel, downloads.

Each check compares with something the helper did not compute itself: the link that was opened, a brute-force
loop, pandas / json reading the bytes back, a Markdown renderer.
"""

import dataclasses
import json
import math
import sys
import types
from io import StringIO

import numpy as np
import pandas as pd
import pytest

from engine.core.params import Choice, Int, Multi, param, to_query
from tests.boundapp import open_bound, shown, url


@dataclasses.dataclass(frozen=True)
class Knobs:
    n: int = param(3, Int(1, 12, "n"))
    mode: str = param("a", Choice(("a", "b"), "mode"))
    pick: tuple = param(("x", "z"), Multi(("x", "y", "z"), "pick"))

    def __post_init__(self):
        if self.mode == "b" and self.n > 8:
            raise ValueError("mode b needs n <= 8")


SHADE = Choice(("light", "dark", "mono"), "shade")


def _open(slug, query=None):
    return open_bound(Knobs, slug, SHADE, query)


_drawn, _url = shown, url


def _warnings(at):
    return " ".join(w.value for w in at.warning)


DEFAULT_VIEW = {**to_query(Knobs()), "shade": "light"}


# ---------------------------------------------------------------------------------------------------------------
# components.state


def test_a_link_that_only_changes_the_view_can_be_reset():
    """Settings at their defaults but another view: the reset button is live and brings the default view back."""
    at = _open("comp-view-reset", {**to_query(Knobs()), "shade": "mono"})
    drawn, _ = _drawn(at)
    assert drawn["shade"] == "mono"
    button = at.button(key="comp-view-reset::reset")
    assert not button.disabled, "the view differs from the default, so there is something to reset"
    button.click().run()
    drawn, shared = _drawn(at)
    assert drawn == shared == _url(at) == DEFAULT_VIEW
    assert at.button(key="comp-view-reset::reset").disabled


def test_unknown_and_bad_link_entries_leave_the_url_and_the_share_link():
    """An unknown name is reported and dropped, a malformed value is reported and replaced by the default, and the
    URL / share link then hold exactly what the page computed with (so re-sharing it gives no notice)."""
    at = _open("comp-junk", {"n": "7", "mode": "zz", "bogus": "1", "shade": "dark"})
    drawn, shared = _drawn(at)
    notice = _warnings(at)
    assert "`bogus`" in notice and "`mode`" in notice
    expected = {**to_query(Knobs(n=7)), "shade": "dark"}
    assert drawn == expected
    assert shared == expected and _url(at) == expected
    again = _open("comp-junk-again", shared)
    assert _drawn(again)[0] == expected and not _warnings(again)


def test_a_setting_change_that_conflicts_restores_the_last_working_settings():
    """n = 10 is fine in mode a; then picking mode b (which needs n <= 8) puts back the last settings that worked,
    n = 10 and mode a -- not the page defaults -- and says why."""
    at = _open("comp-conflict")
    at.slider(key="comp-conflict:n").set_value(10).run()
    assert _drawn(at)[0]["n"] == "10"
    at.selectbox(key="comp-conflict:mode").set_value("b").run()
    drawn, shared = _drawn(at)
    assert drawn["n"] == shared["n"] == "10" and drawn["mode"] == shared["mode"] == "a"
    assert "do not fit together" in _warnings(at)


def test_an_emptied_multiselect_keeps_the_users_last_pick_not_the_default():
    at = _open("comp-multi")
    at.multiselect(key="comp-multi:pick").set_value(["y", "z"]).run()
    assert _drawn(at)[0]["pick"] == "y,z"
    at.multiselect(key="comp-multi:pick").set_value([]).run()
    drawn, shared = _drawn(at)
    assert drawn["pick"] == shared["pick"] == _url(at)["pick"] == "y,z"


def test_a_stale_revision_link_keeps_its_settings_and_the_current_one_says_nothing(monkeypatch):
    from components import state

    monkeypatch.setattr(state, "page_revision", lambda slug: "1234abcd")
    link = {**to_query(Knobs(n=5, mode="b")), "shade": "dark"}
    at = _open("comp-rev", {**link, "rev": "ffff0000"})
    drawn, shared = _drawn(at)
    assert drawn == link and shared == {**link, "rev": "1234abcd"}
    stale = [i.value for i in at.info if "another version" in i.value]
    assert len(stale) == 1 and "ffff0000" in stale[0] and "1234abcd" in stale[0]
    at = _open("comp-rev-same", {**link, "rev": "1234abcd"})
    assert _drawn(at)[0] == link and not [i.value for i in at.info if "another version" in i.value]


def test_a_forged_revision_cannot_put_a_link_into_the_notice(monkeypatch):
    """The link's revision is quoted in the notice: a backtick in it must not close the code span and let the rest
    render as a clickable Markdown link."""
    import re

    from markdown_it import MarkdownIt

    from components import state

    monkeypatch.setattr(state, "page_revision", lambda slug: "1234abcd")
    at = _open("comp-rev-forged", {**to_query(Knobs()), "rev": "a`[x](//e.co)"})
    _drawn(at)
    stale = [i.value for i in at.info if "another version" in i.value]
    assert len(stale) == 1
    html = MarkdownIt("commonmark").render(stale[0])
    assert "<a" not in html
    assert all(re.fullmatch(r"[0-9A-Za-z]+", code) for code in re.findall(r"<code>(.*?)</code>", html))


def _tabs_app():
    import streamlit as st

    from components.state import bind_config, bind_tabs
    from tests.test_components import Knobs

    cfg = bind_config(Knobs, "comp-tabs", views=("panel",))
    labels = ["one", "two", "three"] if cfg.mode == "a" else ["one", "two"]   # the tabs depend on a setting
    bind_tabs("comp-tabs", "panel", labels)
    st.text(st.session_state["comp-tabs:panel"])


def test_bound_tabs_follow_the_link_and_survive_losing_their_tab():
    """bind_tabs: the link's tab is selected and written back; a tab the user picked that a new setting removes
    falls back to the first tab without a link notice (the link did nothing wrong)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_tabs_app, default_timeout=30)
    at.query_params["panel"] = "three"
    at.run()
    assert not at.exception and [t.value for t in at.text] == ["three"] and not at.warning
    assert url(at)["panel"] == "three"
    at.selectbox(key="comp-tabs:mode").set_value("b").run()
    assert not at.exception and [t.value for t in at.text] == ["one"], [t.value for t in at.text]
    assert not at.warning, [w.value for w in at.warning]
    assert url(at)["panel"] == "one" and url(at)["mode"] == "b"


def test_link_values_in_notices_cannot_render_as_markdown():
    """A link's bad value, unknown name or bad view value is quoted in a notice: it must stay a code span, so a
    Markdown link, emphasis or bare URL written into a shared URL is shown as typed, never as a clickable link."""
    import re

    from markdown_it import MarkdownIt

    forged = "a`[x](//e.co) **b** http://e.co <i>"
    at = _open("comp-md", {**to_query(Knobs()), "n": forged, "mode": forged, "shade": forged, forged: "1"})
    _drawn(at)
    notices = [w.value for w in at.warning]
    assert len(notices) == 2 and all("e.co" in n for n in notices), notices
    for n in notices:
        html = MarkdownIt("commonmark").render(n)
        assert "<a" not in html and "<strong>" not in html and "<i>" not in html, html
        outside = re.sub(r"<code>.*?</code>", "", html)
        assert "e.co" not in outside and "http" not in outside, html     # no text a linkifier could turn into a link


# ---------------------------------------------------------------------------------------------------------------
# components.runner


@pytest.fixture
def engines(monkeypatch):
    """Two engine modules with the same Config class, and the shared store emptied around the test."""
    from components import runner

    calls = []
    names = []
    for tag in ("alpha", "beta"):
        mod = types.ModuleType(f"comp_test_engine_{tag}")

        def run(config, progress=None, _tag=tag):
            calls.append(_tag)
            if progress is not None:       # engines may overshoot a little at the ends
                progress(-0.2, "warming")
                progress(1.3, "done")
            return {"engine": _tag, "n": config.n}

        def run_upload(config, progress=None, payload=None, _tag=tag):
            calls.append(_tag)
            return {"engine": _tag, "bytes": bytes(payload)}

        mod.run, mod.run_upload = run, run_upload
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
        names.append(mod.__name__)
    runner.result_store().clear()
    yield names, calls
    runner.result_store().clear()


def test_two_engines_with_the_same_config_never_share_a_result(engines):
    """Every engine calls its settings class ``Config``: a cache key without the module would hand one page the
    other's result."""
    from components.runner import run_cached

    (a, b), calls = engines
    cfg = Knobs(n=4)
    assert run_cached(a, cfg) == {"engine": "alpha", "n": 4}
    assert run_cached(b, cfg) == {"engine": "beta", "n": 4}
    assert run_cached(a, cfg) == {"engine": "alpha", "n": 4}
    assert calls == ["alpha", "beta"]


def test_uploads_that_differ_only_at_the_end_get_their_own_results(engines):
    """Two CSVs with the same header and first rows but another last row: the second must be computed, not served
    from the first's cache entry."""
    from components.runner import run_cached

    (a, _), calls = engines
    head = b"x,y\n" + b"1,2\n" * 200
    one, two = head + b"3,4\n", head + b"3,5\n"
    assert run_cached(a, Knobs(), fn="run_upload", payload=one)["bytes"] == one
    assert run_cached(a, Knobs(), fn="run_upload", payload=two)["bytes"] == two
    assert run_cached(a, Knobs(), fn="run_upload", payload=one)["bytes"] == one
    assert calls == ["alpha", "alpha"]


def test_an_oversize_upload_is_named_literally_with_its_sizes(engines, monkeypatch):
    """The refusal shows the file's name as typed (a `$` or `*` in it is not read as Markdown), its size and the
    limit in MB, and the page then says what it shows instead; an accepted file runs without that note."""
    from markdown_it import MarkdownIt

    from components import runner

    (a, _), calls = engines
    errors, captions = [], []
    monkeypatch.setattr(runner.st, "error", lambda msg, **kw: errors.append(msg))
    monkeypatch.setattr(runner.st, "caption", lambda msg, **kw: captions.append(msg))

    def upload(name, data):
        return types.SimpleNamespace(name=name, size=len(data), getvalue=lambda: data)

    name = "cost_$5*2*_[v1].csv"
    assert runner.run_on_upload(a, Knobs(), upload(name, b"\0" * (3 * 2**20)), 2 * 2**20, "Reading",
                                "the demo data") is None
    assert len(errors) == 1 and calls == []
    msg = errors[0]
    assert "3.0 MB" in msg and "2 MB limit" in msg
    html = MarkdownIt("commonmark").render(msg)
    assert name in html and "<em>" not in html and "<a" not in html
    assert len(captions) == 1 and "the demo data" in captions[0]
    assert runner.run_on_upload(a, Knobs(), upload("ok.csv", b"abc"), 2 * 2**20, "Reading", "the demo data") == {
        "engine": "alpha", "bytes": b"abc"}
    assert len(captions) == 1 and len(errors) == 1


def test_progress_beyond_either_end_is_clamped_not_an_error(engines):
    """An engine reporting slightly below 0 or above 1 must not break the page (st.progress refuses such values)."""
    from streamlit.testing.v1 import AppTest

    (a, _), _ = engines

    def app(module_name):
        import streamlit as st

        from components.runner import run_cached
        from tests.test_components import Knobs

        st.text(str(run_cached(module_name, Knobs(n=6))))

    at = AppTest.from_function(app, args=(a,), default_timeout=30).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.text[0].value == str({"engine": "alpha", "n": 6})


def test_run_or_stop_returns_a_result_and_stops_only_on_refused_input(monkeypatch):
    """A refused input shows its message and stops the page before anything below is drawn; an accepted one goes
    on with the result."""
    from streamlit.testing.v1 import AppTest

    from components import runner
    from engine.core import InputError

    mod = types.ModuleType("comp_test_engine_picky")

    def run(config, progress=None):
        if config.n > 5:
            raise InputError("n above 5 is refused")
        return {"n": config.n}

    mod.run = run
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    runner.result_store().clear()

    def app(n):
        import streamlit as st

        from components.runner import run_or_stop
        from tests.test_components import Knobs

        st.text(str(run_or_stop("comp_test_engine_picky", Knobs(n=n))))

    try:
        at = AppTest.from_function(app, args=(2,), default_timeout=30).run()
        assert not at.exception and [t.value for t in at.text] == ["{'n': 2}"] and not at.error
        at = AppTest.from_function(app, args=(7,), default_timeout=30).run()
        assert not at.exception and not at.text
        assert [e.value for e in at.error] == ["n above 5 is refused"]
    finally:
        runner.result_store().clear()


def test_the_store_keeps_the_recently_read_entry():
    from components.runner import ResultStore

    store = ResultStore(max_entries=3, max_bytes=10**6)
    for k in "abc":
        store.put((k,), k)
    assert store.get(("a",)) == "a"
    store.put(("d",), "d")                       # evicts b, the least recently used
    assert [store.get((k,)) for k in "abcd"] == ["a", None, "c", "d"]


def test_the_store_keeps_each_entrys_compute_time_as_long_as_the_entry():
    from components.runner import ResultStore

    store = ResultStore(max_entries=2, max_bytes=10**6)
    store.put(("a",), 1, seconds=0.5)
    store.put(("b",), 2)                         # untimed
    assert (store.seconds(("a",)), store.seconds(("b",)), store.seconds(("z",))) == (0.5, None, None)
    store.put(("a",), 3, seconds=2.0)            # recomputed: the new time replaces the old
    assert store.seconds(("a",)) == 2.0
    store.put(("c",), 4, seconds=1.0)            # evicts b; a was written last, so it stays
    assert store.get(("b",)) is None and store.seconds(("a",)) == 2.0
    store.put(("d",), 5, seconds=1.0)            # evicts a, and its time with it
    assert store.get(("a",)) is None and store.seconds(("a",)) is None
    store.clear()
    assert store.seconds(("d",)) is None


def test_engine_time_line_sums_the_runs_and_says_which_came_from_the_cache():
    from components.layout import engine_time_text

    assert engine_time_text([(1.234, False)]).endswith("Engine time for this view: 1.2 s, computed just now")
    assert engine_time_text([(0.0456, True)]).endswith(": 0.05 s when it was computed; now from the cache")
    assert engine_time_text([(0.5, False), (0.75, True)]).endswith(
        ": 1.2 s in 2 runs (1 computed just now, 1 from the cache)")     # 1.25 s
    assert engine_time_text([(2.0, True), (3.0, True)]).endswith(": 5.0 s in 2 runs (when they were computed; now "
                                                                 "from the cache)")
    assert "untimed" in engine_time_text([(None, True)])


def _timed_app(module_name, ns, indicator):
    import streamlit as st

    from components import layout, state
    from components.runner import run_cached
    from tests.test_components import Knobs

    state.bind_config(Knobs, "comp-timed")
    if st.session_state.get("indicator", indicator):
        layout.device_indicator()
    for n in ns:
        st.text(str(run_cached(module_name, Knobs(n=n))))


def test_the_sidebar_says_how_long_the_engine_took_and_whether_it_came_from_the_cache(monkeypatch):
    """The time under the device line is the engine's own time, measured when the result was computed (here a sleep
    of known length), summed over the page run's engine runs, and kept with the cached result: a second visitor
    with the same settings is told the same time and that it came from the cache. A page run that made no such
    line (no device indicator) shows none, and does not write into the previous run's."""
    import time

    from streamlit.testing.v1 import AppTest

    from components import runner

    mod = types.ModuleType("comp_test_engine_sleepy")

    def run(config, progress=None):
        time.sleep(0.1 * config.n)
        return {"n": config.n}

    mod.run = run
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    runner.result_store().clear()
    store = runner.result_store()
    key = runner.cache_key(mod.__name__, Knobs(n=3))

    def line(at):
        return [c.value for c in at.sidebar.caption if "Engine time" in c.value]

    try:
        first = AppTest.from_function(_timed_app, args=(mod.__name__, (3,), True), default_timeout=30).run()
        assert not first.exception, [e.value for e in first.exception]
        took = store.seconds(key)
        assert took >= 0.3
        assert line(first) == [f":material/timer: Engine time for this view: {took:.2f} s, computed just now"]
        second = AppTest.from_function(_timed_app, args=(mod.__name__, (3,), True), default_timeout=30).run()
        assert line(second) == [f":material/timer: Engine time for this view: {took:.2f} s when it was computed; "
                                "now from the cache"]
        both = AppTest.from_function(_timed_app, args=(mod.__name__, (3, 2), True), default_timeout=30).run()
        total = took + store.seconds(runner.cache_key(mod.__name__, Knobs(n=2)))
        shown_total = f"{total:.1f} s" if total >= 1 else f"{total:.2f} s"
        assert line(both) == [f":material/timer: Engine time for this view: {shown_total} in 2 runs (1 computed "
                              "just now, 1 from the cache)"]
        # the same session, now without the line (its device indicator not drawn): the previous run's line is gone
        # and nothing is written into where it was
        both.session_state["indicator"] = False
        both.run()
        assert not both.exception and line(both) == [] and [t.value for t in both.text] == [str({"n": 3}),
                                                                                             str({"n": 2})]
    finally:
        runner.result_store().clear()


# ---------------------------------------------------------------------------------------------------------------
# components.layout


def _claims_app():
    import math

    from components.layout import claims_panel
    from engine.core.claims import Claim

    claims_panel([
        Claim("c* beats the base_line", 2.0, ">=", 2.0, label="gain", detail="vs e_pro, ~n³"),   # at the bar: passes
        Claim("error stays small", 0.5, "<", 0.5, label="err"),                                 # at the bar: fails
        Claim("diverged run", math.nan, ">", 0.0, label="loss"),                                # NaN: fails
        Claim("loss below one", 0.25, "<", 1.0, label="loss"),                                  # passes
        Claim("ratio above three", 3.0, ">", 3.0, label="ratio"),                               # at the bar: fails
    ])


def test_claims_panel_counts_badges_and_shows_claim_text_as_written():
    from markdown_it import MarkdownIt
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_claims_app, default_timeout=30).run()
    assert not at.exception, [e.value for e in at.exception]
    captions = [c.value for c in at.caption]
    assert captions[0].startswith("2 of 5 reproduced")
    badges = [m.value for m in at.markdown if "-badge[" in m.value]
    assert ["not reproduced" not in b and "reproduced" in b for b in badges] == [True, False, False, True, False]
    assert [("green" in b) for b in badges] == [True, False, False, True, False]
    md = MarkdownIt("commonmark").enable("strikethrough")
    statements = [m.value for m in at.markdown if m.value.startswith("**")]
    assert md.render(statements[0]).strip() == "<p><strong>c* beats the base_line</strong></p>"
    first = md.render(captions[1])
    assert "vs e_pro, ~n³" in first and "gain = 2" in first and "<em>" not in first and "<s>" not in first


def test_refusal_messages_show_quoted_file_names_and_content_as_typed():
    """run_or_message shows an InputError through layout.error_text: a file name or file content it quotes cannot
    become a link, emphasis, HTML, LaTeX or a heading, and the engine's own `code` spans keep their text."""
    from markdown_it import MarkdownIt

    from components.layout import error_text

    md = MarkdownIt("commonmark")
    html = md.render(error_text("[x](//e.co)_$a$_ *b* <i>c</i>.ply, line 2: '#h' is not a number"))
    assert "<a" not in html and "<em>" not in html and "<i>" not in html and "<h1>" not in html, html
    assert "[x](//e.co)_$a$_ *b* &lt;i&gt;c&lt;/i&gt;.ply, line 2: '#h' is not a number" in html
    html = md.render(error_text("# a.obj is missing; run `python -m engine.attention_sink train`"))
    assert html == "<p># a.obj is missing; run <code>python -m engine.attention_sink train</code></p>\n", html


def test_literal_keeps_a_dollar_file_name_out_of_latex():
    from components.layout import literal

    assert literal("a$b$.csv") == r"a\$b\$\.csv"


# ---------------------------------------------------------------------------------------------------------------
# components.download


def test_csv_bytes_read_back_to_the_shown_table():
    from components.download import to_csv_bytes

    df = pd.DataFrame({"step": [3, 1, 2], "loss": [0.5, np.nan, 1e-9], "name": ["a,b", 'q"t', "x"]},
                      index=[10, 20, 30])
    back = pd.read_csv(StringIO(to_csv_bytes(df).decode()))
    pd.testing.assert_frame_equal(back, df.reset_index(drop=True))


def test_a_csv_download_holds_the_table_as_it_was_when_the_button_was_drawn(monkeypatch):
    """The file is encoded on click, after the script has run: a page that keeps editing its frame must not change
    the download."""
    from components import download

    buttons = []
    monkeypatch.setattr(download.st, "download_button", lambda label, data, **kw: buttons.append((label, data, kw)))
    df = pd.DataFrame({"a": [1, 2], "b": [3.0, 4.0]})
    download.download_csv(df, "t.csv")
    df.loc[0, "a"] = 99
    df["c"] = 0
    _, data, kw = buttons[0]
    assert data() == b"a,b\n1,3.0\n2,4.0\n"
    assert kw["file_name"] == "t.csv" and kw["mime"] == "text/csv"


def test_json_bytes_turn_numpy_values_into_plain_json(monkeypatch):
    from components import download

    data = {
        np.int64(3): np.float32(0.5),
        "pair": (np.arange(2), np.bool_(True)),
        "m": np.eye(2, dtype=np.float64),
        "n": [np.int32(7), {"k": np.float64(2.5)}],
    }
    assert json.loads(download.to_json_bytes(data)) == {
        "3": 0.5, "pair": [[0, 1], True], "m": [[1.0, 0.0], [0.0, 1.0]], "n": [7, {"k": 2.5}]}
    buttons = []
    monkeypatch.setattr(download.st, "download_button", lambda label, d, **kw: buttons.append(d))
    download.download_json(lambda: {"x": np.float64(1.5)}, "r.json")
    assert json.loads(buttons[0]()) == {"x": 1.5}


def test_matrix_frame_matches_a_loop_over_a_non_square_matrix():
    from components.download import matrix_frame

    mat = np.arange(6.0).reshape(2, 3) ** 2
    frame = matrix_frame(mat, row="i", col="j", value="w")
    expected = [(i, j, mat[i, j]) for i in range(2) for j in range(3)]
    assert list(frame.columns) == ["i", "j", "w"]
    assert sorted(map(tuple, frame.to_numpy().tolist())) == sorted(expected)
    assert len(frame) == mat.size and not math.isnan(frame["w"].sum())


def test_json_downloads_are_strict_json_that_keeps_missing_and_infinite_values_apart():
    from components import download

    def strict(token):
        raise ValueError(token)

    data = {"a": float("nan"), "b": np.array([1.0, np.inf, -np.inf, np.nan]), "c": np.float32("inf"),
            "s": {3, 1, 2}}
    got = json.loads(download.to_json_bytes(data), parse_constant=strict)
    assert got == {"a": None, "b": [1.0, "inf", "-inf", None], "c": "inf", "s": [1, 2, 3]}
    assert [float(v) for v in got["b"][1:3]] == [np.inf, -np.inf]      # the markers read back as infinities


def test_a_key_lock_serialises_one_computation_and_is_dropped_when_nobody_needs_it():
    import threading
    import time

    from components.runner import ResultStore

    store = ResultStore()
    inside, overlap = [0], []

    def work():
        with store.key_lock(("k",)):
            inside[0] += 1
            overlap.append(inside[0])
            time.sleep(0.02)
            inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap == [1, 1, 1, 1]                 # never two sessions computing the same key at once
    assert store._key_locks == {}                  # and no lock is kept once all of them are done
    for k in range(100):
        with store.key_lock((k,)):
            pass
    assert store._key_locks == {}


def test_mark_grid_records_the_grid_its_height_and_which_annotations_title_which_cell():
    from plotly.subplots import make_subplots

    from components import charts

    fig = make_subplots(rows=2, cols=3, subplot_titles=["a", "", "c", "d"], horizontal_spacing=0.02, vertical_spacing=0.1)
    fig.add_annotation(x=0.5, y=0.5, xref="paper", yref="paper", text="not a title")
    with pytest.raises(ValueError, match="height"):
        charts.mark_grid(fig, 5, 2, 3)
    fig.update_layout(height=400, meta={"explorer_title": "kept"})
    with pytest.raises(ValueError, match="room"):
        charts.mark_grid(fig, 7, 2, 3)
    with pytest.raises(ValueError, match="mode"):
        charts.mark_grid(fig, 5, 2, 3, mode="spiral")
    charts.mark_grid(fig, 5, 2, 3, mode="band", hs=0.02, vs=0.1)
    g = fig.layout.meta[charts.GRID_META]
    assert fig.layout.meta["explorer_title"] == "kept"
    # the empty title makes no annotation, so "c" (annotation 1) titles cell 2 and "d" (annotation 2) cell 3
    assert g["titles"] == [[0, 0], [1, 2], [2, 3]]
    assert g == {"n": 5, "rows": 2, "cols": 3, "mode": "band", "hs": 0.02, "vs": 0.1, "height": 400,
                 "titles": g["titles"]}
    json.dumps(fig.to_plotly_json()["layout"]["meta"])          # travels to the browser as plain JSON


def test_image_grid_marks_grids_of_two_or_more_images_and_show_keeps_the_mark():
    from components import charts

    imgs = [np.eye(4) * k for k in range(1, 6)]
    fig = charts.image_grid(imgs, [f"#{k}" for k in range(5)], cols=3, title="five", height_per_row=100)
    g = fig.layout.meta[charts.GRID_META]
    assert (g["n"], g["rows"], g["cols"], g["mode"], g["height"]) == (5, 2, 3, "flow", 240)
    assert [c for _, c in g["titles"]] == [0, 1, 2, 3, 4]
    charts.detach_title(fig)                                     # what show() does first: the title leaves the figure
    assert fig.layout.meta[charts.GRID_META] == g and fig.layout.meta[charts.TITLE_META] == "five"
    one = charts.image_grid([np.eye(4)], ["only"], cols=1)
    assert not (isinstance(one.layout.meta, dict) and charts.GRID_META in one.layout.meta)


def test_chart_alt_names_a_chart_by_its_title_or_by_what_it_plots():
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from components import charts

    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    assert charts.chart_alt(fig, "Loss of <i>θ</i><br>at step&nbsp;10 &amp; more") == "Loss of θ at step 10 & more"
    assert charts.chart_alt(fig, None) is None
    fig.update_xaxes(title="step")
    assert charts.chart_alt(fig, "") == "step"
    fig.update_yaxes(title="log<sub>10</sub> error")
    assert charts.chart_alt(fig, None) == "log10 error against step"
    grid = make_subplots(rows=1, cols=8, subplot_titles=[f"#{k}" for k in range(8)])
    assert charts.chart_alt(grid, None) == "Panels: #0, #1, #2, #3, #4, #5, …"
