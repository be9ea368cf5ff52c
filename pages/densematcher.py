"""DenseMatcher: dense 3-D correspondence through functional maps, and colour transfer through it."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from components import charts, download, layout, state
from components.runner import run_or_message, run_or_stop
from engine import densematcher as eng
from engine.core.params import Choice

SLUG = "densematcher"

layout.paper_header(
    SLUG,
    idea=(
        "DenseMatcher finds, for every vertex of one mesh, the matching vertex on another object of the same "
        "kind — a mug's handle to another mug's handle — so that a grasp shown once, or a texture, can be "
        "carried over. It paints each vertex with features that 2-D foundation models see in many rendered "
        "views, sharpens them with a 3-D network, and then solves for the correspondence with a *functional "
        "map*: instead of matching points directly, it matches the two shapes' smooth vibration modes "
        "(Laplace–Beltrami eigenfunctions), which turns a huge assignment problem into a small matrix that "
        "least squares can find. This page runs that last stage for real on generated shapes — a lumpy "
        "'critter' and a deformed (by default bent and re-tessellated) copy of it — with descriptors computed from the geometry, "
        "then carries the source's colours to the target through the map."
    ),
    caveat=(
        "What is not here: the foundation-model features (DINOv2 / SD features lifted from rendered views) and "
        "the learned 3-D refinement network cannot be loaded offline, so the descriptors are the classical "
        "heat and wave kernel signatures. These only see intrinsic geometry: on a mirror-symmetric shape they "
        "cannot tell left from right and the map may come out mirrored (pick the mirror-symmetric critter to "
        "see it — the error measure counts a flip as an error). The bend stretches the surface a little "
        "(the measured edge-length change is shown when *Re-tessellate the target* is off), so the pair is near-isometric, not exactly isometric; "
        "the 'stretch' deformation is deliberately non-isometric and the accuracy claims are expected to fail there "
        "(the diagonality one may still pass)."
    ),
)

cfg = state.bind_config(eng.Config, SLUG, views=("view",))
state.share_link(cfg)
layout.device_indicator()

with st.expander("Use your own meshes (OBJ / PLY / STL)", icon=":material/upload_file:"):
    cap_mb = eng.MAX_FILE_BYTES // 2**20
    st.caption(f"Up to {cap_mb} MB per file; one connected triangle surface each. Large meshes are decimated to "
               f"about {eng.MAX_WORK_VERTICES:,} vertices. Upload only a source to match it with a "
               "vertex-shuffled copy deformed as in the sidebar (then the true map is known); upload both to "
               "match two different meshes (no ground truth, so only the diagonality claim is measured).")
    up1 = st.file_uploader("Source mesh", type=["obj", "ply", "stl"], key=f"{SLUG}:up1")
    up2 = st.file_uploader("Target mesh (optional)", type=["obj", "ply", "stl"], key=f"{SLUG}:up2")

def _read(up):
    """Bytes of an uploaded file, or None (with a message) when it is over the size cap."""
    if up is None:
        return None
    if up.size > eng.MAX_FILE_BYTES:
        layout.show_error(f"{layout.literal(up.name)}: {up.size / 2**20:.1f} MB is over the {cap_mb} MB limit; it "
                          "was ignored.")
        return None
    return up.name, up.getvalue()


src_file, tgt_file = _read(up1), _read(up2)
if src_file is None and tgt_file is not None:
    st.warning("Add a source mesh too; the generated pair is shown meanwhile.", icon=":material/warning:")
res = None
if src_file is not None:
    files = [src_file] + ([tgt_file] if tgt_file is not None else [])
    res = run_or_message("engine.densematcher", cfg, label="Matching the uploaded meshes", fn="run_upload",
                         payload=eng.pack_upload(files))
    if res is None:
        st.caption(":material/info: The generated pair is shown instead until the upload is replaced or removed.")
if res is None:
    res = run_or_stop("engine.densematcher", cfg, label="Computing the functional map")

for note in res.notes:   # a note may quote an uploaded file's name: shown as typed
    st.caption(f":material/info: {layout.error_text(note)}")

layout.claims_panel(eng.claims(res))

m = res.metrics
cols = st.columns(4)
cols[0].metric("Vertices (source / target)", f"{int(m['n_source']):,} / {int(m['n_target']):,}")
cols[1].metric("Basis size (initial → final)", f"{int(m['k'])} → {int(m['k_final'])}")
if res.has_truth:
    # short labels: four metrics share a tablet's width (768 px), and a longer label is cut off with an ellipsis
    cols[2].metric("Geodesic error, map", f"{m['err_final']:.3f}",
                   delta=f"{m['err_final'] - m['err_init']:+.3f} vs initial", delta_color="inverse",
                   help="Mean geodesic error of the functional map")
    cols[3].metric("Geodesic error, xyz", f"{m['err_xyz']:.3f}",
                   help="Mean geodesic error of the xyz baseline: each target vertex matched to the nearest "
                        "source vertex in xyz")
else:
    cols[2].metric("Source vertices hit by the map", f"{m['coverage_final']:.0%}")
    cols[3].metric("Share of |C|² off the diagonal band", f"{1 - m['diag_mass_p2p']:.2f}",
                   help="final map, with the constant eigenfunction left out; the band is |i − j| ≤ max(1, k // 10)")
if "edge_distortion" in m:
    st.caption(f"Isometry check: edge lengths change by {m['edge_distortion']:.1%} on average "
               "(mean |log ratio|) between source and target.")


def _rgb(values: np.ndarray) -> list[str]:
    v = np.clip(np.asarray(values) * 255, 0, 255).astype(int)
    return [f"rgb({r},{g},{b})" for r, g, b in v]


def _mesh(verts, faces, colours=None, intensity=None, name="", showscale=False, colorbar=None):
    kw = dict(x=verts[:, 0], y=verts[:, 1], z=verts[:, 2], i=faces[:, 0], j=faces[:, 1], k=faces[:, 2],
              name=name, flatshading=False, hoverinfo="skip",
              lighting=dict(ambient=0.55, diffuse=0.7, specular=0.15, roughness=0.6))
    if colours is not None:
        kw["vertexcolor"] = _rgb(colours)
    elif intensity is not None:
        kw.update(intensity=intensity, colorscale="Inferno", showscale=showscale, colorbar=colorbar)
    else:
        kw["color"] = "lightgray"
    return go.Mesh3d(**kw)


def _pair_figure(left, right, titles, height=460):
    fig = make_subplots(rows=1, cols=2, specs=[[{"type": "scene"}, {"type": "scene"}]], subplot_titles=titles,
                        horizontal_spacing=0.02)
    for trace in left:
        fig.add_trace(trace, row=1, col=1)
    for trace in right:
        fig.add_trace(trace, row=1, col=2)
    scenes = {}
    for name, traces in (("scene", left), ("scene2", right)):
        pts = np.concatenate([np.stack([t.x, t.y, t.z], axis=1) for t in traces])
        ext = np.ptp(pts, axis=0)
        ratio = ext / max(float(ext.max()), 1e-9)                 # longest side 1: the view fits it
        scenes[name] = dict(aspectmode="manual", aspectratio=dict(x=ratio[0], y=ratio[1], z=ratio[2]),
                            xaxis=dict(visible=False), yaxis=dict(visible=False), zaxis=dict(visible=False),
                            camera=dict(eye=dict(x=0.25, y=-1.45, z=0.45)))
    fig.update_layout(**scenes, showlegend=False, margin=dict(l=0, r=0, t=40, b=0))
    return charts.themed(fig, None, height)


sv, sf = res.source_verts, res.source_faces
tv, tf = res.target_verts, res.target_faces
src_rgb = res.source_rgb

st.subheader("Correspondence, shown as colour transfer")
st.caption("Left: the source, painted with a smooth colour field. Right: the target, each vertex painted with the "
           "colour of the source vertex the map sends it to. A good map reproduces the same pattern on the "
           "deformed target; drag to rotate either view.")
views = ["refined", "initial", "xyz"] + (["error"] if res.has_truth else [])
# panel titles are short: two 3-D panels side by side leave about 230 px each on a phone
short_view = {"refined": "refined map", "initial": "initial map", "xyz": "xyz baseline", "error": "geodesic error"}
view_names = {"refined": "Functional map (refined)", "initial": "Initial map (before refinement)",
              "xyz": "Baseline: nearest vertex in xyz", "error": "Geodesic error"}
view = state.bind_view(SLUG, "view", Choice(("refined", "initial", "xyz", "error"), "Colour the target through",
                                           widget="radio", labels=tuple(view_names.values())), default="refined")
if view not in views:  # the error view needs a known ground truth
    view = "refined"
if view == "error":
    ev = res.eval_idx
    cmax = max(0.1, float(np.quantile(res.err_xyz, 0.95)))

    def _points(err, scale):
        return go.Scatter3d(x=tv[ev, 0], y=tv[ev, 1], z=tv[ev, 2], mode="markers", hoverinfo="skip",
                            marker=dict(size=3.5, color=err, colorscale="Inferno", cmin=0, cmax=cmax,
                                        showscale=scale, colorbar=dict(title="error / diam.")))

    charts.show(_pair_figure([_mesh(tv, tf), _points(res.err_xyz, False)], [_mesh(tv, tf), _points(res.err_final, True)],
                             ["xyz baseline: error per vertex", "functional map: error per vertex"]), key="mesh3d")
    st.caption(f"Error measured at {len(ev)} sampled target vertices: shortest-path distance on the source's "
               "edge graph between the matched and the true vertex, over the source's geodesic diameter (estimated "
               "as the longest shortest path from the sampled vertices' true partners).")
else:
    tmap = {"refined": res.map_final, "initial": res.map_init, "xyz": res.map_xyz}[view]
    charts.show(_pair_figure([_mesh(sv, sf, src_rgb)], [_mesh(tv, tf, src_rgb[tmap])],
                             [res.source_name, f"{res.target_name}: {short_view[view]}"]), key="mesh3d")

tgt_idx = np.arange(len(tv))
map_df = pd.DataFrame({"target_vertex": tgt_idx, "source_vertex_refined": res.map_final,
                       "source_vertex_initial": res.map_init, "source_vertex_xyz": res.map_xyz,
                       "r": src_rgb[res.map_final, 0], "g": src_rgb[res.map_final, 1],
                       "b": src_rgb[res.map_final, 2]})
download.download_csv(map_df, "densematcher_point_map.csv", label="Download the point maps and transferred colours")
download.download_json({"source": {"name": res.source_name, "vertices": sv, "faces": sf, "rgb": src_rgb},
                        "target": {"name": res.target_name, "vertices": tv, "faces": tf}},
                       "densematcher_meshes.json", label="Download both meshes and the source colours (JSON)",
                       key="dl-densematcher-meshes")

st.subheader("The functional map")
st.caption("Entry (i, j) says how much of the source's j-th eigenfunction lands on the target's i-th. For a "
           "near-isometric pair the vibration modes correspond one to one (up to sign), so the mass sits near "
           "the diagonal; blocks along it come from modes of nearly equal frequency that mix.")
left, right = st.columns(2)
with left:
    charts.show(charts.heatmap(np.abs(res.C_init), title=f"|C| initial ({res.C_init.shape[0]}×{res.C_init.shape[1]},"
                               " least squares)", xlabel="source eigenfunction", ylabel="target eigenfunction",
                               square=True, zmin=0, colorbar_title="|C|"), key="c_init")
    download.download_csv(download.matrix_frame(res.C_init, "target_basis", "source_basis", "C"),
                          "densematcher_C_initial.csv")
with right:
    charts.show(charts.heatmap(np.abs(res.C_final), title=f"|C| after refinement ({res.C_final.shape[0]}×"
                               f"{res.C_final.shape[1]})", xlabel="source eigenfunction",
                               ylabel="target eigenfunction", square=True, zmin=0, colorbar_title="|C|"),
                key="c_final")
    download.download_csv(download.matrix_frame(res.C_final, "target_basis", "source_basis", "C"),
                          "densematcher_C_refined.csv")

left, right = st.columns(2)
with left:
    steps = np.arange(len(res.step_k))
    if res.has_truth:
        fig = charts.lines(steps, {"functional map": res.step_err}, title="Mean geodesic error per refinement step",
                           xlabel="refinement step", ylabel="error / geodesic diameter", mode="lines+markers")
        fig.add_hline(y=m["err_xyz"], line_dash="dot", annotation_text="xyz nearest neighbour")
    else:
        fig = charts.lines(steps, {"coverage": res.step_coverage}, title="Share of source vertices hit, per step",
                           xlabel="refinement step", ylabel="coverage", mode="lines+markers")
    charts.show(fig, key="steps")
    download.download_csv(pd.DataFrame({"step": steps, "basis_size": res.step_k, "mean_error": res.step_err,
                                        "coverage": res.step_coverage}), "densematcher_refinement.csv")
with right:
    if res.has_truth:
        eps, curves = eng.accuracy_curves(res)
        fig = charts.lines(eps, curves, title="Share of matches within a geodesic error",
                           xlabel="error / geodesic diameter", ylabel="share of target vertices")
        fig.update_layout(legend=dict(orientation="v", x=0.98, xanchor="right", y=0.05, yanchor="bottom"))
        charts.show(fig, key="cumerr")
        download.download_csv(pd.DataFrame({"eval_vertex": res.eval_idx, "err_refined": res.err_final,
                                            "err_initial": res.err_init, "err_xyz": res.err_xyz}),
                              "densematcher_errors.csv")
    else:
        idx = np.arange(len(res.evals_source))
        charts.show(charts.lines(idx, {"source": res.evals_source, "target": res.evals_target},
                                 title="Laplace–Beltrami eigenvalues", xlabel="index", ylabel="λ"), key="evals_u")

if res.has_truth:
    idx = np.arange(len(res.evals_source))
    charts.show(charts.lines(idx, {"source": res.evals_source, "target": res.evals_target},
                             title="Laplace–Beltrami eigenvalues (area normalised to 1): similar spectra signal a "
                                   "near-isometric pair", xlabel="index", ylabel="λ", height=300), key="evals")
download.download_csv(pd.DataFrame({"index": np.arange(len(res.evals_source)), "source": res.evals_source,
                                    "target": res.evals_target}), "densematcher_eigenvalues.csv")

layout.how_it_works(r"""
**1. Laplace–Beltrami operator.** On a triangle mesh the cotangent scheme gives a sparse stiffness matrix
$W_{ij} = -\tfrac12(\cot\alpha_{ij} + \cot\beta_{ij})$ for each edge (the two angles opposite it),
$W_{ii} = -\sum_{j\ne i} W_{ij}$, and a lumped mass matrix $M_{ii} = \tfrac13\sum_{t\ni i}\mathrm{area}(t)$.
The first $K$ solutions of $W\phi = \lambda M\phi$ (found with `scipy.sparse.linalg.eigsh` in shift-invert
mode) are the mesh's smoothest "vibration modes"; they are orthonormal in the $M$ inner product. Both meshes are
scaled to area 1 so their spectra are comparable.

**2. Descriptors.** With $\Phi$ the eigenvectors, the heat kernel signature
$\mathrm{HKS}(x,t)=\sum_{i\ge 2} e^{-\lambda_i t}\phi_i(x)^2 \big/ \sum_{i\ge 2} e^{-\lambda_i t}$ (the
constant mode dropped, each scale divided by its heat trace) and the wave kernel signature
$\mathrm{WKS}(x,e)\propto\sum_i \phi_i(x)^2 \exp\!\big(-(e-\log\lambda_i)^2/2\sigma^2\big)$ describe each vertex
at several scales and do not change under isometric bending. (DenseMatcher uses foundation-model features here.)
Their coefficients in the basis are $A=\Phi_1^\top M_1 F_1$ and $B=\Phi_2^\top M_2 F_2$.

**3. Functional map.** A map between shapes acts linearly on functions; in the two bases it is a small matrix
$C$ ($k\times k$). We solve the regularised least squares
$$\min_C\ \|CA-B\|^2 + \alpha\sum_d \|C X_d - Y_d C\|^2 + \beta\,\|C\Lambda_1-\Lambda_2 C\|^2,$$
where $X_d=\Phi_1^\top M_1\,\mathrm{diag}(f_d)\,\Phi_1$ is "multiply by descriptor $d$" (descriptor commutativity;
the sum runs over 12 descriptors spread evenly over the scales, while $A$ and $B$ hold all of them) and
$\Lambda$ the eigenvalues, both divided by the source's $k$-th eigenvalue so that $\beta$ does not depend on
the mesh's scale (an isometry commutes with the Laplacian). The energy is quadratic: without the
$\alpha$ term its rows separate and have a closed form; with it we run conjugate gradients on the normal equations.

**4. Point-to-point map.** If $T$ sends target vertex $y$ to source vertex $T(y)$, the map it induces is
$C = \Phi_2^\top M_2\,\Pi_T\,\Phi_1$, so row $y$ of $\Phi_2 C$ should equal row $T(y)$ of $\Phi_1$: we recover $T$
by a nearest-neighbour search in this spectral embedding.

**5. Refinement.** *ZoomOut* alternates "point map → functional map one size larger → point map", growing the
basis by a few eigenfunctions each step (here from $k$ up to at most 120); *spectral ICP* keeps the size and
projects $C$ onto the nearest orthogonal matrix ($U V^\top$ from its SVD) before each new point map.

**6. Measuring.** The generated shapes come from one sphere parameterisation, so each target vertex has a known
true partner. The error of a match is the shortest-path distance on the source's edge graph (Dijkstra) between the
matched and the true vertex, divided by the source's geodesic diameter (estimated as the longest shortest path
from the sampled vertices' true partners, a slight underestimate). The baseline matches each target vertex to
the nearest source vertex in 3-D space. The colour of a target vertex is the colour of its matched source vertex.
""")
