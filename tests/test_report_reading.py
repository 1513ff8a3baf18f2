"""The Markdown and HTML reports as a reviewer reads them: the recorded verdict first, contents whose links resolve,
suites most failing first, run details last; colours that follow the test verdict; signed accuracy changes; worst
examples one per meme with the caption edit spelled out; `memerobust report --html` re-rendering the page."""
import json
import re
from html.parser import HTMLParser

import pytest

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.report import to_markdown, write_report
from pytest_memerobust.report.gallery import caption_diff, code_point, distinct_memes
from pytest_memerobust.report.html import PALETTE, caption_pair, to_html
from pytest_memerobust.report.outline import cases_by_group, severity_order, signed
from verdict_sample import two_suite_report, with_verdict


@pytest.fixture(scope="module")
def plain():
    """A report without verdict keys (an older report), two suites, a grid, a look-alike caption edit."""
    return two_suite_report()


@pytest.fixture(scope="module")
def report(plain):
    return with_verdict(plain, baseline=True)


class Page(HTMLParser):
    """The ids and in-page links of an HTML page, in document order."""

    def __init__(self, page):
        super().__init__()
        self.ids, self.links = [], []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.append(attrs["id"])
        if tag == "a" and (attrs.get("href") or "").startswith("#"):
            self.links.append(attrs["href"][1:])


def test_the_html_opens_on_the_verdict_then_contents_suites_by_severity_and_details_last(report):
    page = to_html(report)
    parsed = Page(page)
    assert parsed.links and set(parsed.links) <= set(parsed.ids), set(parsed.links) - set(parsed.ids)
    assert len(parsed.ids) == len(set(parsed.ids))
    ids = parsed.ids
    assert ids.index("contents") < ids.index("verdict") < ids.index("failing") < ids.index("baseline")
    assert ids[-1] == "run-details"
    # the banner says FAIL with the recorded summary, before any table of numbers
    banner = page.index("class='banner v-sure'")
    assert "✗ FAIL" in page[banner:banner + 300] and report["verdict"]["summary"] in page
    assert banner < page.index("<table")
    # the versions come after every suite
    assert page.index("Run details and versions</h2>") > max(page.index(f"id='{a}'") for a in ids if a.startswith(
        ("mild", "harsh")))
    # suites most failing first: the harsh one (failing cases) before the mild one
    order = [g["suite"] for g, _ in severity_order(report)]
    failing = {g["suite"]: sum(c["outcome"] == "failed" for c in cases) for g, cases in severity_order(report)}
    assert failing["harsh"] > failing["mild"] and order.index("harsh") < order.index("mild")
    assert page.index("id='harsh-demo-on-demo'") < page.index("id='mild-demo-on-demo'")


def test_the_failing_cases_show_each_violation_with_value_limit_and_interval(report):
    page = to_html(report)
    section = page[page.index("id='failing'"):page.index("id='baseline'")]
    for nodeid in report["verdict"]["failing"]:
        case = next(c for c in report["cases"] if c["nodeid"] == nodeid)
        assert f"{nodeid.rpartition('::')[2]}<br>{nodeid.rpartition('::')[0]}::" in re.sub(r"<(?!br>)[^>]+>", "",
                                                                                              section)
        sure = [v for v in case["violations"] if v["sure"]]
        for v in sure:
            lo, hi = v["ci"]
            assert f"{v['value']:.3f}".replace("-", "−") in section
            assert f"{lo:.3f} .. {hi:.3f}".replace("-", "−") in section
    assert "≥ 0.900" in section or "≤ 0.100" in section
    assert "regressed against the baseline" in section  # the sample's regressed case


def test_colours_follow_the_verdict_with_a_legend(report):
    page = to_html(report)
    group = next(g for g in report["groups"] if g["suite"] == "harsh")
    cases = cases_by_group(report)[report["groups"].index(group)]
    section = page[page.index("id='harsh-demo-on-demo'"):]
    bars = section[section.index("Relative robustness of accuracy"):]
    bars = bars[:bars.index("</svg>")]
    fills = re.findall(r'<rect x="[^"]+" y="[^"]+" width="[^"]+" height="12" fill="([^"]+)"', bars)
    rows = [r for r in group["results"] if r["kind"] in ("text", "image")]
    expected = [PALETTE[next(c["verdict"] for c in cases if c["condition"] == r["condition"])][0] for r in rows]
    assert fills == expected and len(set(fills)) >= 1
    legend = section[section.index("Colour = the case's test verdict"):]
    legend = legend[:legend.index("</div>")]
    for mark, verdict in (("✗", "fail for sure"), ("~", "fail within noise"), ("✓", "pass"), ("–", "skipped")):
        strong, light = PALETTE[verdict]
        assert f"{mark} {verdict}</span>" in legend and f"color:{strong};background:{light}" in page


def test_the_heat_map_shows_signed_changes_perturbed_minus_clean(report):
    page = to_html(report)
    group = next(g for g in report["groups"] if g["suite"] == "harsh")
    cell = next(r for r in group["results"] if r["kind"] == "combined")
    change = cell["metrics"]["accuracy"] - group["clean"]["metrics"]["accuracy"]
    assert signed(change) in page and (change >= 0 or signed(change).startswith("−"))
    assert "shown as perturbed − clean accuracy" in page
    heat = page[page.index("Accuracy drop from clean"):]
    heat = heat[:heat.index("</svg>")]
    assert not re.search(r">\+0\.\d{3}<", heat) or change > 0  # a drop is never printed with a plus


def test_worst_examples_are_distinct_memes_with_the_edit_and_code_points_shown(report):
    page = to_html(report)
    group = next(g for g in report["groups"] if g["suite"] == "harsh")
    ids = [e["id"] for e in group["worst_examples"]]
    section = page[page.index("id='harsh-demo-on-demo'"):]
    section = section[:section.index("</section>")]
    assert section.count("<div class='example'>") == len(set(ids))
    assert section.count('src="data:image/png;base64,') == len({e["id"] for e in group["worst_examples"]
                                                                 if e.get("thumbnail")})
    # the look-alike letters carry their code points and names; the zero-width space is shown too
    assert 'title="U+043E CYRILLIC SMALL LETTER O"' in section and "<sub>U+0430</sub>" in section
    assert "<sub>U+200B</sub>" in section
    assert "<ins>" in section and "<del>" in section
    assert '"DejaVu Sans"' in page


def test_caption_diff_marks_what_the_edit_removed_and_put_in():
    assert caption_diff("cat", "cot") == [("same", "c", "c"), ("replace", "a", "o"), ("same", "t", "t")]
    before, after = caption_pair("a dog", "a d\u043eg")
    assert before == "a d<del>o</del>g"
    assert after.startswith('a d<ins><span class="cp" title="U+043E CYRILLIC SMALL LETTER O">о<sub>U+043E</sub>')
    assert code_point("\u200b") == "U+200B ZERO WIDTH SPACE"
    assert code_point("\u0301") == "U+0301 COMBINING ACUTE ACCENT"
    # html in a caption stays text
    assert caption_pair("<b>", "<i>") == ("&lt;<del>b</del>&gt;", "&lt;<ins>i</ins>&gt;")


def test_distinct_memes_keep_the_worst_condition_per_meme():
    examples = [{"id": "a", "condition": "x", "p_true_clean": 0.9, "p_true_perturbed": 0.5},
                {"id": "b", "condition": "x", "p_true_clean": 0.9, "p_true_perturbed": 0.4},
                {"id": "a", "condition": "y", "p_true_clean": 0.9, "p_true_perturbed": 0.1}]
    out = distinct_memes(examples)
    assert [(e["id"], e["condition"], e["also"]) for e in out] == [("a", "y", ["x"]), ("b", "x", [])]


def test_a_report_without_a_verdict_says_so_and_still_renders(plain):
    page = to_html(plain)
    assert "no verdict recorded" in page and "FAIL" not in page.split("<main>")[1][:2000]
    parsed = Page(page)
    assert set(parsed.links) <= set(parsed.ids)
    md = to_markdown(plain)
    assert "no verdict recorded" in md and "## Contents" in md
    # the heat map keeps a red tint by the size of the drop when no verdict is recorded
    assert "rgb(255," in page


def test_a_passing_run_opens_on_pass(plain):
    passing = with_verdict(plain, floor=0.0, ceiling=1.0)
    assert passing["verdict"]["passed"]
    page = to_html(passing)
    assert "class='banner v-pass'" in page and "✓ PASS" in page
    assert "No case failed the run." in page
    assert to_markdown(passing).split("## Verdict")[0].count("**✓ PASS**") == 1


def test_the_markdown_opens_on_the_verdict_with_contents_whose_links_resolve(report):
    md = to_markdown(report)
    assert md.startswith("# Robustness report")
    verdict, contents = md.index("**✗ FAIL**"), md.index("## Contents")
    first_suite = md.index("## harsh: demo on demo")
    assert verdict < md.index("### Failing cases") < contents < first_suite < md.index("## mild: demo on demo")
    assert md.index("## Run details and versions") > md.index("## mild: demo on demo")
    assert md.index("## Baseline comparison") < first_suite
    links = re.findall(r"\]\(#([^)]+)\)", md)
    anchors = re.findall(r'<a id="([^"]+)"></a>', md)
    assert links and set(links) <= set(anchors) and len(anchors) == len(set(anchors))
    # every failing case with the value, limit and interval of the violations that fail it
    for nodeid in report["verdict"]["failing"]:
        case = next(c for c in report["cases"] if c["nodeid"] == nodeid)
        row = next(line for line in md.splitlines() if f"**{nodeid.rpartition('::')[2]}**" in line)
        v = next((v for v in case["violations"] if v["sure"]), None)
        if v is None:  # failing by its regression against the baseline only
            lines = md.split(row + "\n", 1)[1].splitlines()
            block = [row, *(line for line in lines[:next(k for k, x in enumerate(lines) if not x.startswith("|  |"))])]
            assert any("regressed against the baseline" in line for line in block)
            continue
        lo, hi = v["ci"]
        assert f"{v['value']:.3f} |" in row and f"{v['limit']:.3f} |" in row and f"{lo:.3f} .. {hi:.3f}" in row
    # worst examples: the edit marked, the look-alikes with their code points, the table kept to one line a row
    assert "d<ins>о<sub>U+043E</sub></ins>g" in md and "<sub>U+200B</sub>" in md
    assert "demo-lookalike" in md
    # every pipe table keeps one column count on every row (captions and messages escaped)
    for block in re.split(r"\n(?!\|)", md):
        rows = [line for line in block.splitlines() if line.startswith("|")]
        assert len({len(re.findall(r"(?<!\\)\|", row)) for row in rows}) <= 1, block[:300]


def test_memerobust_report_re_renders_the_html_page_from_the_json(report, tmp_path, capsys):
    path = tmp_path / "r.json"
    write_report(path, report)
    assert cli_main(["report", str(path), "--html", "-o", str(tmp_path / "page.html")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("FAIL: " + report["verdict"]["summary"]) and "memerobust: wrote" in out
    assert (tmp_path / "page.html").read_text() == to_html(json.loads(path.read_text()))
    assert cli_main(["report", str(path), "--html"]) == 0  # beside the JSON by default
    assert (tmp_path / "r.html").read_text() == (tmp_path / "page.html").read_text()
    assert cli_main(["report", str(path), "-o", str(tmp_path / "page.md")]) == 0
    page = (tmp_path / "page.md").read_text()  # the text, with the figures as PNGs beside it
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page)
    assert links and all((tmp_path / link).is_file() for link in links) and "## Figures" in page
    assert page.split("## Contents")[0] == to_markdown(json.loads(path.read_text())).split("## Contents")[0]
    assert cli_main(["report", str(path), "--html", "-o", str(tmp_path / "page.md")]) == 2
    assert "--html writes .html" in capsys.readouterr().err


def test_memerobust_report_on_an_older_report_says_no_verdict_was_recorded(plain, tmp_path, capsys):
    path = tmp_path / "old.json"
    write_report(path, plain)
    assert cli_main(["report", str(path), "--html"]) == 0
    assert capsys.readouterr().out.startswith("no verdict recorded")
    assert "no verdict recorded" in (tmp_path / "old.html").read_text()
