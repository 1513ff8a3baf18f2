"""The gate's improvement family: the same rules tested one-sided in the better direction, under the same error
control as a family of their own. What improved is listed with its bound; swapping the two checkpoints turns exactly
those into regressions; equal checkpoints list nothing improved; every artifact shows both lists."""
import json
import re

import numpy as np
import pytest
import torch  # noqa: F401  (imported once, before pytester runs: see tests/test_plugin.py)

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.judge.gate import ErrorControl, PairedCell, RegressionCheck, judge_family, summarize
from pytest_memerobust.report.gate_tables import change_line, change_lists
from pytest_memerobust.track.names import report_metrics
from test_cli_compare import _baseline  # 400 memes, right on every clean one, wrong on the given ones under typos@5
from test_gate import SUITE  # the gate's suite: typos at 2 and 5, contrast at 3
from test_gate_bounds import _binary  # probabilities that put 0.8 on the truth where right

NUMBER = r"([+-](?:\d+\.\d+|inf))"


def _hardened(rng, n: int):
    """A baseline and a hardened checkpoint on the same memes: the same clean answers (80% right); under typos@1
    both lose the same 30% of what they got right, under typos@2 and typos@3 the hardened one keeps all but 5%."""
    y = rng.integers(0, 2, n)
    clean_right = rng.random(n) < 0.8
    clean = _binary(y, clean_right)
    cells = [PairedCell("m", "d", "clean", "clean", {"y": y, "clean": clean, "perturbed": clean},
                        {"y": y, "clean": clean, "perturbed": clean})]
    for severity in (1, 2, 3):
        then_right = clean_right & (rng.random(n) >= 0.3)
        now_right = then_right if severity == 1 else clean_right & (rng.random(n) >= 0.05)
        cells.append(PairedCell("m", "d", f"typos@{severity}", "perturbed",
                                {"y": y, "clean": clean, "perturbed": _binary(y, now_right)},
                                {"y": y, "clean": clean, "perturbed": _binary(y, then_right)}))
    return cells


def _swapped(cells):
    return [PairedCell(c.model, c.dataset, c.condition, c.kind, c.then, c.now) for c in cells]


def _beyond(c, bound: float) -> bool:
    """Whether a bound on now - before lies past the improvement's margin, on the better side."""
    margin = c.procedure.improvement_margin
    return bound > margin if c.subject.higher_is_better else bound < -margin


@pytest.mark.parametrize("memes, method", [(300, "bootstrap"), (80, "permutation")])
def test_a_clearly_better_checkpoint_is_listed_improved_and_the_swap_lists_exactly_those_regressed(memes, method):
    cells = _hardened(np.random.default_rng(5), memes)
    better = judge_family(cells, n_resamples=1000, seed=1)
    assert {c.procedure.method for c in better} == {method}
    improved = {c.subject.condition for c in better if c.improvement.improved}
    assert improved == {"typos@2", "typos@3", "typos (mean of 3)"}  # the family mean is a member of the family
    assert not any(c.decision.regressed for c in better)
    for c in better:
        if c.improvement.improved:
            assert _beyond(c, c.improvement.bound) and c.improvement.p_value <= 0.05
            assert (c.difference > 0) == c.subject.higher_is_better  # accuracy, AUROC and F1 up; the flip rate down
    summary = summarize(better)
    assert summary["summary"].startswith("0 of 4 conditions and 0 of 1 family mean regressed")
    assert summary["improved_summary"].startswith("2 of 4 conditions and 1 of 1 family mean improved (clean did "
                                                  "not); family-wise error 5% over the same 19 rules")
    assert summary["improved"] == 3 and {r["condition"] for r in summary["improvements"]} == improved

    worse = judge_family(_swapped(cells), n_resamples=1000, seed=1)  # the mirror: the same procedure, other way
    assert {c.subject.condition for c in worse if c.decision.regressed} == improved
    assert not any(c.improvement.improved for c in worse)
    for b, w in zip(better, worse):
        assert (b.subject.condition, b.subject.rule) == (w.subject.condition, w.subject.rule)
        assert b.improvement.improved == w.decision.regressed
        if b.judged:
            assert b.improvement.p_raw == pytest.approx(w.decision.p_raw)
            assert b.improvement.p_value == pytest.approx(w.decision.p_value)
            assert b.improvement.bound == pytest.approx(-w.decision.bound)
            assert w.decision.p_value == pytest.approx(b.improvement.p_value)
            assert b.decision.p_value == pytest.approx(w.improvement.p_value)
            assert b.decision.bound == pytest.approx(-w.improvement.bound)


def test_a_rule_with_a_minimum_effect_counts_an_improvement_only_beyond_it():
    """`acc:30%`: a 20-point gain is no improvement beyond 30 points; the line names the margin."""
    cells = _hardened(np.random.default_rng(5), 300)
    (clean, *typos) = judge_family(cells, (RegressionCheck.parse("acc:30%"),), n_resamples=1000, family_means=False)
    assert not any(c.improvement.improved for c in typos) and typos[1].difference > 0.15
    assert ", margin 0.300, adjusted p" in change_line(typos[1].as_dict(), better=True)
    assert [c.improvement.improved for c in judge_family(cells, (RegressionCheck.parse("acc:5%"),), n_resamples=1000,
                                             family_means=False)] == [False, False, True, True]


def test_under_non_inferiority_improved_means_better_at_all():
    """The margin tolerates worsening; an improvement is superiority, beyond 0, so a gain smaller than the margin
    still counts."""
    cells = _hardened(np.random.default_rng(5), 300)
    out = judge_family(cells, (RegressionCheck.parse("acc:30%"),), mode="non-inferiority", n_resamples=1000,
                       family_means=False)
    assert [c.improvement.improved for c in out] == [False, False, True, True]
    assert all(c.procedure.improvement_margin == 0.0 and c.improvement.bound > 0 for c in out if c.improvement.improved)
    assert all(c.decision.state == "non-inferior" for c in out)


def test_null_pairs_list_nothing_improved():
    """Equal checkpoints: the same outputs list no improvement at all; a coin-swap of two equally good models lists
    one in at most 6 of 40 families at family-wise error 5% (Binomial(40, 0.05) exceeds 6 with probability 1.4%)."""
    rng = np.random.default_rng(12)
    listed = regressed = 0
    for family in range(40):
        n = 150
        y = rng.integers(0, 2, n)
        skill = rng.normal(1.0, 1.0, n)
        coin = (rng.random(n) < 0.5)[:, None]  # one coin per meme, the same in every condition

        def swapped_pair(hurt):
            """Two equally good models' outputs, swapped meme by meme by the coin."""
            first, second = (_binary(y, skill - hurt + rng.normal(0, 1.0, n) > 0) for _ in range(2))
            return np.where(coin, second, first), np.where(coin, first, second)

        clean_a, clean_b = swapped_pair(0.0)
        cells = [PairedCell("m", "d", "clean", "clean", {"y": y, "clean": clean_a, "perturbed": clean_a},
                            {"y": y, "clean": clean_b, "perturbed": clean_b})]
        for severity in (1, 2, 3):
            a, b = swapped_pair(0.5 * severity)
            cells.append(PairedCell("m", "d", f"typos@{severity}", "perturbed",
                                    {"y": y, "clean": clean_a, "perturbed": a}, {"y": y, "clean": clean_b,
                                                                                "perturbed": b}))
        same = [PairedCell(c.model, c.dataset, c.condition, c.kind, c.now, c.now) for c in cells]
        swapped = summarize(judge_family(cells, n_resamples=500, seed=family))
        listed += swapped["improved"] > 0
        regressed += swapped["regressed"] > 0
        unchanged = judge_family(same, n_resamples=500, seed=family)
        assert not any(c.improvement.improved or c.decision.regressed for c in unchanged)
        assert all(c.improvement.p_value == 1.0 for c in unchanged if c.judged)
    assert listed <= 6 and regressed <= 6, (listed, regressed)


def _mixed(rng, n: int, n_conditions: int = 18):
    """Two checkpoints on the same memes: the new one better (up to 1.8 logits of skill) on a third of the
    conditions, worse on another third, the same on the rest."""
    y = rng.integers(0, 2, n)
    skill = rng.normal(1.0, 1.0, n)
    cells = []
    for k in range(n_conditions):
        change = 0.3 * rng.random() * (1 if k % 3 == 0 else -1 if k % 3 == 1 else 0)
        then, now = (_binary(y, skill + shift + rng.normal(0, 1.0, n) > 0) for shift in (0.0, 6 * change))
        name, kind = ("clean", "clean") if k == 0 else (f"edit{k % 6}@{1 + k // 6}", "perturbed")
        clean_then, clean_now = (cells[0].then["perturbed"], cells[0].now["perturbed"]) if cells else (then, now)
        cells.append(PairedCell("m", "d", name, kind, {"y": y, "clean": clean_now, "perturbed": now},
                                {"y": y, "clean": clean_then, "perturbed": then}))
    return cells


@pytest.mark.parametrize("control", ["fwer", "holm", "fdr", "none"])
@pytest.mark.parametrize("mode, rules", [("regressions", ("acc", "auroc", "flip")),
                                         ("regressions", ("acc:2%", "flip:1%")),
                                         ("non-inferiority", ("acc:4%", "flip:3%"))])
def test_no_printed_improvement_bound_contradicts_its_decision(control, mode, rules):
    """Every judged rule's printed improvement line: `improved` exactly when its bound lies past the margin on the
    better side, read from the line itself (to its printed digits) and from the unrounded bound."""
    checks = tuple(RegressionCheck.parse(r) for r in rules)
    decided = {True: 0, False: 0}
    for seed in range(2):
        comparisons = judge_family(_mixed(np.random.default_rng(seed), 150), checks,
                                   control=ErrorControl.parse(control), mode=mode, n_resamples=1000, seed=seed)
        for c in comparisons:
            if not c.judged:
                continue
            line = change_line(c.as_dict(), better=True)
            assert f", {'improved' if c.improvement.improved else 'not improved'}; bound" in line
            bound = float(re.search(rf"bound {NUMBER}", line).group(1))
            rounded_edge = abs(abs(bound) - c.procedure.improvement_margin) < 6e-4  # three digits cannot tell
            assert c.improvement.improved == _beyond(c, c.improvement.bound), line
            assert rounded_edge or c.improvement.improved == _beyond(c, bound), line
            decided[c.improvement.improved] += 1
    assert decided[True] and decided[False]  # both decisions were made, so both directions were checked


def test_compare_shows_improved_in_its_table_and_lines_and_json_reads_it_back(tmp_path, monkeypatch, capsys):
    """A is wrong on memes 0-59 under typos@5, B on 0-19 only: B improved, and it exits 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.json").write_text(json.dumps(_baseline(range(60))))
    (tmp_path / "b.json").write_text(json.dumps(_baseline(range(20))))
    assert cli_main(["compare", "a.json", "b.json", "--resamples", "500", "--json", "out.json"]) == 0
    out = capsys.readouterr().out
    row = next(line.split() for line in out.splitlines() if " typos@5 " in line)
    assert row[0] == "IMPROVED" and row[2:6] == ["acc", "0.850", "→", "0.950"] and row[6] == "+0.100"
    assert "0 of 2 conditions regressed (clean did not)" in out
    assert "1 of 2 conditions improved (clean did not); family-wise error 5% over the same 7 rules" in out
    line = next(line.strip() for line in out.splitlines() if line.strip().startswith("typos@5 accuracy"))
    assert re.fullmatch(r"typos@5 accuracy 0\.850 -> 0\.950 \(\+0\.100, improved; bound \+0\.0\d\d, adjusted p "
                        r"0\.002\)", line), line

    document = json.loads((tmp_path / "out.json").read_text())
    verdict = document["verdict"]
    assert verdict["passed"] and verdict["regressed"] == 0 and verdict["improved"] == 1
    assert verdict["improved_summary"].startswith("1 of 2 conditions improved")
    assert sorted(r["rule"] for r in verdict["improvements"]) == ["acc", "auroc", "f1", "flip"]
    by_rule = {(c["condition"], c["rule"]): c for c in document["comparisons"]}
    acc = by_rule[("text=typos@5", "acc")]
    assert acc["improved"] and 0 < acc["improved_bound"] < 0.1 and acc["improved_p_value"] <= 0.05
    assert not by_rule[("clean", "acc")]["improved"] and by_rule[("clean", "acc")]["improved_p_value"] == 1.0

    assert cli_main(["compare", "b.json", "a.json", "--resamples", "500"]) == 1  # the other way: regressed
    out = capsys.readouterr().out
    assert next(line.split() for line in out.splitlines() if " typos@5 " in line)[0] == "REGRESSED"
    assert "0 of 2 conditions improved" in out and "Improved (" not in out and "Regressed (4 rules):" in out


def test_change_lists_name_both_directions_and_cut_long_lists():
    summary = summarize(judge_family(_mixed(np.random.default_rng(0), 150), n_resamples=1000))
    (regressed_title, regressed), (improved_title, improved) = change_lists(summary)
    assert regressed_title.startswith("Regressed (") and improved_title.startswith("Improved (")
    assert regressed and improved and all(", regressed; bound " in line for line in regressed)
    assert all(", improved; bound " in line for line in improved)
    (_, cut), _ = change_lists(summary, limit=1)
    assert len(cut) == 2 and cut[1].startswith(f"... and {len(regressed) - 1} more")


QUICK = ["--memerobust-limit=60", "--memerobust-bootstrap=200", "--memerobust-gate-resamples=1000", "-p",
         "no:cacheprovider"]


def worse_typos_better_contrast(base) -> None:
    """The demo baseline at `base` rewritten: every answer wrong under typos@5, every answer right under contrast@3,
    so a run of the same checkpoint improves on the one and regresses on the other."""
    data = json.loads(base.read_text())
    cells = data["results"]["demo"]["demo"]
    y = np.array(cells["text=typos@5"]["y"])
    cells["text=typos@5"]["perturbed"] = np.where(y[:, None] == np.arange(2), 0.1, 0.9).tolist()
    cells["image=contrast@3"]["perturbed"] = np.where(y[:, None] == np.arange(2), 0.9, 0.1).tolist()
    base.write_text(json.dumps(data))


def test_a_gated_run_lists_both_in_its_terminal_html_and_markdown_and_an_improvement_never_passes_it(pytester,
                                                                                                     tmp_path):
    """The baseline made worse under typos@5 (every answer wrong) and better under contrast@3 (every answer right):
    the run improved on one and regressed on the other; it fails on the regression, and every artifact lists
    both."""
    pytester.makefile(".toml", **{"memerobust-gate": SUITE})
    base = tmp_path / "base.json"
    pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-save-baseline={base}", ".")
    worse_typos_better_contrast(base)
    html, md, js = tmp_path / "r.html", tmp_path / "r.md", tmp_path / "r.json"
    run = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-baseline={base}",
                             "--memerobust-gate=regressions", f"--memerobust-report={html}",
                             f"--memerobust-report={md}", f"--memerobust-report={js}", ".")
    assert run.ret == 1  # the regression fails the run whatever improved
    out = run.stdout.str()
    assert re.search(r"^IMPROVED +typos@5 ", out, re.M) and re.search(r"^REGRESSED +contrast@3 ", out, re.M)
    assert re.search(r"^1 of 4 conditions and 0 of 1 family mean regressed \(clean did not\)", out, re.M)
    assert re.search(r"^1 of 4 conditions and 1 of 1 family mean improved \(clean did not\)", out, re.M)
    # the verdict's line says both, and a tracker logs both
    line = next(line for line in out.splitlines() if line.startswith("against the baseline "))
    assert line.endswith(": 1 of 4 conditions and 0 of 1 family mean regressed (clean did not); family-wise error 5% "
                         "over 19 rules; 1 of 4 conditions and 1 of 1 family mean improved (clean did not)"), line
    metrics = report_metrics(json.loads(js.read_text()))
    assert metrics["gate/regressed"] == 1 and metrics["gate/improved"] == 2
    flagged = {k.rsplit("/", 2)[-2]: v for k, v in metrics.items() if k.endswith("_improved")}
    assert flagged.get("typos-5") == 1 and flagged.get("contrast-3") == 0 and flagged.get("clean") == 0, flagged
    improved = re.search(r"^  (typos@5 accuracy \d\.\d{3} -> \d\.\d{3} \(\+\d\.\d{3}, improved; bound "
                         r"\+\d\.\d{3}, adjusted p [\d.e-]+\))$", out, re.M).group(1)
    regressed = re.search(r"^  (contrast@3 accuracy \d\.\d{3} -> \d\.\d{3} \(-\d\.\d{3}, regressed; bound "
                          r"-\d\.\d{3}, adjusted p [\d.e-]+\))$", out, re.M).group(1)
    page, text = html.read_text(), md.read_text()
    for title in ("Regressed (", "Improved ("):
        assert f"<h3>{title}" in page and f"### {title}" in text
    for line in (improved, regressed):
        assert f"<li><code>{line.replace('>', '&gt;')}</code></li>" in page and f"- `{line}`" in text
    assert "▲ improved" in page and "1 of 4 conditions and 1 of 1 family mean improved" in text
