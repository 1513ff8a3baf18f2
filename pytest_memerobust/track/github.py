"""What leaves a run for GitHub, where reviewers look: the gate's Markdown (report/ci.py) appended to the job summary
($GITHUB_STEP_SUMMARY) and one pull-request comment, updated in place on every push rather than one more each time.

The client is urllib: four kinds of request do not earn a dependency in every install. The token is read from
$GITHUB_TOKEN, sent only to the API's own origin (a redirect or a next page elsewhere is refused, as urllib would
carry the Authorization header there) and never printed: every message names the status and the URL, and is scrubbed
of the token in case a server echoed it."""
from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from ..errors import ConfigError, EndpointError

SUMMARY_ENV, TOKEN_ENV, API_ENV = "GITHUB_STEP_SUMMARY", "GITHUB_TOKEN", "GITHUB_API_URL"
DEFAULT_API = "https://api.github.com"
TIMEOUT_S = 30  # per request; a CI step should fail in seconds, not hang on a stalled API
PER_PAGE, MAX_PAGES = 100, 100  # comments listed per request; a PR with 10,000 comments is searched no further
REPLY_LIMIT = 32 << 20  # bytes read of one reply: a page of 100 comments of 65,536 characters fits
REPO = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
HINTS = {401: f"the token in ${TOKEN_ENV} was refused (expired, revoked or not a token)",
         403: "the token may not write to pull requests (the workflow needs `permissions: pull-requests: write`; "
              "a pull request from a fork gets a read-only token), or the API's rate limit was reached",
         404: "no such repository or pull request, or the token cannot see it"}


def summary_file(environ=None) -> Path | None:
    """The job summary file CI named ($GITHUB_STEP_SUMMARY), or None outside such a job."""
    value = (os.environ if environ is None else environ).get(SUMMARY_ENV, "").strip()
    return Path(value) if value else None


def append_summary(path: Path, text: str) -> None:
    """Append `text` as its own section: GitHub's convention is that a step appends to its summary file, never
    overwrites it (another tool, or an earlier run in the same step, wrote there first)."""
    path = Path(path)
    before = path.read_text(encoding="utf-8") if path.is_file() else ""
    gap = "" if not before or before.endswith("\n\n") else "\n" if before.endswith("\n") else "\n\n"
    with open(path, "a", encoding="utf-8") as out:
        out.write(gap + text)


def job_summary_lines(report) -> list[str]:
    """At the end of a run that writes reports: the reviewers' Markdown appended to $GITHUB_STEP_SUMMARY when it
    names a file; the line saying so, or a warning (a summary that cannot be written never fails the run).
    `report()`: the run's report dict, built once (run/outputs.py)."""
    path = summary_file()
    if path is None:
        return []
    try:
        from ..report.ci import ci_markdown

        append_summary(path, ci_markdown(report()))
    except Exception as exc:
        why = getattr(exc, "strerror", None) or f"{type(exc).__name__}: {exc}"
        return [f"memerobust: warning: could not append the job summary to {path} ({why})"]
    return [f"memerobust: job summary appended to {path} (${SUMMARY_ENV})"]


def run_link(environ=None) -> str | None:
    """The CI run's page (GitHub Actions' variables), for the comment to point at; None elsewhere."""
    env = os.environ if environ is None else environ
    server, repo, run = (env.get(k, "").strip() for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    return f"{server.rstrip('/')}/{repo}/actions/runs/{run}" if server and repo and run else None


def check_target(repo: str, pr) -> tuple[str, int]:
    """`OWNER/NAME` and a pull request's number, or a ConfigError saying what was expected."""
    if not REPO.fullmatch(repo or ""):
        raise ConfigError(f"--repo {repo!r}: expected OWNER/NAME, e.g. octo-org/meme-detector")
    try:
        number = int(pr)
    except (TypeError, ValueError):
        number = 0
    if number <= 0:
        raise ConfigError(f"--pr {pr!r}: expected the pull request's number, e.g. 42")
    return repo, number


class GitHub:
    """The REST API at `api` (GitHub's, or a GitHub Enterprise server's), as the holder of `token`."""

    def __init__(self, token: str, api: str = DEFAULT_API, timeout: float = TIMEOUT_S):
        if not token:
            raise ConfigError(f"no token in ${TOKEN_ENV}: set it to a token that may write pull-request comments "
                              f"(in GitHub Actions: `{TOKEN_ENV}: ${{{{ secrets.GITHUB_TOKEN }}}}` under the "
                              "step's env)")
        parts = urllib.parse.urlsplit(api)
        if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
            raise ConfigError(f"${API_ENV} {api!r}: expected the API's address, e.g. {DEFAULT_API}")
        self.token, self.api, self.timeout = token, api.rstrip("/"), timeout
        self.origin = (parts.scheme, parts.netloc.lower())
        self.opener = urllib.request.build_opener(_NoRedirects)

    def request(self, method: str, url: str, body: dict | None = None) -> tuple[object, dict]:
        """(the reply's JSON, its headers); an EndpointError naming the status and URL when it fails."""
        parts = urllib.parse.urlsplit(url)
        if (parts.scheme, parts.netloc.lower()) != self.origin:  # the token goes to the API's origin only
            raise EndpointError(f"{method} {self._clean(url)}: not on the API's origin {self.api}; not sent")
        headers = {"Accept": "application/vnd.github+json", "Authorization": f"Bearer {self.token}",
                   "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "pytest-memerobust"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        where = f"{method} {self._clean(url)}"
        try:
            with self.opener.open(urllib.request.Request(url, data, headers, method=method),
                                  timeout=self.timeout) as reply:
                raw, reply_headers = reply.read(REPLY_LIMIT + 1), dict(reply.headers)
        except urllib.error.HTTPError as exc:
            raise EndpointError(self._refused(where, exc)) from None
        except (urllib.error.URLError, OSError) as exc:
            why = getattr(exc, "reason", None) or exc
            raise EndpointError(self._clean(f"{where}: GitHub's API could not be reached ({why})")) from None
        if len(raw) > REPLY_LIMIT:
            raise EndpointError(f"{where}: the reply is over {REPLY_LIMIT >> 20} MiB")
        try:
            return (json.loads(raw) if raw.strip() else None), reply_headers
        except ValueError:
            raise EndpointError(f"{where}: the reply is not JSON ({self._clean(raw[:80].decode('utf-8', 'replace'))!r})"
                                ) from None

    def _refused(self, where: str, exc: urllib.error.HTTPError) -> str:
        try:
            message = json.loads(exc.read(64 << 10) or b"{}").get("message") or ""
        except (ValueError, AttributeError, OSError):
            message = ""
        finally:
            exc.close()
        if 300 <= exc.code < 400:
            target = urllib.parse.urlsplit(urllib.parse.urljoin(exc.url or "", exc.headers.get("Location") or ""))
            detail = f"a redirect to {target.scheme}://{target.netloc.rpartition('@')[2]}, not followed (it would " \
                     f"carry the token there); set ${API_ENV} to the address the API answers at"
        else:
            detail = "; ".join(filter(None, [" ".join(str(message).split())[:200], HINTS.get(exc.code, "")]))
        return self._clean(f"GitHub answered HTTP {exc.code} to {where}" + (f": {detail}" if detail else ""))

    def _clean(self, text) -> str:
        """`text` without the token, should a server or an address have echoed it."""
        return str(text).replace(self.token, "***") if self.token else str(text)

    def pages(self, url: str):
        """Each item of a listing, following the Link header's `next` page."""
        for _ in range(MAX_PAGES):
            items, headers = self.request("GET", url)
            if not isinstance(items, list):
                raise EndpointError(f"GET {self._clean(url)}: expected a list of comments, got "
                                    f"{type(items).__name__}")
            yield from items
            url = next_page(headers.get("Link") or headers.get("link") or "")
            if url is None:
                return


def next_page(link: str) -> str | None:
    """The `rel="next"` address of a Link header (RFC 8288, as GitHub paginates), or None on the last page."""
    for part in link.split(","):
        target, *params = part.split(";")
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "rel" and "next" in value.strip().strip('"').lower().split():
                return target.strip().strip("<>")
    return None


def upsert_comment(repo: str, pr: int, body: str, token: str, api: str = DEFAULT_API) -> tuple[str, dict]:
    """Update the pull request's comment that starts with the marker (`body`'s first line), or post one: ("updated"
    or "created", the comment as GitHub returned it). Only a comment that starts with the marker is this tool's: a
    reply that quotes it, or any other comment, is left alone."""
    marker = body.split("\n", 1)[0].strip()
    github = GitHub(token, api)
    base = f"{github.api}/repos/{repo}"
    found = next((c for c in github.pages(f"{base}/issues/{pr}/comments?per_page={PER_PAGE}")
                  if isinstance(c, dict) and str(c.get("body") or "").lstrip().startswith(marker)), None)
    if found is not None:
        comment, _ = github.request("PATCH", f"{base}/issues/comments/{int(found['id'])}", {"body": body})
        return "updated", comment if isinstance(comment, dict) else found
    comment, _ = github.request("POST", f"{base}/issues/{pr}/comments", {"body": body})
    return "created", comment if isinstance(comment, dict) else {}


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as the HTTP error it is (see the module's docstring)."""

    def redirect_request(self, *args, **kwargs):
        return None
