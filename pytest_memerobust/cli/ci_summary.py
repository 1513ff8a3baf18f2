"""`memerobust ci-summary`: the gate's verdict and comparison table of a saved JSON report as Markdown for a CI job
summary, so any CI (or a later job that only downloads the report) shows reviewers what a pytest run shows."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError


def add_parser(sub) -> None:
    p = sub.add_parser("ci-summary", help="append the verdict and the gate's table of a saved JSON report, as "
                       "Markdown, to the CI job summary ($GITHUB_STEP_SUMMARY), or print it")
    p.add_argument("json", help="the JSON report (--memerobust-report=FILE.json)")
    p.add_argument("--out", help="append to this file (default: $GITHUB_STEP_SUMMARY when set, else print)")


def run(args) -> int:
    from ..report.ci import ci_markdown
    from ..track.baseline import read_report
    from ..track.github import SUMMARY_ENV, append_summary, summary_file

    report = read_report(Path(args.json))
    text = _rendered(ci_markdown, report, args.json)
    out = Path(args.out) if args.out else summary_file(os.environ)
    if out is None:
        print(text, end="")
        return 0
    try:
        append_summary(out, text)
    except OSError as exc:
        raise ConfigError(f"cannot append to {out}: {exc.strerror or exc}") from None
    print(f"memerobust: summary appended to {out}" + ("" if args.out else f" (${SUMMARY_ENV})"))
    return 0


def _rendered(render, report: dict, path, **kwargs) -> str:
    """`render(report)`, or a ConfigError naming a report whose verdict is not shaped as this version writes it."""
    try:
        return render(report, **kwargs)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ConfigError(f"{path}: damaged pytest-memerobust report ({type(exc).__name__}: {exc})") from None
