"""`memerobust report`: print the verdict and tables of a saved JSON report; re-render its Markdown or HTML page."""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError


def add_parser(sub) -> None:
    report = sub.add_parser("report", help="print the verdict and tables of a saved JSON report; re-render its "
                            "Markdown or HTML page")
    report.add_argument("json")
    report.add_argument("--md", help="also write the Markdown report to this .md file")
    report.add_argument("--html", action="store_true", help="also write the HTML report (to -o, default: the JSON's "
                        "name with .html, beside it)")
    report.add_argument("-o", "--out", help="where to write the page (.html, or .md); with --html, an .html file")


def run(args) -> int:
    from ..report import render, write_report
    from ..track.baseline import read_report
    from ..report.outline import verdict_lines

    path = Path(args.json)
    report = read_report(path)
    outputs = [Path(args.md)] if args.md else []
    if args.html or args.out:
        out = Path(args.out) if args.out else path.with_suffix(".html")
        wanted = (".html",) if args.html else (".html", ".md")
        if out.suffix not in wanted:
            raise ConfigError(f"-o {out}: {'--html writes' if args.html else 'the format follows the suffix:'} "
                              f"{' or '.join(wanted)}")
        outputs.append(out)
    damaged = (KeyError, TypeError, ValueError, IndexError, AttributeError)
    try:
        text = "\n".join(verdict_lines(report)) + "\n\n" + render(report)
    except damaged as exc:
        raise ConfigError(f"{path}: damaged pytest-memerobust report ({type(exc).__name__}: {exc})") from None
    for out in outputs:
        try:
            write_report(out, report)
        except OSError as exc:
            raise ConfigError(f"cannot write {out}: {exc.strerror or exc}") from None
        except damaged as exc:
            raise ConfigError(f"{path}: damaged pytest-memerobust report ({type(exc).__name__}: {exc})") from None
    print(text)
    for out in outputs:
        print(f"memerobust: wrote {out}")
    return 0
