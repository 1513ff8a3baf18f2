"""A leaderboard as Markdown, HTML and a plot: judge/leaderboard.py's ranking rendered, nothing decided here."""
from __future__ import annotations

import base64
import html
import io

HEADLINE = ("clean accuracy", "clean auroc", "clean macro_f1", "average drop", "dropping rate", "robust accuracy")
TITLES = {"clean accuracy": "clean acc.", "clean auroc": "clean AUROC", "clean macro_f1": "clean F1",
          "average drop": "avg. drop (acc.)", "dropping rate": "dropping rate", "robust accuracy": "acc. under attack"}


def figure_text(figure: dict | None, percent: bool = False) -> str:
    """`0.712 [0.671, 0.750]`; a dash where the figure does not exist (no attacks in the protocol)."""
    if not figure:
        return "–"
    scale = 100.0 if percent else 1.0
    fmt = "{:.1f}%" if percent else "{:.3f}"
    return (fmt.format(figure["value"] * scale) + " [" + fmt.format(figure["low"] * scale) + ", "
            + fmt.format(figure["high"] * scale) + "]")


def headline_rows(board: dict) -> list[list[str]]:
    rows = []
    for rank, (entry, letters) in enumerate(zip(board["entries"], board["letters"]), start=1):
        rows.append([str(rank), entry.name, letters, str(entry.seeds)]
                    + [figure_text(entry.figures.get(k), k == "dropping rate") for k in HEADLINE])
    return rows


def headline_headers(board: dict) -> list[str]:
    attacks = next((e.figures["robust accuracy"].get("attacks") for e in board["entries"]
                    if "robust accuracy" in e.figures), None)
    titles = [TITLES[k] + (f" (worst of {attacks})" if k == "robust accuracy" and attacks else "") for k in HEADLINE]
    return ["rank", "detector", "group", "seeds", *titles]


def family_names(board: dict) -> list[str]:
    names = {k[: -len(" drop")] for e in board["entries"] for k in e.figures if k.endswith(" drop")
             and k != "average drop"}
    return sorted(names)


def family_rows(board: dict) -> list[list[str]]:
    """Per perturbation family, each entry's mean drop of accuracy and its dropping rate."""
    rows = []
    for family in family_names(board):
        row = [family]
        for e in board["entries"]:
            drop, rate = e.figures.get(f"{family} drop"), e.figures.get(f"{family} dropping rate")
            row.append(f"{drop['value']:+.3f} ({rate['value']:.1%})" if drop and rate else "–")
        rows.append(row)
    return rows


def protocol_line(board: dict, fingerprint: str, facts: dict) -> str:
    conditions = sum(len(v) for v in facts.get("conditions", {}).values())
    return (f"protocol {fingerprint}: {board['dataset']}, {board['memes']} memes, {conditions} conditions, seed "
            f"{facts.get('seed')}, limit {facts.get('limit')}")


def method_line(board: dict) -> str:
    return (f"Ranked by the average drop of accuracy over every perturbed condition (least first). Intervals: "
            f"{board['resamples']:,} paired bootstrap resamples of the memes (a recipe's widened by its seeds' "
            f"spread). Detectors sharing a letter do not differ in the average drop beyond noise (every pair "
            f"two-sided, family-wise error {board['alpha']:.0%} by max-T).")


def markdown(board: dict, fingerprint: str, facts: dict, plot: str | None = None) -> str:
    from .markdown import table

    entries = [e.name for e in board["entries"]]
    out = ["# Robustness leaderboard", "", protocol_line(board, fingerprint, facts), "",
           table(headline_headers(board), headline_rows(board)), "", method_line(board), "",
           "## Each family: mean drop of accuracy (dropping rate)", "",
           table(["family", *entries], family_rows(board)), ""]
    differ = [p for p in board["pairs"] if p["differ"]]
    out += ["## Pairs that differ beyond noise", ""]
    out += [f"- {p['a']} loses {abs(p['difference']):.3f} {'less' if p['difference'] < 0 else 'more'} than {p['b']} "
            f"(adjusted p {p['p']:.2g})" for p in differ] or ["- none"]
    if plot:
        out += ["", f"![average drop with its interval]({plot})"]
    return "\n".join(out) + "\n"


def html_page(board: dict, fingerprint: str, facts: dict, png: bytes | None = None) -> str:
    def rows_html(headers, rows):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    entries = [e.name for e in board["entries"]]
    image = (f'<img alt="average drop with its interval" src="data:image/png;base64,'
             f'{base64.b64encode(png).decode()}">' if png else "")
    style = ("body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;"
             "margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right;white-space:nowrap}td:nth-child(2),"
             "th:nth-child(2){text-align:left}th{background:#f3f3f3}p.note{color:#555;max-width:60em}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Robustness leaderboard</title>"
            f"<style>{style}</style></head><body><h1>Robustness leaderboard</h1>"
            f"<p>{html.escape(protocol_line(board, fingerprint, facts))}</p>"
            f"{rows_html(headline_headers(board), headline_rows(board))}"
            f"<p class='note'>{html.escape(method_line(board))}</p>{image}"
            f"<h2>Each family: mean drop of accuracy (dropping rate)</h2>"
            f"{rows_html(['family', *entries], family_rows(board))}</body></html>\n")


def plot_png(board: dict) -> bytes:
    """A horizontal bar per entry: its average drop with the interval, the group letters beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = board["entries"]
    fig, ax = plt.subplots(figsize=(7, 0.6 * len(entries) + 1.4), dpi=110)
    for i, (e, letters) in enumerate(zip(entries, board["letters"])):
        f = e.figures.get("average drop")
        if not f:
            continue
        ax.barh(i, f["value"], color="#4c78a8")
        ax.errorbar(f["value"], i, xerr=[[f["value"] - f["low"]], [f["high"] - f["value"]]], color="black",
                    capsize=4)
        ax.text(f["high"], i, f"  {letters}", va="center")
    ax.set_yticks(range(len(entries)), [e.name for e in entries])
    ax.invert_yaxis()
    ax.set_xlabel("average drop of accuracy over the perturbed conditions (less is more robust)")
    ax.set_title(f"{board['dataset']}, {board['memes']} memes")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()
