// Page-wide helpers, installed once per browser tab by app.py (st.html with JavaScript allowed; st.html is not in an
// iframe, so this runs in the app's own document).
//
// 1. Side-by-side charts whose HTML titles (components/charts.show) wrap to different numbers of lines would start at
//    different heights. The shorter titles in a row of columns get padding above them so that the charts start
//    level; re-run on every change of the page and on resize. Columns that Streamlit has stacked (a phone) are left
//    alone.
// 2. The PNG export of the chart toolbar gets the chart's title back (see below).
// 3. So does a chart in Streamlit's full-screen view.
//
// Write no "<" directly before a letter or "/" in this file (use \x3c): Streamlit's HTML sanitiser then drops the
// whole script without a word.
(() => {
  if (window.__explorerAlignTitles) return;
  window.__explorerAlignTitles = true;
  const TITLE = ".explorer-chart-title";
  function chartTop(col, k) {           // the k-th title in a column, and its bottom (where its chart starts)
    const titles = col.querySelectorAll(TITLE);
    if (titles.length <= k) return null;
    const t = titles[k];
    return {t, top: t.getBoundingClientRect().bottom};
  }
  // 3. Streamlit's full-screen view enlarges the chart's own frame, which leaves the HTML title behind: while a frame is
  //    full screen (position: fixed) its chart gets a copy of the title in the band above the plot, on one line.
  function fullScreenTitles() {
    document.querySelectorAll('[data-testid="stFullScreenFrame"]').forEach(f => {
      const copy = f.querySelector(":scope > .explorer-fs-title");
      const big = getComputedStyle(f).position === "fixed" && f.querySelector(".js-plotly-plot");
      if (!big) { if (copy) copy.remove(); return; }
      if (copy) return;
      const box = f.closest('[data-testid="stElementContainer"]');
      const prev = box && box.previousElementSibling;
      const title = prev && prev.querySelector(TITLE);
      if (!title) return;
      const el = document.createElement("div");
      el.className = "explorer-fs-title";
      el.innerHTML = title.innerHTML;
      f.appendChild(el);
    });
  }
  function align() {
    fullScreenTitles();
    document.querySelectorAll(TITLE).forEach(t => { t.style.paddingTop = ""; });
    document.querySelectorAll('[data-testid="stHorizontalBlock"]').forEach(hb => {
      const cols = [...hb.children].filter(c => c.dataset.testid === "stColumn" && c.querySelector(TITLE));
      if (cols.length < 2) return;
      const top0 = cols[0].getBoundingClientRect().top;
      if (cols.some(c => Math.abs(c.getBoundingClientRect().top - top0) > 2)) return;   // stacked columns
      for (let k = 0; k < 8; k++) {
        const at = cols.map(c => chartTop(c, k)).filter(x => x);
        if (at.length < 2) break;
        const low = Math.max(...at.map(x => x.top));
        at.forEach(x => {
          const d = low - x.top;
          if (d > 1) x.t.style.paddingTop = d + "px";
        });
      }
    });
  }
  let pending = null;
  // at most one pass per 120 ms: a page that keeps changing (a progress bar) still gets aligned while it does
  const later = () => { if (!pending) pending = setTimeout(() => { pending = null; align(); }, 120); };
  new MutationObserver(later).observe(document.body, {childList: true, subtree: true, characterData: true});
  window.addEventListener("resize", later);
  later();

  // 2. The toolbar's "Download plot as a PNG" exports the figure, which no longer holds its title (it is HTML above
  // the chart). Just before plotly's own click handler runs, put the title back into a copy-on-export: plotly copies
  // gd.layout and the toolbar options synchronously when the export starts, so they are restored right after and
  // the chart on screen never redraws. The image grows by the title's band; the file is named after the title.
  document.addEventListener("click", ev => {
    const btn = ev.target.closest && ev.target.closest('.modebar-btn[data-title^="Download plot"]');
    const gd = btn && btn.closest(".js-plotly-plot");
    const title = gd && gd.layout && gd.layout.meta && gd.layout.meta.explorer_title;
    if (gd && gd._context && !title) {
      // an untitled chart: name the file after the page and the chart's key (Streamlit marks its element with a
      // "st-key-KEY" class) rather than plotly's "plot-image"
      const box = gd.closest('[class*="st-key-"]');
      const key = box ? [...box.classList].find(c => c.startsWith("st-key-")).slice(7) : "";
      const page = location.pathname.split("/").filter(Boolean).pop() || "home";
      const kept = gd._context.toImageButtonOptions;
      gd._context.toImageButtonOptions = Object.assign({}, kept || {}, {filename: key ? page + "-" + key : page});
      setTimeout(() => { gd._context.toImageButtonOptions = kept; }, 0);
      return;
    }
    if (!title || !gd._fullLayout || !gd._context || (gd.layout.title && String(gd.layout.title.text || "").replace(/\x3c[^\x3e]*\x3e/g, "").trim())) return;
    const full = gd._fullLayout, lay = gd.layout, ctx = gd._context;
    const perLine = Math.max(24, Math.floor((full.width - 24) / 8.5));
    const lines = [];
    for (const part of String(title).split(/\x3cbr\s*\/?\x3e/i)) {
      let cur = "";
      for (const w of part.split(" ")) {
        const vis = (cur + " " + w).replace(/\x3c[^\x3e]*\x3e/g, "").trim();
        if (cur && vis.length > perLine) { lines.push(cur); cur = w; } else { cur = cur ? cur + " " + w : w; }
      }
      lines.push(cur);
    }
    const band = 20 * lines.length + 10;
    const kept = {annotations: lay.annotations, margin: lay.margin, opts: ctx.toImageButtonOptions};
    const top = (full._size && full._size.t) || full.margin.t;   // the plot's top on screen, legend rows included
    lay.margin = Object.assign({}, lay.margin || {}, {t: top + band});
    // an annotation, not a layout title: plotly anchors a multi-line title by its first line, an annotation by its
    // whole box; its bottom sits on the band's lower edge, `top` px above the plot (legend rows stay where they were)
    lay.annotations = (lay.annotations || []).concat([{
      text: lines.join("\x3cbr\x3e"), showarrow: false, xref: "paper", yref: "paper", x: 0, y: 1, xanchor: "left", xshift: 6 - ((full._size && full._size.l) || 0),
      yanchor: "bottom", yshift: top - 2, align: "left", font: {size: 15, color: "#31333f"}}]);
    const slug = String(title).replace(/\x3c[^\x3e]*\x3e/g, " ").replace(/[^A-Za-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 60);
    ctx.toImageButtonOptions = Object.assign({}, kept.opts || {}, {height: full.height + band, width: full.width,
                                                                  filename: slug || "chart"});
    setTimeout(() => {
      lay.annotations = kept.annotations; lay.margin = kept.margin; ctx.toImageButtonOptions = kept.opts;
      if (kept.annotations === undefined) delete lay.annotations;
      if (kept.margin === undefined) delete lay.margin;
    }, 0);
  }, true);
})();
