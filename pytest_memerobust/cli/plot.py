"""`memerobust plot`: write the figures of a saved JSON report as files: robustness curves, evasion curves of the
budgets, abstention shares."""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError


def add_parser(sub) -> None:
    plot = sub.add_parser("plot", help="write the figures of a saved JSON report as files: robustness curves, "
                          "evasion curves of the budgets, abstention shares")
    plot.add_argument("json", help="the report (.json, from --memerobust-report=FILE.json)")
    plot.add_argument("--out", required=True, metavar="DIR", help="folder for the figures (made if missing)")
    plot.add_argument("--format", choices=("png", "svg"), default="png", help="png (default) or svg")


def run(args) -> int:
    """Every figure of a saved JSON report (report/plots.py) written as a file; nothing written on bad input."""
    from ..track.baseline import read_report
    from ..report.plots import report_plots, write_plots

    path = Path(args.json)
    report = read_report(path)
    if report.get("partial"):
        raise ConfigError(f"{path} is a partial report ({report['partial']}): it holds the verdict and the cases' "
                          "records but no numbers to plot")
    try:
        plots = report_plots(report)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ConfigError(f"{path}: damaged pytest-memerobust report ({type(exc).__name__}: {exc})") from None
    if not plots:
        raise ConfigError(f"{path} has nothing to plot: no perturbation with severities, no evasion budgets and no "
                          "abstentions")
    try:
        written = write_plots(plots, Path(args.out), args.format)
    except OSError as exc:
        raise ConfigError(f"cannot write the figures to {args.out}: {exc.strerror or exc}") from None
    for out in written:
        print(out)
    return 0
