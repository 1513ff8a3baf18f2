"""Where reviewers look: the gate's verdict and comparison table as the CI job summary (appended by a run that writes
reports, or by `memerobust ci-summary`) and as one pull-request comment updated in place (`memerobust pr-comment`,
against a fake GitHub API on this machine's loopback, the only address tests/conftest.py lets through)."""
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch  # noqa: F401  (imported once, before pytester runs: see tests/test_plugin.py)

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.errors import EndpointError
from pytest_memerobust.report import REPORT_FORMAT
from pytest_memerobust.report.ci import MARKER, ci_markdown
from pytest_memerobust.track.github import job_summary_lines, next_page, upsert_comment
from test_gate import SUITE  # the gate's suite: typos at 2 and 5, contrast at 3
from test_gate_improved import QUICK, worse_typos_better_contrast  # 60 memes, few resamples

TOKEN = "ghs_secret-token-0123456789"


def test_a_gated_run_appends_its_table_to_the_job_summary_after_the_ungated_one(pytester, tmp_path, monkeypatch):
    """The baseline's run (not gated) and the gated run each append a section, never overwrite; the gated one holds
    the gate's rows as the run recorded them: contrast@3 regressed (made better in the baseline), typos@5 improved."""
    summary = tmp_path / "step-summary.md"
    summary.write_text("Written by an earlier step.\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makefile(".toml", **{"memerobust-gate": SUITE})
    base, report = tmp_path / "base.json", tmp_path / "r.json"
    first = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-save-baseline={base}",
                               f"--memerobust-report={tmp_path / 'base-report.json'}", ".")
    assert first.ret == 0 and f"memerobust: job summary appended to {summary}" in first.stdout.str()
    worse_typos_better_contrast(base)
    gated = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-baseline={base}",
                               "--memerobust-gate=regressions", f"--memerobust-report={report}", ".")
    assert gated.ret == 1

    text = summary.read_text()
    assert text.startswith("Written by an earlier step.\n\n")
    assert text.count("### ") == 2 and MARKER not in text  # two sections; the marker is the comment's
    ungated, _, rest = text.partition("### ✗ Robustness gate: FAIL")
    assert "### ✓ Robustness: PASS (not gated)" in ungated and "Not gated against a baseline" in ungated
    assert re.search(r"^\| \*\*REGRESSED\*\* \| contrast@3 \| acc \| 1\.000 → 0\.\d{3} \| −0\.\d{3} \| −0\.\d{3} \| "
                     r"[\d.e-]+ \|$", rest, re.M), rest
    assert re.search(r"^\| \*\*IMPROVED\*\* \| typos@5 \| acc \| 0\.000 → 0\.\d{3} \| \+0\.\d{3} \|", rest, re.M)
    assert re.search(r"^\| ok \| clean \| acc \| ", rest, re.M)
    assert "<b>Regressed (2 rules)</b>" in rest and "- `contrast@3 accuracy 1.000 -> " in rest
    assert "<b>Improved (" in rest and "- `typos@5 accuracy 0.000 -> " in rest
    assert "**Failing (1)** in `memerobust-gate.toml`: `demo::contrast-3`" in rest  # the failing case
    # the report it rendered from says the same: the summary adds nothing and decides nothing
    saved = json.loads(report.read_text())
    assert ci_markdown(saved) == "### ✗ Robustness gate: FAIL" + rest
    assert cli_main(["ci-summary", str(report)]) == 0  # appended again, from the saved report
    assert summary.read_text() == text + "\n" + "### ✗ Robustness gate: FAIL" + rest


def _report(passed: bool = True, baseline: dict | None = None) -> dict:
    """A small report as the plugin writes one (enough for the renderers)."""
    return {"tool": "pytest-memerobust", "format": REPORT_FORMAT, "seed": 0, "groups": [], "cases": [],
            "datasets": {"demo": {"n": 60}}, "models": {"demo": {}}, "versions": {"pytest-memerobust": "9.9"},
            "verdict": {"passed": passed, "gate": "regressions" if baseline else "thresholds",
                        "summary": "demo: 1 of 4 cases below their thresholds", "failing": [] if passed else ["x::y"],
                        "models": [{"model": "demo", "cases": 4, "pass": 3, "fail for sure": 1, "failed": 1}],
                        "baseline": baseline}}


def test_an_ungated_report_says_so_and_its_thresholds_verdict(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_report(passed=False)))
    assert cli_main(["ci-summary", str(path)]) == 0  # no summary file named: printed
    out = capsys.readouterr().out
    assert out.startswith("### ✗ Robustness: FAIL (not gated)\n") and "Not gated against a baseline" in out
    assert "demo: 1 of 4 cases below their thresholds" in out and "**Failing (1)** in `x`: `y`" in out
    assert "| verdict |" not in out and len(out) < 1200
    assert cli_main(["ci-summary", str(path), "--out", str(tmp_path / "s.md")]) == 0
    assert cli_main(["ci-summary", str(path), "--out", str(tmp_path / "s.md")]) == 0
    assert (tmp_path / "s.md").read_text().count("### ✗ Robustness: FAIL") == 2


def test_a_summary_that_cannot_be_written_warns_and_the_run_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "no-such-folder" / "summary.md"))
    (line,) = job_summary_lines(lambda: _report())
    assert line.startswith("memerobust: warning: could not append the job summary to ") and "No such file" in line

    def broken():
        raise KeyError("verdict")

    (line,) = job_summary_lines(broken)
    assert line.startswith("memerobust: warning: could not append the job summary")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", "")
    assert job_summary_lines(lambda: _report()) == []  # not in such a CI job: nothing, not a line


def test_a_long_comparison_is_cut_to_what_a_comment_holds():
    rows = [{"model": "demo", "dataset": "demo", "condition": f"text=typos@{k}", "rule": "acc", "what": "accuracy",
             "before": 0.9, "now": 0.8, "difference": -0.1, "bound": -0.05, "p_value": 0.01, "regressed": True}
            for k in range(3000)]
    body = ci_markdown(_report(False, {"path": "b.json", "summary": "3000 of 3000 conditions regressed",
                                       "rows": rows}), comment=True)
    assert body.startswith(MARKER + "\n") and len(body) < 65_536
    assert "(25 of 3000 compared; all in the JSON report)" in body
    assert "... and 2988 more (every comparison is in the JSON)" in body


class FakeGitHub(BaseHTTPRequestHandler):
    """Issue comments of pull request 7 of o/r, two per page, behind TOKEN; every request is recorded."""

    comments: list[dict] = []
    requests: list[tuple[str, str]] = []

    def log_message(self, *args):
        pass

    def _reply(self, status: int, body, headers=()):
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(raw)

    def _handle(self, method: str):
        self.requests.append((method, self.path))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._reply(401, {"message": "Bad credentials"})
        url = urllib.parse.urlsplit(self.path)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if method == "GET" and url.path == "/repos/o/r/issues/7/comments":
            page = int(urllib.parse.parse_qs(url.query).get("page", ["1"])[0])
            shown = self.comments[2 * (page - 1):2 * page]
            more = len(self.comments) > 2 * page
            link = f'<http://{self.headers["Host"]}{url.path}?per_page=2&page={page + 1}>; rel="next"'
            return self._reply(200, shown, [("Link", link)] if more else [])
        if method == "POST" and url.path == "/repos/o/r/issues/7/comments":
            comment = {"id": 1000 + len(self.comments), "body": body["body"],
                       "html_url": f"https://github.example/o/r/pull/7#issuecomment-{1000 + len(self.comments)}"}
            self.comments.append(comment)
            return self._reply(201, comment)
        match = re.fullmatch(r"/repos/o/r/issues/comments/(\d+)", url.path)
        if method == "PATCH" and match:
            comment = next(c for c in self.comments if c["id"] == int(match.group(1)))
            comment["body"] = body["body"]
            return self._reply(200, comment)
        return self._reply(404, {"message": "Not Found"})

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PATCH(self):
        self._handle("PATCH")


@pytest.fixture
def github(monkeypatch):
    """The fake API's address, with three comments already there (one quoting ours, not ours); no proxy between."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    FakeGitHub.comments = [{"id": 1, "body": "LGTM"}, {"id": 2, "body": f"> {MARKER}\n> ### Robustness gate: FAIL\n"
                                                                         "why did this regress?"},
                           {"id": 3, "body": "rebased"}]
    FakeGitHub.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGitHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_the_comment_is_posted_once_then_updated_in_place(github, tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_report(passed=False)))
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", github)
    monkeypatch.delenv("GITHUB_RUN_ID", raising=False)
    args = ["pr-comment", str(path), "--repo", "o/r", "--pr", "7"]
    assert cli_main(args) == 0
    assert "memerobust: created the comment on o/r#7: https://github.example/o/r/pull/7#issuecomment-1003" in \
        capsys.readouterr().out
    assert [m for m, _ in FakeGitHub.requests] == ["GET", "GET", "POST"]  # both pages searched first
    assert FakeGitHub.requests[1][1] == "/repos/o/r/issues/7/comments?per_page=2&page=2"
    ours = FakeGitHub.comments[-1]
    assert ours["body"].startswith(MARKER + "\n\n### ✗ Robustness: FAIL") and TOKEN not in ours["body"]

    path.write_text(json.dumps(_report(passed=True)))  # the next push passes
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.example")
    monkeypatch.setenv("GITHUB_REPOSITORY", "o/r")
    monkeypatch.setenv("GITHUB_RUN_ID", "42")
    FakeGitHub.requests = []
    assert cli_main(["pr-comment", str(path), "--pr", "7"]) == 0  # --repo from $GITHUB_REPOSITORY
    assert "memerobust: updated the comment on o/r#7" in capsys.readouterr().out
    assert [m for m, _ in FakeGitHub.requests] == ["GET", "GET", "PATCH"]  # found on the second page
    assert FakeGitHub.requests[-1][1] == f"/repos/o/r/issues/comments/{ours['id']}"
    assert len(FakeGitHub.comments) == 4 and FakeGitHub.comments[-1] is ours
    assert ours["body"].startswith(MARKER + "\n\n### ✓ Robustness: PASS")
    assert "[the CI run](https://github.example/o/r/actions/runs/42)" in ours["body"]
    assert [c["body"] for c in FakeGitHub.comments[:3]] == ["LGTM", f"> {MARKER}\n> ### Robustness gate: FAIL\n"
                                                            "why did this regress?", "rebased"]  # left alone


def test_a_refused_token_is_one_clear_line_without_the_token(github, tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_report()))
    monkeypatch.setenv("GITHUB_API_URL", github)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN + "-revoked")
    assert cli_main(["pr-comment", str(path), "--repo", "o/r", "--pr", "7"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line == (f"memerobust: error: GitHub answered HTTP 401 to GET {github}/repos/o/r/issues/7/comments"
                    "?per_page=100: Bad credentials; the token in $GITHUB_TOKEN was refused (expired, revoked or not a "
                    "token)")
    assert TOKEN not in captured.out + captured.err and FakeGitHub.comments[-1]["id"] == 3  # nothing posted
    monkeypatch.delenv("GITHUB_TOKEN")
    assert cli_main(["pr-comment", str(path), "--repo", "o/r", "--pr", "7"]) == 2
    assert "no token in $GITHUB_TOKEN" in capsys.readouterr().err and len(FakeGitHub.requests) == 1
    assert cli_main(["pr-comment", str(path), "--dry-run"]) == 0  # no token needed to see the body
    assert capsys.readouterr().out.startswith(MARKER + "\n")
    assert cli_main(["pr-comment", str(path), "--repo", "o", "--pr", "7"]) == 2
    assert "expected OWNER/NAME" in capsys.readouterr().err


def test_the_token_never_follows_a_page_to_another_origin(github):
    FakeGitHub.comments = []
    with pytest.raises(EndpointError, match="not on the API's origin"):
        from pytest_memerobust.track.github import GitHub

        GitHub(TOKEN, github).request("GET", "http://127.0.0.2:9/elsewhere")
    assert upsert_comment("o/r", 7, MARKER + "\nhi", TOKEN, github)[0] == "created"


@pytest.mark.parametrize("link, page", [
    ('<https://api.github.com/r?page=2>; rel="next", <https://api.github.com/r?page=5>; rel="last"',
     "https://api.github.com/r?page=2"),
    ('<https://api.github.com/r?page=1>; rel="prev", <https://api.github.com/r?page=1>; rel="first"', None),
    ("", None)])
def test_next_page_reads_the_link_header(link, page):
    assert next_page(link) == page
