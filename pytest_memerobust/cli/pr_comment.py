"""`memerobust pr-comment`: the gate's verdict and comparison table of a saved JSON report as one pull-request
comment, updated in place on each run (found by its hidden marker), so a reviewer reads the latest verdict where
they review and the thread does not fill with one comment per push."""
from __future__ import annotations

import os
from pathlib import Path

from .ci_summary import _rendered


def add_parser(sub) -> None:
    p = sub.add_parser("pr-comment", help="post the verdict and the gate's table of a saved JSON report as a "
                       "pull-request comment, or update the one an earlier run posted (token: $GITHUB_TOKEN)")
    p.add_argument("json", help="the JSON report (--memerobust-report=FILE.json)")
    p.add_argument("--repo", default=os.environ.get("GITHUB_REPOSITORY") or None,
                   help="OWNER/NAME (default: $GITHUB_REPOSITORY)")
    p.add_argument("--pr", help="the pull request's number")
    p.add_argument("--dry-run", action="store_true", help="print the comment's body; send nothing")


def run(args) -> int:
    from ..report.ci import ci_markdown
    from ..track.baseline import read_report
    from ..track.github import API_ENV, DEFAULT_API, TOKEN_ENV, check_target, run_link, upsert_comment

    report = read_report(Path(args.json))
    body = _rendered(ci_markdown, report, args.json, comment=True, link=run_link(os.environ))
    if args.dry_run:
        print(body, end="")
        return 0
    repo, pr = check_target(args.repo, args.pr)
    done, comment = upsert_comment(repo, pr, body, os.environ.get(TOKEN_ENV, ""),
                                   os.environ.get(API_ENV) or DEFAULT_API)
    print(f"memerobust: {done} the comment on {repo}#{pr}" + (f": {comment['html_url']}"
                                                              if comment.get("html_url") else ""))
    return 0
