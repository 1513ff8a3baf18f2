"""Every built-in suite case on every backbone kind: a tiny random config of open_clip, transformers CLIP, BLIP-2 and
the real MiniLM caption encoder, each with a head trained for a few epochs on demo memes, ends with a verdict (pass,
fail or skip), never an error.

Each kind is trained and run once, in a subprocess as a user would (`memerobust train`, then pytest on the built-in
suites with the card it wrote); the parametrised test then reads one case's outcome from that run's JUnit XML.
"""
from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_memerobust.suite import builtin_suite_dir, builtin_suite_paths, load_suite
from tiny_backbones import KINDS, card_toml

VERDICTS = {"passed", "failed", "skipped"}
CARD = "tiny.card.toml"  # the card `memerobust train --out tiny.safetensors` writes


def _cases() -> list[str]:
    """Each TOML suite case as `suite[:mode]::case` (`[:mode]` for the channel ablation's modes)."""
    cases = []
    for path in builtin_suite_paths():
        if path.suffix != ".toml":
            continue
        suite = load_suite(path)
        for spec in suite.model_specs([CARD]):
            cases += [f"{path.stem}{spec[len(CARD):]}::{condition.test_name}" for condition in suite.conditions]
    return cases


def _outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """JUnit test name -> (verdict, message). pytest writes an error as <error> and a failure as <failure>."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        verdict, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                verdict = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or "") + "\n" + (child.text or "")[-2000:]
                break
        out[f"{case.get('classname')}::{case.get('name')}"] = (verdict, message)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """kind -> outcomes of the built-in suites on that kind's trained tiny detector (run lazily, once)."""
    done: dict[str, dict] = {}

    def run(kind: str) -> dict:
        if kind in done:
            return done[kind]
        if kind == "open_clip":
            pytest.importorskip("open_clip", reason="the open_clip kind needs the clip extra")
        folder = tmp_path_factory.mktemp(kind)
        (folder / "card.toml").write_text(card_toml(kind))
        train = subprocess.run([sys.executable, "-m", "pytest_memerobust.cli", "train", str(folder / "card.toml"),
                                "--data", "demo", "--epochs", "3", "--lr", "3e-3", "--out",
                                str(folder / CARD.replace(".card.toml", ".safetensors")), "--quiet"],
                               cwd=folder, capture_output=True, text=True, timeout=900)
        assert train.returncode == 0, f"training on {kind} failed:\n{train.stdout}\n{train.stderr}"
        suites = subprocess.run([sys.executable, "-m", "pytest", str(builtin_suite_dir()), "-p", "no:cacheprovider",
                                 "-q", f"--memerobust-model={folder / CARD}", "--memerobust-no-cache",
                                 f"--junitxml={folder / 'junit.xml'}", f"--rootdir={folder}"],
                                cwd=folder, capture_output=True, text=True, timeout=1800)
        assert suites.returncode in (0, 1), f"the suites on {kind} did not run:\n{suites.stdout[-4000:]}\n{suites.stderr[-4000:]}"
        done[kind] = {"outcomes": _outcomes(folder / "junit.xml"), "log": suites.stdout}
        return done[kind]

    return run


@pytest.mark.parametrize("case", _cases())
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_suite_case_ends_with_a_verdict_on_every_backbone_kind(runs, kind, case):
    run = runs(kind)
    suite_and_mode, name = case.split("::", 1)
    suite, _, mode = suite_and_mode.partition(":")
    # JUnit's classname is `suite.model` (the model named by its card's name); its name the case's name
    matches = {test: outcome for test, outcome in run["outcomes"].items()
               if test.startswith(f"{suite}.") and test.endswith(f"::{name}")
               and test.split("::")[0].partition(".")[2].partition(":")[2] == mode}
    assert len(matches) == 1, f"{case} on {kind}: expected one result, found {sorted(matches)}"
    (verdict, message), = matches.values()
    assert verdict in VERDICTS, f"{case} on {kind} ended with an error:\n{message}"


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_python_suites_and_the_whole_run_have_no_errors_on_every_backbone_kind(runs, kind):
    run = runs(kind)
    errors = {name: message for name, (verdict, message) in run["outcomes"].items() if verdict == "error"}
    assert not errors, f"errors on {kind}: {errors}"
    python_suites = [name for name in run["outcomes"] if "test_caption_fuzz" in name or "test_modality_reliance" in name]
    assert python_suites, f"the Python suites did not run on {kind}:\n{run['log'][-3000:]}"
    assert len(run["outcomes"]) >= len(_cases()) + len(python_suites)
