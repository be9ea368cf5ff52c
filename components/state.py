"""URL-state binding: every widget of a page is a Config field and a query parameter.

``bind_config(Config, slug)`` draws one widget per Config field (from the field's
spec in engine.core.params), seeds each widget from ``st.query_params`` when the
page is entered and when the browser's Back / Forward buttons change the URL,
writes the current values back into the URL on every run, and returns the Config.
Bad values in the URL (malformed, out of range, too long, or settings that do not
fit together) fall back to the default with a visible notice; nothing raises.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import streamlit as st

from engine.core import params as _params
from engine.core.params import Bool, Choice, Float, Int, Multi, ParamError, Text, defaults, widget_specs

# slug -> names of view-only URL parameters (declared by bind_config(views=...) / bind_view)
VIEW_PARAMS: dict[str, set[str]] = {}
# slug -> view-only parameter -> its default, as written in the URL (recorded by bind_view)
VIEW_DEFAULTS: dict[str, dict[str, str]] = {}
VIEW_SPECS: dict[str, dict[str, Any]] = {}


# The URL entry that records which version of a page's computation a link was made with (see page_revision).
REV_PARAM = "rev"


def _code_tree(module_file: Path) -> ast.Module:
    """The module's syntax tree with its docstrings dropped (comments never reach the tree)."""
    tree = ast.parse(module_file.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def revision_of(module_file: Path, assets_dir: Path | None) -> str:
    """Eight hex digits that change when an engine's code or its page's shipped files change.

    The code is the module's syntax tree without docstrings, plus that of each sibling engine module it imports
    (``from engine.graphs import ...``, ``from engine import graphs``; engine/core and the registry are left out). Rewording a comment or a docstring
    keeps the revision; any other edit (a formula, a default, a label) and any change of a byte under ``assets_dir``
    (a retrained checkpoint, a new curve file) gives a new one. The tree's printed form can change between Python
    versions, so a server moved to another Python version reports a new revision too.
    """
    h = hashlib.sha256()
    tree = _code_tree(module_file)
    siblings = sorted({alias.name.split(".")[1] for node in ast.walk(tree) if isinstance(node, ast.Import)
                       for alias in node.names if alias.name.startswith("engine.")}
                      | {node.module.split(".")[1] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                         and node.level == 0 and (node.module or "").startswith("engine.")}
                      | {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)   # from engine import X
                         and node.level == 0 and node.module == "engine" for alias in node.names})
    for name in [None, *siblings]:
        path = module_file if name is None else module_file.parent / f"{name}.py"
        if name in ("core", "registry") or not path.is_file() or path == module_file and name is not None:
            continue
        h.update(ast.dump(tree if name is None else _code_tree(path), annotate_fields=False,
                          include_attributes=False).encode() + b"\0")
    if assets_dir is not None and assets_dir.is_dir():
        for f in sorted(p for p in assets_dir.rglob("*") if p.is_file()):
            h.update(f.relative_to(assets_dir).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:8]


@functools.cache
def page_revision(slug: str) -> str | None:
    """The revision of a page's computation (``revision_of`` its engine module and assets/<slug>/), or None when
    the slug has no engine module (a page outside the registry)."""
    from engine.registry import PAPERS, ROOT
    paper = next((p for p in PAPERS if p.slug == slug), None)
    if paper is None or not paper.module:
        return None
    module_file = ROOT / (paper.module.replace(".", "/") + ".py")
    if not module_file.is_file():
        return None
    return revision_of(module_file, ROOT / "assets" / slug)


# The URL entry that records how the server that made a link does its float arithmetic (see page_arithmetic).
HW_PARAM = "hw"


@functools.cache
def page_arithmetic(slug: str) -> str | None:
    """Six hex digits that name how this server does a page's float arithmetic, or None for a page outside the
    registry.

    A seeded run repeats bit for bit only where the arithmetic is the same: the kind of CPU (its architecture and
    the most advanced numpy kernels it runs, ``components.seed_notes.machine``), the numpy, scipy and torch
    versions, and, for an engine that follows the device choice, the device (a GPU does its sums in another
    order). Runs that amplify last-digit differences (training that overfits, sampling chains, online RL) can end
    elsewhere when any of these differ, so a link records them and a server of another kind says so."""
    import importlib
    from importlib import metadata

    from components.seed_notes import machine
    from engine.core.device import device_label, follows_device
    from engine.registry import PAPERS
    paper = next((p for p in PAPERS if p.slug == slug), None)
    if paper is None or not paper.module:
        return None
    parts = [machine()]
    for dist in ("numpy", "scipy", "torch"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} absent")
    device = device_label(load_torch=True) if follows_device(importlib.import_module(paper.module)) else "CPU"
    parts.append("CPU" if device.startswith("CPU") else device)
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:6]


def _quoted(value: Any) -> str:
    """A link's value as a notice may quote it: letters and digits only, at most 16 (nothing a user could forge
    into Markdown)."""
    return "".join(c for c in str(value) if c.isascii() and c.isalnum())[:16] or "?"


def _code(text: Any, limit: int | None = None) -> str:
    """Text taken from a link (a name, or a message quoting a value), as a Markdown code span: a link, emphasis,
    HTML or formula written into a shared URL is shown as typed, never rendered in the page's notice."""
    t = " ".join(str(text).split()).replace("`", "'")
    return f"`{t[:limit] if limit else t}`"


def widget_key(slug: str, name: str) -> str:
    return f"{slug}:{name}"


def _render(spec, key: str, container) -> Any:
    help_ = spec.help or None
    if isinstance(spec, Int):
        if spec.widget == "number":
            return container.number_input(spec.label, min_value=spec.lo, max_value=spec.hi, step=spec.step,
                                          key=key, help=help_)
        return container.slider(spec.label, min_value=spec.lo, max_value=spec.hi, step=spec.step,
                                key=key, help=help_)
    if isinstance(spec, Float):
        kw = dict(min_value=float(spec.lo), max_value=float(spec.hi), key=key, help=help_, format=spec.fmt)
        if spec.step:
            kw["step"] = float(spec.step)
        if spec.widget == "number":
            return container.number_input(spec.label, **kw)
        return container.slider(spec.label, **kw)
    if isinstance(spec, Choice):
        opts = list(spec.options)
        if spec.widget == "radio":
            return container.radio(spec.label, opts, key=key, help=help_, format_func=spec.display,
                                   horizontal=True)
        if spec.widget == "select_slider":
            return container.select_slider(spec.label, opts, key=key, help=help_, format_func=spec.display)
        return container.selectbox(spec.label, opts, key=key, help=help_, format_func=spec.display)
    if isinstance(spec, Multi):
        return container.multiselect(spec.label, list(spec.options), key=key, help=help_, format_func=spec.display)
    if isinstance(spec, Bool):
        if spec.widget == "toggle":
            return container.toggle(spec.label, key=key, help=help_)
        return container.checkbox(spec.label, key=key, help=help_)
    if isinstance(spec, Text):
        return container.text_input(spec.label, key=key, help=help_, max_chars=spec.max_chars)
    raise TypeError(f"unknown widget spec {spec!r}")


def _coerce(spec, value: Any, default: Any) -> Any:
    try:
        if isinstance(spec, Int) and isinstance(value, float) and value == int(value):
            value = int(value)
        return spec.validate(value)
    except ParamError:
        return default


def _seen_key(slug: str) -> str:
    """Session key of the query parameters as this page last left them."""
    return f"{slug}::url_seen"


PAGE_SLUG_KEY = "_explorer_page_slug"   # the slug of the page being drawn (set by bind_config, read by the claims panel)
# this page run's engine runs and the sidebar slot that reports their time (made by layout.device_indicator, filled
# by runner.run_cached); bind_config drops the previous run's, so a run only ever reports into its own sidebar
ENGINE_RUNS_KEY = "_explorer_engine_runs"


def bind_config(config_cls, slug: str, container=None, title: str = "Settings", views: tuple[str, ...] = ()):
    """Render the widgets of ``config_cls`` bound to the URL; return the Config.

    ``views`` names the page's view-only URL parameters (see ``bind_view``) so that they are
    kept in the URL and not reported as unknown.
    """
    container = container if container is not None else st.sidebar
    st.session_state[PAGE_SLUG_KEY] = slug
    st.session_state.pop(ENGINE_RUNS_KEY, None)
    VIEW_PARAMS.setdefault(slug, set()).update(views)
    specs = widget_specs(config_cls)
    base = defaults(config_cls)
    qp = st.query_params
    notices: list[str] = []
    # Read the settings from the URL when the page is (re)entered -- its widget state is gone then, whether this is
    # the session's first visit or a return to the page (Streamlit drops the state of widgets a run did not draw) --
    # and when the URL is no longer the one this page last wrote: the browser's Back / Forward buttons restore an
    # earlier URL and the view must follow it, not overwrite it.
    current = _params.upgrade_query(config_cls, {k: qp.get(k) for k in qp.keys()})   # old links: renamed names
    seen = st.session_state.get(_seen_key(slug))
    rev = page_revision(slug)
    hw = page_arithmetic(slug) if rev else None
    known = set(specs) | set(VIEW_PARAMS.get(slug, ())) | ({REV_PARAM} if rev else set()) | (
        {HW_PARAM} if hw else set())
    if seen and (not any(name in current for name in specs) or any(name not in known for name in current)):
        # A URL with no settings of this page in it (the menu's link to the page, the bare entry Streamlit adds to the
        # browser history when it switches pages, or, seen under load, another page's query string arriving with
        # this page on Back): the page comes back as this session left it, and the URL says so. (Unknown names in a
        # link opened in a fresh session still get their notice below.)
        current = dict(seen)
    from_url = any(widget_key(slug, name) not in st.session_state for name in specs) or (
        seen is not None and current != seen)

    stale_link = other_arithmetic = None
    if from_url:
        st.session_state[f"{slug}::initial_qp"] = current
        if rev and REV_PARAM in current and str(current[REV_PARAM]) != rev:
            stale_link = _quoted(current[REV_PARAM])
        if hw and HW_PARAM in current and str(current[HW_PARAM]) != hw:
            other_arithmetic = _quoted(current[HW_PARAM])
        for name in VIEW_PARAMS.get(slug, ()):
            st.session_state.pop(widget_key(slug, name), None)   # bind_view re-reads it from the URL too
        for name in current:
            if name not in known:
                notices.append(f"{_code(name, 40)} is not a setting of this page and was ignored")
        for name, spec in specs.items():
            key = widget_key(slug, name)
            value = base[name]
            if name in current:
                try:
                    value = spec.parse(current[name])
                except ParamError as e:
                    notices.append(f"`{name}`: {_code(e)}; using the default ({spec.to_str(base[name])})")
            st.session_state[key] = value

    # Check the combination BEFORE any widget exists in this run: widget state can only be changed then.
    last_key = f"{slug}::last_valid"
    staged = {name: (_coerce(spec, st.session_state[widget_key(slug, name)], base[name])
                     if widget_key(slug, name) in st.session_state else base[name])
              for name, spec in specs.items()}
    emptied = []
    for name, spec in specs.items():
        key = widget_key(slug, name)
        if isinstance(spec, Multi) and key in st.session_state and not from_url:
            try:
                spec.validate(st.session_state[key])
            except ParamError as e:     # a multiselect emptied by the user: keep the last selection that worked
                staged[name] = st.session_state.get(last_key, {}).get(name, base[name])
                emptied.append(f"{spec.label}: {e}; the last selection was kept.")
    conflict = None
    try:
        config_cls(**staged)
    except (ValueError, TypeError) as e:
        restore = st.session_state.get(last_key) if not from_url else None
        if from_url:
            notices.append(f"these settings do not fit together ({e}); using the defaults")
        else:
            conflict = (f"These settings do not fit together: {e}. The last settings that worked were "
                        "restored; change another setting first to reach this combination.")
        staged = dict(restore) if restore else dict(base)
    for name in specs:
        st.session_state[widget_key(slug, name)] = staged[name]

    container.subheader(title)
    at_defaults = all(staged[name] == base[name] for name in specs) and all(
        _view_str(slug, k) in (None, VIEW_DEFAULTS.get(slug, {}).get(k)) for k in VIEW_PARAMS.get(slug, ()))
    container.button("Reset to defaults", key=f"{slug}::reset", icon=":material/restart_alt:",
                     disabled=at_defaults, on_click=_reset, args=(slug, specs, base),
                     help="Every setting of this page back to its default (the link changes with it)")
    if conflict:
        container.warning(conflict, icon=":material/tune:")
    for msg in emptied:
        container.warning(msg, icon=":material/tune:")
    groups: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for name, spec in specs.items():
        key = widget_key(slug, name)
        target = container
        if spec.group:
            if spec.group not in groups:
                groups[spec.group] = container.expander(spec.group)
            target = groups[spec.group]
        values[name] = _render(spec, key, target)
        if isinstance(spec, Multi):     # the widget returns a list; the Config holds a tuple (hashable, ordered)
            values[name] = _coerce(spec, values[name], staged[name])

    try:
        cfg = config_cls(**values)
    except (ValueError, TypeError) as e:  # cannot happen after the check above; stop cleanly if it does
        st.warning(f"These settings do not fit together: {e}. Change one of them to run the page.")
        st.stop()
    st.session_state[last_key] = {name: getattr(cfg, name) for name in specs}

    params = {name: specs[name].to_str(getattr(cfg, name)) for name in specs}
    if rev:
        params[REV_PARAM] = rev
    if hw:
        params[HW_PARAM] = hw
    for k in VIEW_PARAMS.get(slug, ()):          # view-only widgets keep their own URL entries
        fresh = None if from_url else _view_widget_str(slug, k)
        if fresh is not None:
            # the user has just changed the view widget: its state is newer than the URL, and a share link drawn
            # before bind_view runs later in this run must already carry it
            params[k] = fresh
        elif k in current:
            params[k] = current[k]
        elif k in VIEW_DEFAULTS.get(slug, {}):
            # written now with the settings rather than by bind_view later in the run: every write of the URL is an
            # entry of the browser's history, and one entry per visit keeps the Back button a single step
            params[k] = VIEW_DEFAULTS[slug][k]
    if dict(qp.to_dict()) != params:
        qp.from_dict(params)
    st.session_state[_seen_key(slug)] = {k: qp.get(k) for k in qp.keys()}
    if stale_link is not None:
        st.info(f"This link was made with another version of this page (revision `{stale_link}`; this one is "
                f"`{rev}`): its code or its shipped models have changed since. The link's settings are restored, "
                "but the results may differ from what its sender saw.", icon=":material/history:")
    elif other_arithmetic is not None:
        st.info(f"This link was made on a server that does its float arithmetic differently (arithmetic "
                f"`{other_arithmetic}`; this one is `{hw}`): another kind of CPU, other numpy, scipy or torch "
                "versions, or a GPU. The link's settings are restored. Runs that amplify last-digit differences "
                "(training, sampling chains, online RL) can end elsewhere, so numbers may differ from what its "
                "sender saw, and a badge close to its bar can change verdict.", icon=":material/memory:")
    if notices:
        st.warning("Some link parameters could not be used:\n\n" + "\n".join(f"- {n}" for n in notices),
                   icon=":material/link_off:")
    return cfg


def _view_str(slug: str, name: str) -> str | None:
    """A view-only widget's current value as the URL writes it: the widget's state when it has one (it may be newer
    than the URL, which bind_view updates later in the run), else the URL's entry, else None."""
    key, spec = widget_key(slug, name), VIEW_SPECS.get(slug, {}).get(name)
    if spec is not None and key in st.session_state:
        try:
            return spec.to_str(st.session_state[key])
        except (TypeError, ValueError):
            return None
    return st.query_params.get(name)


def _view_widget_str(slug: str, name: str) -> str | None:
    """A view-only widget's state as the URL writes it, or None when it has no state or not a valid one (an
    emptied multiselect, which bind_view then restores)."""
    key, spec = widget_key(slug, name), VIEW_SPECS.get(slug, {}).get(name)
    if spec is None or key not in st.session_state:
        return None
    try:
        return spec.to_str(spec.validate(st.session_state[key]))
    except (ParamError, TypeError, ValueError):
        return None


def _reset(slug: str, specs: dict, base: dict) -> None:
    """Button callback (runs before the rerun draws any widget): every setting and view back to its default."""
    for name in specs:
        st.session_state[widget_key(slug, name)] = base[name]
    initial = st.session_state.get(f"{slug}::initial_qp", {})
    for name in VIEW_PARAMS.get(slug, ()):
        st.session_state.pop(widget_key(slug, name), None)   # bind_view redraws it at its default
        initial.pop(name, None)
        if name in st.query_params:
            del st.query_params[name]
    st.session_state.pop(f"{slug}::last_valid", None)
    # the URL still holds the old settings until this rerun writes the defaults: not a Back / Forward change
    st.session_state[_seen_key(slug)] = {k: st.query_params.get(k) for k in st.query_params.keys()}


def bind_view(slug: str, name: str, spec, container=None, default=None) -> Any:
    """A widget that changes only how results are drawn, not what is computed.

    It is not a Config field (changing it does not recompute), but it is bound to the URL like
    one, so a shared link also reproduces the chosen view. Call it after ``bind_config``.
    """
    container = container if container is not None else st
    VIEW_PARAMS.setdefault(slug, set()).add(name)
    key = widget_key(slug, name)
    if default is None:
        default = (spec.options[0] if isinstance(spec, Choice) else tuple(spec.options) if isinstance(spec, Multi)
                   else spec.lo if isinstance(spec, Int | Float) else "")
    VIEW_DEFAULTS.setdefault(slug, {})[name] = spec.to_str(default)
    VIEW_SPECS.setdefault(slug, {})[name] = spec
    if key not in st.session_state:
        initial = st.session_state.get(f"{slug}::initial_qp", {})
        raw = initial.get(name, st.query_params.get(name))
        value = default
        if raw is not None:
            try:
                value = spec.parse(raw)
            except ParamError as e:
                st.warning(f"`{name}`: {_code(e)}; using the default ({spec.to_str(default)})",
                           icon=":material/link_off:")
        st.session_state[key] = value
    elif isinstance(spec, Multi):
        try:
            st.session_state[key] = spec.validate(st.session_state[key])
        except ParamError as e:      # emptied by the user: keep the last selection that worked
            container.warning(f"{spec.label}: {e}; the last selection was kept.", icon=":material/tune:")
            st.session_state[key] = st.session_state.get(f"{key}::last", default)
    else:
        st.session_state[key] = _coerce(spec, st.session_state[key], default)
    value = _render(spec, key, container)
    if isinstance(spec, Multi):
        value = _coerce(spec, value, default)
        st.session_state[f"{key}::last"] = value
    if st.query_params.get(name) != spec.to_str(value):
        st.query_params[name] = spec.to_str(value)
    seen = st.session_state.get(_seen_key(slug))
    if seen is not None:
        seen[name] = spec.to_str(value)
    return value


def bind_tabs(slug: str, name: str, labels, container=None) -> list:
    """``st.tabs`` whose selected tab is a view setting bound to the URL (``name=<tab label>``), like bind_view.

    The first tab is the default. An unknown label in a link gets the same notice as any bad view value. Declare
    ``name`` in ``bind_config(views=...)``, as for bind_view. Every tab's content is still drawn on each run.
    """
    container = container if container is not None else st
    labels = [str(x) for x in labels]
    spec = Choice(tuple(labels), name)
    VIEW_PARAMS.setdefault(slug, set()).add(name)
    VIEW_DEFAULTS.setdefault(slug, {})[name] = labels[0]
    VIEW_SPECS.setdefault(slug, {})[name] = spec
    key = widget_key(slug, name)
    if key in st.session_state and st.session_state[key] not in labels:
        st.session_state[key] = labels[0]   # the tabs changed under the user's pick (e.g. an upload has fewer kinds)
    elif key not in st.session_state:       # first draw, or after Back / Forward: the link says which tab
        initial = st.session_state.get(f"{slug}::initial_qp", {})
        raw = initial.get(name, st.query_params.get(name))
        value = labels[0]
        if raw is not None:
            try:
                value = spec.parse(raw)
            except ParamError as e:
                st.warning(f"`{name}`: {_code(e)}; using the default ({labels[0]})", icon=":material/link_off:")
        st.session_state[key] = value
    tabs = container.tabs(labels, key=key, on_change="rerun")
    value = st.session_state.get(key) if st.session_state.get(key) in labels else labels[0]
    if st.query_params.get(name) != value:
        st.query_params[name] = value
    seen = st.session_state.get(_seen_key(slug))
    if seen is not None:
        seen[name] = value
    return tabs


def share_link(config, container=None) -> str:
    """Show the shareable URL of the current view; return its query string."""
    container = container if container is not None else st.sidebar
    specs = widget_specs(type(config))
    query = urlencode({k: st.query_params.get(k) for k in st.query_params.keys()}
                      or {name: specs[name].to_str(getattr(config, name)) for name in specs})
    base = ""
    try:
        url = getattr(st.context, "url", None)
        if url:
            base = str(url).split("?", 1)[0]
    except Exception:  # st.context is unavailable in some test harnesses
        base = ""
    link = f"{base}?{query}"
    with container.expander("Copy link to this view", icon=":material/link:"):
        st.code(link, language=None, wrap_lines=True)
        slug = st.session_state.get(PAGE_SLUG_KEY, "")
        rev = page_revision(slug)
        hw = page_arithmetic(slug) if rev else None
        where = (f" on a server that does its float arithmetic the same way (`{hw}`: CPU kind, numpy, scipy and "
                 "torch versions, device); a link opened on a later revision or on a server of another kind says so."
                 if hw else "; a link opened on a later revision says so.")
        st.caption("Opening this link reproduces these settings and therefore the same results"
                   + (f" while the page is at revision `{rev}` (its code and shipped models){where}" if rev else "."))
    return query


def config_fields(config) -> dict[str, Any]:
    return dataclasses.asdict(config)
