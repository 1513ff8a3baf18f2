"""A self-contained HTML page of a report: the paper's tables, a heat map of the text x image grid, bars with
intervals per perturbation and the worst examples with thumbnails. No scripts, no external files."""
from __future__ import annotations

import html

from .tables import (budget_table, budget_title, group_title, p_value, prompt_summary, prompt_table,
                     reliance_table, render)

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0;font-size:.85em}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f3f3f3}td:first-child{text-align:left}.meta{color:#555;font-size:.85em}
.worst td{vertical-align:top;text-align:left;max-width:320px}.worst img{width:72px;height:72px;image-rendering:pixelated}
"""


def _heatmap(group: dict) -> str:
    """Drop in accuracy per text x image cell, darker red = larger drop."""
    cells = {r["condition"]: r for r in group["results"] if r["kind"] == "combined"}
    if not cells:
        return ""
    texts, images = group["grid_text"], group["grid_image"]
    clean = group["clean"]["metrics"]["accuracy"]
    size, left, top = 64, 170, 120
    # column labels lean right at -40 degrees: leave room for the longest beyond the last column
    longest = max(len(i.split("=", 1)[1]) for i in images)
    width, height = left + size * len(images) + max(10, int(5.5 * longest)), top + size * len(texts) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="11" '
             f'overflow="visible">']
    for j, image in enumerate(images):
        x = left + j * size + size / 2
        parts.append(f'<text x="{x}" y="{top - 6}" transform="rotate(-40 {x} {top - 6})">'
                     f'{html.escape(image.split("=", 1)[1])}</text>')
    for i, text in enumerate(texts):
        y = top + i * size
        parts.append(f'<text x="{left - 6}" y="{y + size / 2 + 4}" text-anchor="end">'
                     f'{html.escape(text.split("=", 1)[1])}</text>')
        for j, image in enumerate(images):
            r = cells.get(f"{text}+{image}")
            x = left + j * size
            if r is None:
                parts.append(f'<rect x="{x}" y="{y}" width="{size}" height="{size}" fill="#eee" stroke="#fff"/>')
                continue
            drop = clean - r["metrics"]["accuracy"]
            shade = max(0.0, min(1.0, drop / max(clean, 1e-9) / 0.5))  # 50% relative drop = full red
            fill = f"rgb(255,{int(255 * (1 - shade))},{int(255 * (1 - shade))})"
            parts.append(f'<rect x="{x}" y="{y}" width="{size}" height="{size}" fill="{fill}" stroke="#ccc">'
                         f'<title>{html.escape(r["condition"])}: accuracy {r["metrics"]["accuracy"]:.3f}</title></rect>'
                         f'<text x="{x + size / 2}" y="{y + size / 2 + 4}" text-anchor="middle">{drop:+.3f}</text>')
    parts.append("</svg>")
    return "<p>Accuracy drop from clean per text x image pair</p>" + "".join(parts)


def _bars(group: dict) -> str:
    """Relative robustness of accuracy per single-channel perturbation, with its paired bootstrap interval."""
    rows = [r for r in group["results"] if r["kind"] in ("text", "image")]
    if not rows:
        return ""
    scale, left, row_h = 300, 190, 18
    lo_axis, hi_axis = 0.0, 1.2
    x = lambda v: left + (min(max(v, lo_axis), hi_axis) - lo_axis) / (hi_axis - lo_axis) * scale
    height = row_h * len(rows) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + scale + 120}" height="{height}" font-size="11">',
             f'<line x1="{x(1.0)}" y1="0" x2="{x(1.0)}" y2="{height - 20}" stroke="#888" stroke-dasharray="3"/>']
    for k, r in enumerate(rows):
        y = k * row_h + 4
        value = r["relative_robustness"]["accuracy"]
        lo, hi = r["relative_robustness_ci"]["accuracy"]
        color = "#c0392b" if hi < 1 else "#2980b9"
        parts.append(f'<text x="{left - 6}" y="{y + 11}" text-anchor="end">{html.escape(r["condition"])}</text>'
                     f'<rect x="{x(lo_axis)}" y="{y + 3}" width="{x(value) - x(lo_axis)}" height="10" fill="{color}" '
                     f'opacity=".6"/><line x1="{x(lo)}" y1="{y + 8}" x2="{x(hi)}" y2="{y + 8}" stroke="#222"/>'
                     f'<text x="{left + scale + 6}" y="{y + 11}">{value:.3f} (p {p_value(r.get("mcnemar_p"))})</text>')
    for tick in (0.0, 0.5, 1.0):
        parts.append(f'<text x="{x(tick)}" y="{height - 6}" text-anchor="middle">{tick}</text>')
    parts.append("</svg>")
    return "<p>Relative robustness of accuracy (bar) with its interval (line) and McNemar's p; red: the interval is below 1</p>" \
        + "".join(parts)


def _worst(group: dict) -> str:
    rows = group.get("worst_examples", [])
    if not rows:
        return ""
    body = "".join(
        (f'<tr><td><img alt="{html.escape(e["id"])}" src="data:image/png;base64,{e["thumbnail"]}"></td>'
         if e.get("thumbnail") else "<tr><td><small>no picture</small></td>")
        + f'<td>{html.escape(e["condition"])}<br><small>{html.escape(e["id"])}</small></td>'
        f'<td>{html.escape(e["caption"])}</td><td>{html.escape(e["perturbed_caption"])}</td>'
        f'<td>{html.escape(e["label"])}: {e["p_true_clean"]:.3f} &rarr; {e["p_true_perturbed"]:.3f}</td></tr>'
        for e in rows)
    return ('<p>Worst examples: the largest drops in the probability of the true class</p><table class="worst">'
            "<tr><th>picture</th><th>condition</th><th>caption</th><th>perturbed caption</th>"
            f"<th>p(true class) clean &rarr; perturbed</th></tr>{body}</table>")


def _budget_worst(entry: dict) -> str:
    """Per family, the memes that fell to the smallest edits, with the caption before and the one that got past."""
    rows = "".join(
        f"<tr><td>{html.escape(e['family'])}</td><td>{w['budget']:g} {html.escape(e.get('unit', ''))}</td>"
        f"<td>{html.escape(str(w['id']))}</td><td>{html.escape(w['caption'])}</td>"
        f"<td>{html.escape(w['evasion']) if w.get('evasion') else '<small>picture edited</small>'}</td></tr>"
        for e in entry["entries"] for w in e.get("worst", []))
    if not rows:
        return ""
    return ("<p>The memes that fell to the smallest edits</p><table class='worst'><tr><th>family</th><th>budget</th>"
            f"<th>meme</th><th>caption</th><th>caption that got past</th></tr>{rows}</table>")


def _prompt_html(entry: dict) -> str:
    """The prompt-invariance table, then its figures per meme and the memes most sensitive to wording."""
    return prompt_table(entry, "html") + "".join(f"<p>{html.escape(line)}</p>" for line in prompt_summary(entry))


def to_html(report: dict) -> str:
    meta = (f"seed {report['seed']}; " + "; ".join(f"{name}: {info['n']} memes, fingerprint {info['fingerprint'][:12]}"
                                                   for name, info in report["datasets"].items())
            + "; " + "; ".join(f"{m}: checkpoint {info['checkpoint_sha256'][:12]}" for m, info in report["models"].items())
            + "; " + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v))
    sections = []
    for group in report["groups"]:
        tables = render({**report, "groups": [group], "reliance": [], "prompt_invariance": [], "budgets": []},
                        "html",
                        heading=lambda t: f"<h3>{html.escape(t.split(': ', 1)[-1] if group.get('suite') else t)}</h3>")
        sections.append(f"<h2>{html.escape(group_title(group))}</h2>{tables}{_heatmap(group)}{_bars(group)}"
                        f"{_worst(group)}")
    if report.get("reliance"):
        sections.append(f"<h2>modality reliance: which channel decides</h2>{reliance_table(report['reliance'], 'html')}")
    for entry in report.get("budgets", []):
        sections.append(f"<h2>{html.escape(budget_title(entry))}</h2>{budget_table(entry['entries'], 'html')}"
                        f"{_budget_worst(entry)}")
    for entry in report.get("prompt_invariance", []):
        sections.append(f"<h2>prompt invariance: {html.escape(entry['model'])} on {html.escape(entry['dataset'])} "
                        f"(n={entry['n']})</h2>" + _prompt_html(entry))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Robustness report</title>"
            f"<style>{_STYLE}</style></head><body><h1>Robustness report</h1><p class='meta'>{html.escape(meta)}</p>"
            + "".join(sections) + "</body></html>\n")
