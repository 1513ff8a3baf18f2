"""The analyses registered beside the report's own sections (run/analysis_registry.py): each entry of the report's
`analyses` carries its record and a renderer-neutral table (title, headers, rows of text, notes), which this module
turns into the terminal's, Markdown's and HTML's table alike, so a new analysis needs no renderer of its own."""
from __future__ import annotations

from tabulate import tabulate


def analysis_title(entry: dict) -> str:
    """`evasion@k: memeblip2-tda on demo`: the table's title, for the model and data it measured."""
    return f"{entry['table']['title']}: {entry.get('label', entry['model'])} on {entry['dataset']}"


def analysis_table(entry: dict, tablefmt: str = "simple") -> str:
    table = entry["table"]
    return tabulate(table["rows"], headers=table["headers"], tablefmt=tablefmt, disable_numparse=True)


def analysis_notes(entry: dict) -> list[str]:
    return list(entry["table"].get("notes") or ())
