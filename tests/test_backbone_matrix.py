"""Every built-in suite case on every backbone kind: a tiny random config of open_clip, transformers CLIP, BLIP-2 and
the MiniLM kind (a tiny BERT saved as a downloaded sentence encoder is, read by the MiniLM backbone's code: the real
model's 6 layers cost 282 s here where the suites are about the code path; the real weights are run by
test_attack_strength and the PrideMM tests), each with a head trained for a few epochs on demo memes, ends with a
verdict (pass, fail or skip), never an error.

Each kind is trained and run once, as a user would: `memerobust train` (its command line, called in this process: a
fresh one spent as long starting as training), then pytest on the built-in suites with the card it wrote, also in this
process (pytest.main, as pytester's in-process runs: a fresh process spent a fifth of each kind's time importing and
loading; the modules a run imports stay, so the next kind's run finds them); the parametrised test then reads one
case's outcome from that run's JUnit XML. The suites run on the first LIMIT demo test memes (`--memerobust-limit`),
in batches of BATCH: every case still runs end to end, on fewer memes (the feature store fills every batch up to the
batch size, and MiniLM's white-box attacks query the encoder for every meme: on 160 memes in batches of 64, the MiniLM
kind took over 8 minutes on 2 cores). The universal trigger and pattern are fitted small (tests/small_fits.py: on
FIT_MEMES training memes, the pattern in UAP_STEPS steps): the same code, where these fits at their full 64 memes and
20 steps were over a quarter of each kind's time.

Once per test session, not per pytest-xdist worker: a kind's run is left in a folder all the workers of the session
share, under a lock, so a worker that needs a kind another is running does a kind nobody has started meanwhile (the
MiniLM kind first: its white-box text attacks cost the most), then reads the other's result.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_memerobust.cli import main as memerobust_command
from pytest_memerobust.run.suite import builtin_suite_dir, builtin_suite_paths, load_suite
from small_fits import patch_small_fits
from built_once import locked, session_folder
from tiny_backbones import KINDS, card_toml, save_tiny_bert

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


LIMIT = 16  # demo test memes the suites run on: both classes (9 of them hateful), every kind of caption and symbol
BATCH = 8  # the inference batch size: still two batches a side
FIT_MEMES, UAP_STEPS = 8, 5  # the universal fits' training memes and the pattern's steps (defaults 64 and 20)


def _kinds_tested(items, path: Path) -> set[str]:
    """The kinds this session's tests of this module read (what a worker may run for the others)."""
    return {item.callspec.params["kind"] for item in items
            if item.path == path and "kind" in getattr(getattr(item, "callspec", None), "params", {})}


def _train_and_run(kind: str, folder: Path) -> dict:
    """`memerobust train` on `kind`'s tiny card, then the built-in suites on the card it wrote: their outcomes."""
    tiny_bert = {"kind": "minilm", "name": str(save_tiny_bert(folder / "bert"))} if kind == "minilm" else None
    (folder / "card.toml").write_text(card_toml(kind, tiny_bert))
    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        code = memerobust_command(["train", str(folder / "card.toml"), "--data", "demo", "--epochs", "3", "--lr",
                                   "3e-3", "--out", str(folder / CARD.replace(".card.toml", ".safetensors")),
                                   "--cache-dir", str(folder / "features"), "--quiet"])
    assert code == 0, f"training on {kind} failed:\n{said.getvalue()}"
    args = [str(builtin_suite_dir()), "-p", "no:cacheprovider", "-q", f"--memerobust-model={folder / CARD}",
            "--memerobust-no-cache", f"--memerobust-limit={LIMIT}", f"--memerobust-batch-size={BATCH}",
            f"--junitxml={folder / 'junit.xml'}", f"--rootdir={folder}"]
    said = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        patch.chdir(folder)
        patch.setattr(sys, "path", list(sys.path))  # the suites' rootdir-relative import puts the checkout first
        patch_small_fits(patch, FIT_MEMES, UAP_STEPS)
        code = pytest.main(args)
    assert code in (0, 1), f"the suites on {kind} did not run (exit code {code}):\n{said.getvalue()[-8000:]}"
    return {"outcomes": _outcomes(folder / "junit.xml"), "log": said.getvalue()}


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    """kind -> outcomes of the built-in suites on that kind's trained tiny detector (run lazily, once a session)."""
    shared = session_folder(tmp_path_factory) / "backbone-matrix"
    shared.mkdir(exist_ok=True)
    wanted = _kinds_tested(request.session.items, request.path)
    done: dict[str, dict] = {}

    def result(kind: str) -> dict | None:
        path = shared / f"{kind}.json"
        if kind not in done and path.is_file():
            done[kind] = json.loads(path.read_text())
        return done.get(kind)

    def take(kind: str, wait: bool) -> bool:
        """Run `kind` unless another process is at it (then wait for it, or with `wait` False, say so)."""
        with locked(shared / f"{kind}.lock", wait) as held:
            if held and result(kind) is None:
                try:
                    outcome = _train_and_run(kind, tmp_path_factory.mktemp(kind))
                except AssertionError as e:  # the worker whose test needs the kind reports it
                    outcome = {"error": str(e)}
                (shared / f"{kind}.part").write_text(json.dumps(outcome))
                os.replace(shared / f"{kind}.part", shared / f"{kind}.json")
            return held

    def run(kind: str) -> dict:
        if kind == "open_clip":
            pytest.importorskip("open_clip", reason="the open_clip kind needs the clip extra")
        while result(kind) is None and not take(kind, wait=False):
            unstarted = [k for k in sorted(wanted, key=lambda k: (k != "minilm", list(KINDS).index(k)))
                         if k != kind and result(k) is None
                         and (k != "open_clip" or importlib.util.find_spec("open_clip") is not None)]
            if not any(take(k, wait=False) for k in unstarted):
                take(kind, wait=True)
        outcome = result(kind)
        assert "error" not in outcome, outcome.get("error")
        return outcome

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
    python_suites = [name for name in run["outcomes"]
                     if "test_caption_fuzz" in name or "test_modality_reliance" in name]
    assert python_suites, f"the Python suites did not run on {kind}:\n{run['log'][-3000:]}"
    assert len(run["outcomes"]) >= len(_cases()) + len(python_suites)
