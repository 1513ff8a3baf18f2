"""The `memerobust` command: train a card's detector, list what is registered, re-render a saved report, compare and
merge saved baselines, show a report's verdict where reviewers look (CI job summary, pull-request comment)."""
from __future__ import annotations

import argparse
import sys

from ..data.loaders import OutsideFolder
from ..errors import MemeRobustError
from . import (augment, baseline, budgets, card, ci_summary, compare, export, history, leaderboard, listing, plot,
               pr_comment, preview, report, train)
from .common import OUTSIDE_PATHS, PIPE_CLOSED, Interrupted, signals_interrupt, silence_stdout

# Each subcommand's module: its add_parser(sub) and run(args) -> exit status, in the order `--help` lists them.
COMMANDS = {"train": train, "augment": augment, "list": listing, "report": report, "plot": plot, "history": history,
            "export": export, "preview": preview, "budgets": budgets, "compare": compare, "baseline": baseline,
            "leaderboard": leaderboard, "card": card, "ci-summary": ci_summary, "pr-comment": pr_comment}


def main(argv=None) -> int:
    from .. import __version__
    from ..openmp import sleep_idle_threads

    sleep_idle_threads()  # before any command imports torch (openmp.py)

    parser = argparse.ArgumentParser(prog="memerobust", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(sub)
    args = parser.parse_args(argv)
    try:
        with signals_interrupt():
            code = COMMANDS[args.command].run(args)
            sys.stdout.flush()  # a closed pipe (`| head`) is found here, not at exit
        return code
    except Interrupted as exc:
        what = ", nothing written" if args.command in ("export", "augment") else ""
        print(f"memerobust {args.command}: interrupted{what}", file=sys.stderr)
        return exc.code
    except BrokenPipeError:  # the reader left (`memerobust history | head`): stop quietly, as `cat` does
        silence_stdout()
        return PIPE_CLOSED
    except OutsideFolder as exc:  # said with this command's own switch, or none where it has none
        print(f"memerobust: error: {exc.naming(OUTSIDE_PATHS if hasattr(args, 'allow_outside_paths') else None)}",
              file=sys.stderr)
        return 2
    except MemeRobustError as exc:
        print(f"memerobust: error: {exc}", file=sys.stderr)
        return 2
