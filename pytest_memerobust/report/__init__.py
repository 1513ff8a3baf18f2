"""Reports read results and never change them: a JSON with every number, Markdown and terminal tables."""
from __future__ import annotations

import json
from pathlib import Path

from ..atomic import atomic_write_text
from .tables import render  # noqa: F401  (re-exported: the terminal and `memerobust report` render with it)

REPORT_SUFFIXES = (".json", ".md", ".html")
REPORT_FORMAT = 1  # the JSON report's layout; `memerobust report` reads this one only


def to_markdown(report: dict) -> str:
    """The report as Markdown for a reviewer: the recorded verdict first, then the contents, the suites most failing
    first, the run's details and versions last (report/markdown.py)."""
    from .markdown import markdown

    return markdown(report)


def figures_folder(markdown_path: Path) -> Path:
    """Where a Markdown report's figures go: `r.md` -> `r.figures/` beside it."""
    return markdown_path.with_name(markdown_path.stem + ".figures")


def write_markdown_figures(path: Path, report: dict) -> list[tuple]:
    """The report's figures (report/plots.py) as PNG files in `figures_folder(path)`, for the Markdown to link;
    an earlier report's PNGs there are removed first, so the folder never shows another run's figures."""
    from .plots import report_plots, write_plots

    folder = figures_folder(path)
    if folder.is_dir():
        for old in folder.glob("*.png"):
            old.unlink()
    plots = report_plots(report)
    if not plots:
        return []
    written = write_plots(plots, folder, "png")
    return [(plot, f"{folder.name}/{file.name}") for plot, file in zip(plots, written)]


def write_report(path: Path, report: dict) -> None:
    path = Path(path)
    if path.suffix == ".json":
        atomic_write_text(path, json.dumps(report, indent=2, allow_nan=True) + "\n")
    elif path.suffix == ".md":
        from .markdown import markdown

        figures = write_markdown_figures(path, report)
        atomic_write_text(path, markdown(report, figures))
    elif path.suffix == ".html":
        from .html import to_html

        atomic_write_text(path, to_html(report))
    else:
        raise ValueError(f"unsupported report format {path.suffix!r} for {path}; use one of {REPORT_SUFFIXES}")


__all__ = ["build_report", "render", "to_markdown", "verdict_report", "versions", "write_report",
           "atomic_write_text", "REPORT_SUFFIXES"]
