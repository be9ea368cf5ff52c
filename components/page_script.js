// Page-wide helpers, installed once per browser tab by app.py (st.html with JavaScript allowed; st.html is not in an
// iframe, so this runs in the app's own document).
//
// 1. Side-by-side charts whose HTML titles (components/charts.show) wrap to different numbers of lines would start at
//    different heights. The shorter titles in a row of columns get padding above them so that the charts start
//    level; re-run on every change of the page and on resize. Columns that Streamlit has stacked (a phone) are left
//    alone.
// 2. The PNG export of the chart toolbar gets the chart's title back (see below).
// 3. So does a chart in Streamlit's full-screen view.
// 4. An image grid (components/charts.mark_grid) too wide for its column, as on a phone, is laid out again with
//    fewer columns and more rows, so each image keeps a readable size instead of shrinking to a sliver; widening the
//    window restores the grid as the server drew it.
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

  // 4. Image grids. The server marks a grid in layout.meta.explorer_grid (components/charts.mark_grid): n images in
  //    the first cells of make_subplots' row-major rows x cols grid, its spacings hs / vs, its height, and which
  //    annotations are the cells' titles. "flow" keeps the images' reading order; "band" keeps the rows of one
  //    column together (two views of one sample, the heads of one layer) and puts chunks of columns below each
  //    other. Each image keeps its height in px, and so does the gap between rows. Every pass compares the chart with
  //    the layout it should have at its current width and changes only what differs, so Streamlit redrawing the
  //    server's figure (a rerun, a resize) is simply laid out again. Streamlit sizes a chart's height from its box
  //    once it has one, so the box gets the new height too while the grid is re-flowed.
  const MIN_CELL = 80;                   // px: the narrowest image that still reads as an image
  const axisName = (xy, i) => xy + "axis" + (i ? String(i + 1) : "");
  function gridColumns(spec, avail) {    // the most columns whose images are MIN_CELL wide, in balanced chunks
    const width = k => avail * (1 - spec.hs * (k - 1)) / k;
    let fit = spec.cols;
    while (fit > 1 && width(fit) < MIN_CELL) fit--;
    return fit === spec.cols ? fit : Math.ceil(spec.cols / Math.ceil(spec.cols / fit));
  }
  function gridTarget(spec, size, c) {
    const R = spec.rows, C = spec.cols, place = {};
    if (c >= C) {
      for (let i = 0; i < R * C; i++) place[i] = [Math.floor(i / C), i % C];
    } else if (spec.mode === "band") {
      for (let q = 0; q < Math.ceil(C / c); q++)
        for (let r = 0; r < R; r++)
          for (let j = q * c; j < Math.min(C, (q + 1) * c); j++)
            if (r * C + j < spec.n) place[r * C + j] = [q * R + r, j - q * c];
    } else {
      for (let i = 0; i < spec.n; i++) place[i] = [Math.floor(i / c), i % c];
    }
    const Hs = spec.height - size.t - size.b;
    const rowPx = Hs * (1 - spec.vs * (R - 1)) / R, gapPx = R > 1 ? spec.vs * Hs : 30;
    const rows = 1 + Math.max(...Object.values(place).map(p => p[0]));
    const H = rows * rowPx + (rows - 1) * gapPx, cc = Math.min(c, C);
    const wd = (1 - spec.hs * (cc - 1)) / cc;
    const dom = {};
    for (let i = 0; i < R * C; i++) {
      const p = place[i];
      if (!p) { dom[i] = {x: [0, 0.001], y: [0, 0.001]}; continue; }
      const top = 1 - p[0] * (rowPx + gapPx) / H;
      dom[i] = {x: [p[1] * (wd + spec.hs), p[1] * (wd + spec.hs) + wd], y: [Math.max(0, top - rowPx / H), top]};
    }
    return {dom, place, height: c >= C ? spec.height : Math.round(H + size.t + size.b)};
  }
  const PIN = "explorerGridPin";         // data-explorer-grid-pin on the boxes given a height here
  function unpin(b) {
    b.style.height = "";
    if (b.dataset.testid === "stElementContainer") b.style.flex = "";
    delete b.dataset[PIN];
  }
  function reflowGrids() {
    if (!window.Plotly || !window.Plotly.relayout) return;
    // a box Streamlit now uses for something else (the grid left the page on a rerun) gives its height back
    document.querySelectorAll("[data-explorer-grid-pin]").forEach(b => {
      const g = b.querySelector(".js-plotly-plot");
      if (!(g && g.layout && g.layout.meta && g.layout.meta.explorer_grid)) unpin(b);
    });
    document.querySelectorAll(".js-plotly-plot").forEach(gd => {
      const lay = gd.layout, full = gd._fullLayout, box = gd.parentElement;
      const spec = lay && lay.meta && lay.meta.explorer_grid;
      const frame = box && box.closest('[data-testid="stFullScreenFrame"]');
      if (!spec || !full || !full._size || !box || gd.__gridBusy) return;
      if (frame && getComputedStyle(frame).position === "fixed") {      // full screen: Streamlit sizes it
        [box, frame].forEach(b => { if (b.dataset[PIN]) unpin(b); });
        return;
      }
      const c = gridColumns(spec, box.clientWidth - full._size.l - full._size.r);
      const want = gridTarget(spec, full._size, c);
      const upd = {}, close = (a, b) => a && b && Math.abs(a[0] - b[0]) + Math.abs(a[1] - b[1]) < 1e-4;
      for (const i in want.dom) {
        ["x", "y"].forEach(xy => {
          const name = axisName(xy, +i), now = lay[name] && lay[name].domain;
          if (!close(now, want.dom[i][xy])) upd[name + ".domain"] = want.dom[i][xy];
        });
      }
      (spec.titles || []).forEach(([j, i]) => {
        const a = (lay.annotations || [])[j], d = want.dom[i], x = (d.x[0] + d.x[1]) / 2, shown = !!want.place[i];
        if (!a) return;
        if (Math.abs(a.x - x) > 1e-4) upd["annotations[" + j + "].x"] = x;
        if (Math.abs(a.y - d.y[1]) > 1e-4) upd["annotations[" + j + "].y"] = d.y[1];
        if ((a.visible !== false) !== shown) upd["annotations[" + j + "].visible"] = shown;
      });
      // the chart's box, Streamlit's frame around it and the element's slot in the page all have the server figure's
      // height (the slot as a flex basis): they get the new one, and lose it again when the grid is as drawn
      const slot = box.closest('[data-testid="stElementContainer"]');
      const boxes = [box, frame, slot].filter(Boolean);
      if (c < spec.cols || Object.keys(upd).length || lay.height !== want.height) {
        boxes.forEach(b => { b.style.height = want.height + "px"; b.dataset[PIN] = "1"; });
        if (slot) slot.style.flex = "0 0 " + want.height + "px";
      } else {
        boxes.forEach(b => { if (b.dataset[PIN]) unpin(b); });
      }
      if (lay.height !== want.height) upd.height = want.height;
      if (!Object.keys(upd).length) return;
      const now = Date.now();              // a chart that keeps being drawn back is left alone rather than fought
      gd.__gridTries = (gd.__gridTries || []).filter(t => now - t < 5000).concat([now]);
      if (gd.__gridTries.length > 12) return;
      gd.__gridBusy = true;
      Promise.resolve(window.Plotly.relayout(gd, upd)).catch(() => {}).finally(() => { gd.__gridBusy = false; later(); });
    });
  }

  let pending = null;
  // at most one pass per 120 ms: a page that keeps changing (a progress bar) still gets aligned while it does
  const later = () => { if (!pending) pending = setTimeout(() => { pending = null; reflowGrids(); align(); }, 120); };
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
