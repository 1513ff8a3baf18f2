"""Perturbed memes as a dataset: `memerobust export` and --memerobust-export write what the detector was fed and
answered, checked against the report, as a `datasets` parquet set (or an imagefolder) that loads offline."""
import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_memerobust.cli import main
from pytest_memerobust.engine import Condition
from pytest_memerobust.run.replay import load_stored_picture, needs_batch, regenerate_picture
from pytest_memerobust.judge.results import StatsConfig
from pytest_memerobust.run.options import DataOptions, JudgingOptions, Options
from pytest_memerobust.run.session import RobustnessSession
from built_once import built_once
from test_cli_edges import signals_as_in_a_terminal, stopped

datasets = pytest.importorskip("datasets")  # the [export] extra

LIMIT = 24
# Every case fails (no case reaches 1.5), so the run records its flips as counterexamples, pictures stored.
STRICT_SUITE = """
[suite]
name = "strict"
[thresholds]
min_relative_robustness = { accuracy = 1.5 }
[text]
typos = [3]
[image]
gaussian_noise = [5]
uap = [3]
[grid]
text = ["typos@3"]
image = ["gaussian_noise@5"]
"""
CONDITIONS = ["text=typos@3", "image=gaussian_noise@5", "image=uap@3", "text=typos@3+image=gaussian_noise@5"]


@pytest.fixture(autouse=True)
def offline_hub(tmp_path, monkeypatch):
    """No hub, and a cache of this test's own: `datasets` reads the local files only."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run of the demo detector whose cases fail: its folder, with its report, counterexamples (pictures stored)
    and its own export (--memerobust-export), and what it printed. Run once for the session, whichever pytest-xdist
    worker asks first."""
    def build(where: Path) -> None:
        (where / "memerobust-strict.toml").write_text(STRICT_SUITE)
        done = subprocess.run([sys.executable, "-m", "pytest", "--memerobust-model=demo", f"--memerobust-limit={LIMIT}",
                               "--memerobust-bootstrap=50", "-p", "no:cacheprovider", "-p", "no:randomly",
                               "--memerobust-report=r.json", "--memerobust-counterexamples=cx.json",
                               "--memerobust-export=run-export", "."], cwd=where, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 1, done.stdout + done.stderr  # the strict cases fail
        (where / "stdout.txt").write_text(done.stdout)

    where = built_once(tmp_path_factory, "export-run", build)
    return where, (where / "stdout.txt").read_text()


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    """`memerobust export r.json` of that run (every meme of every perturbed condition), as parquet."""
    where, _ = run

    def build(folder: Path) -> None:
        assert main(["export", str(where / "r.json"), "--out", str(folder / "cli-export"), "--cache-dir",
                     str(where / "cache")]) == 0

    return built_once(tmp_path_factory, "export-cli", build) / "cli-export"


def load(kind, folder, tmp_path):
    return datasets.load_dataset(kind, data_dir=str(folder), cache_dir=str(tmp_path / "hf-cache"))["train"]


def digest(proba) -> str:
    """results.ConditionResult.predictions_digest of exported probabilities."""
    return hashlib.sha256(np.round(np.asarray(proba, np.float64), 6).astype(np.float32).tobytes()).hexdigest()


def test_the_export_loads_with_datasets_and_holds_the_reports_predictions(run, exported, tmp_path, capsys):
    where, _ = run
    report = json.loads((where / "r.json").read_text())
    rows = load("parquet", exported, tmp_path)
    assert len(rows) == LIMIT * len(CONDITIONS)  # memes x conditions
    assert rows.features["label"].names == ["non-hateful", "hateful"]
    assert type(rows.features["image"]).__name__ == "Image"
    group = next(g for g in report["groups"] if g["suite"] == "strict")
    by_condition = {r["condition"]: r for r in group["results"]}
    assert sorted(set(rows["condition"])) == sorted(CONDITIONS) == sorted(by_condition)
    table = rows.remove_columns("image").to_pandas()
    memes = None
    for condition, mine in table.groupby("condition", sort=False):
        recorded = by_condition[condition]
        memes = memes or list(mine["meme_id"])
        assert list(mine["meme_id"]) == memes and len(set(memes)) == LIMIT  # each meme once, in the dataset's order
        # the probabilities are the run's: they hash to its digests, and give its accuracy clean and perturbed
        assert digest(np.stack(mine["proba"])) == recorded["predictions_sha256"]
        assert digest(np.stack(mine["proba_clean"])) == group["clean"]["predictions_sha256"]
        predicted = np.stack(mine["proba"]).argmax(1)
        assert np.mean(predicted == mine["label"]) == pytest.approx(recorded["metrics"]["accuracy"])
        assert mine["correct"].mean() == pytest.approx(recorded["metrics"]["accuracy"])
        assert mine["correct_clean"].mean() == pytest.approx(group["clean"]["metrics"]["accuracy"])
        assert (mine["flipped"] == (mine["correct_clean"] & ~mine["correct"])).all()
        parsed = Condition.parse(condition)
        assert (mine["text_perturbation"].fillna("") == (parsed.text or "")).all()
        assert (mine["image_severity"].fillna(0) == (parsed.image_severity or 0)).all()
        assert (mine["seed"] == 0).all() and (mine["model"] == "demo").all() and (mine["task"] == "hate").all()
        edited = (mine["caption"] != mine["original_caption"]).any()
        assert edited == (parsed.text is not None)  # typos edit captions; picture edits leave them alone
    info = json.loads((exported / "export.json").read_text())
    assert info["rows"] == len(rows) and info["seed"] == 0 and info["options"]["limit"] == LIMIT
    assert info["models"]["demo"]["checkpoint_sha256"] == report["models"]["demo"]["checkpoint_sha256"]
    assert set(info["perturbations"]) == {"typos", "gaussian_noise", "uap"}
    assert info["perturbations"]["uap"]["attacks_the_detector"] is True and info["perturbations"]["typos"]["code_sha"]
    assert 'datasets.load_dataset("parquet", data_dir=' in (exported / "README.md").read_text()
    # the dataset card's header also tells `load_dataset(DIR)` where the rows are
    assert len(datasets.load_dataset(str(exported), cache_dir=str(tmp_path / "hf-cache-2"))["train"]) == len(rows)


def test_pictures_decode_to_the_bytes_replay_feeds(run, exported, tmp_path):
    """Every exported picture is the one replay.py regenerates from its recipe (an attack's too), and the run's
    stored counterexample pictures are the exported ones, byte for byte."""
    where, _ = run
    rows = load("parquet", exported, tmp_path)
    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=LIMIT),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=50))))
    detector = session.detector("demo")
    seen = {}
    for row in rows:
        picture = np.asarray(row["image"].convert("RGB"))
        assert picture.dtype == np.uint8
        entry = {"model": "demo", "dataset": "demo", "task": "hate", "condition": row["condition"], "seed": 0,
                 "meme": row["meme_id"], "picture_digest": row["picture_digest"],
                 "recipe_needs_batch": needs_batch(Condition.parse(row["condition"]))}
        replayed = regenerate_picture(session, entry, "demo", detector)  # raises when the digest differs
        np.testing.assert_array_equal(picture, replayed.permute(1, 2, 0).cpu().numpy())
        seen[(row["condition"], row["meme_id"])] = (picture, row)
    manifest = json.loads((where / "cx.json").read_text())
    assert manifest["entries"]
    for entry in manifest["entries"]:
        picture, row = seen[(entry["condition"], entry["meme"])]
        stored = load_stored_picture(where / entry["picture_file"], entry)
        assert picture.tobytes() == stored.tobytes()
        assert row["caption"] == entry["caption"] and row["flipped"]
        assert row["proba"] == pytest.approx(entry["proba"], abs=0)


def test_a_run_exports_at_its_end_the_bytes_the_report_regenerates(run, exported):
    where, printed = run
    assert f"memerobust: exported {LIMIT * len(CONDITIONS)} rows" in printed
    ours = sorted(p.relative_to(where / "run-export") for p in (where / "run-export").rglob("*") if p.is_file())
    theirs = sorted(p.relative_to(exported) for p in exported.rglob("*") if p.is_file())
    assert ours == theirs == sorted(map(Path, ["README.md", "export.json", "data/train-00000-of-00001.parquet"]))
    for name in ours:
        assert (where / "run-export" / name).read_bytes() == (exported / name).read_bytes(), name


def test_counterexamples_as_an_imagefolder(run, exported, tmp_path):
    where, _ = run
    out = tmp_path / "flips"
    assert main(["export", str(where / "r.json"), "--out", str(out), "--counterexamples", "--format", "imagefolder",
                 "--conditions", "text=typos@3", "image=gaussian_noise@5", "--no-cache"]) == 0
    flips = load("imagefolder", out, tmp_path)
    everything = load("parquet", exported, tmp_path)
    expected = everything.filter(lambda r: r["flipped"] and r["condition"] in ("text=typos@3",
                                                                              "image=gaussian_noise@5"))
    assert 0 < len(flips) == len(expected)
    assert all(flips["flipped"])
    for mine, theirs in zip(flips, expected):
        assert (mine["condition"], mine["meme_id"], mine["caption"]) == (theirs["condition"], theirs["meme_id"],
                                                                         theirs["caption"])
        assert np.asarray(mine["image"]).tobytes() == np.asarray(theirs["image"]).tobytes()
    files = sorted(p.name for p in (out / "images").iterdir())
    assert files == sorted({f"{d}.png" for d in flips["picture_digest"]})  # each distinct picture once


def _refused(capsys, argv, *needles):
    assert main([*argv, "--no-cache"]) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err
    return err


def test_bad_input_is_one_clear_error_and_nothing_is_written(run, tmp_path, capsys):
    where, _ = run
    report = json.loads((where / "r.json").read_text())
    out = tmp_path / "out"

    def leftovers():
        return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out"))

    _refused(capsys, ["export", str(where / "cx.json"), "--out", str(out)], "is not a pytest-memerobust report")
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({**report, "partial": "the run was interrupted", "groups": []}))
    _refused(capsys, ["export", str(partial), "--out", str(out)], "partial report", "interrupted")
    _refused(capsys, ["export", str(where / "r.json"), "--out", str(out), "--conditions", "text=typos@4"],
             "unknown condition 'text=typos@4'", "text=typos@3")
    _refused(capsys, ["export", str(where / "r.json"), "--out", str(out), "--conditions", "clean"],
             "perturbs no meme")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    _refused(capsys, ["export", str(where / "r.json"), "--out", str(tmp_path / "full")], "is not empty")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    # predictions that do not hash to the report's: refused after evaluating, with nothing left behind
    tampered = tmp_path / "tampered.json"
    group = next(g for g in report["groups"] if g["suite"] == "strict")
    group["results"][0]["predictions_sha256"] = "0" * 64
    tampered.write_text(json.dumps(report))
    _refused(capsys, ["export", str(tampered), "--out", str(out)], "regenerated predictions hash to",
             "nothing was written")
    assert not out.exists() and leftovers() == []


def test_another_checkpoint_is_refused_before_anything_runs(run, tmp_path, capsys):
    from safetensors.numpy import load_file, save_file

    from pytest_memerobust.detectors import find_card

    where, _ = run
    weights = load_file(str(find_card("demo").checkpoint_path()))
    name = sorted(weights)[0]
    weights[name] = weights[name] * 2
    other = tmp_path / "other.safetensors"
    save_file(weights, str(other))
    err = _refused(capsys, ["export", str(where / "r.json"), "--out", str(tmp_path / "out"), "--checkpoint",
                            f"demo={other}"], "model demo: its weights have sha256", "the run of")
    assert "hash to" not in err  # said before evaluating
    assert not (tmp_path / "out").exists()


def test_the_pytest_option_checks_its_folder_at_the_start(pytester):
    (pytester.path / "full").mkdir()
    (pytester.path / "full" / "x").write_text("")
    result = pytester.runpytest("--memerobust-model=demo", "--memerobust-export=full", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--memerobust-export: full is not empty*"])


SUITE_WITH_EXPORT = """
[suite]
name = "exported"
[thresholds]
min_relative_robustness = { accuracy = 1.5 }
[text]
typos = [3]
[image]
gaussian_noise = [5]
[export]
out = "flips"
counterexamples = true
"""


def _run_suite(pytester):
    """The suite's run, in this process (pytester): the export is the suite's, made at the run's end."""
    return pytester.runpytest("--memerobust-model=demo", "--memerobust-limit=16", "--memerobust-bootstrap=50",
                              "-p", "no:cacheprovider", "-p", "no:randomly", "--memerobust-report=r.json", ".")


def test_a_suites_export_table_writes_its_flips_at_the_end_and_replaces_its_earlier_export(pytester, tmp_path):
    where = pytester.path
    (where / "memerobust-exported.toml").write_text(SUITE_WITH_EXPORT)
    done = _run_suite(pytester)
    assert done.ret == 1, done.stdout.str() + done.stderr.str()  # the strict cases fail
    said = next(line for line in done.stdout.lines if line.startswith("memerobust: suite exported:"))
    rows = load("parquet", where / "flips", tmp_path)
    report = json.loads((where / "r.json").read_text())
    group = next(g for g in report["groups"] if g["suite"] == "exported")
    assert sorted(set(rows["condition"])) == sorted(r["condition"] for r in group["results"])
    assert all(rows["flipped"]) and f"exported {len(rows)} rows" in said  # only the memes that flipped
    info = json.loads((where / "flips" / "export.json").read_text())
    assert info["rows"] == len(rows) == sum(c["flipped"] for c in info["by_condition"]) > 0
    first = (where / "flips" / "export.json").read_bytes()
    assert _run_suite(pytester).ret == 1  # run again: the suite's earlier export is replaced, same bytes
    assert (where / "flips" / "export.json").read_bytes() == first
    assert not [p for p in where.iterdir() if p.name.startswith(".flips")]  # nothing left beside it


def test_a_suites_export_into_a_folder_of_other_files_is_refused_before_any_case(pytester):
    where = pytester.path
    (where / "memerobust-exported.toml").write_text(SUITE_WITH_EXPORT)
    (where / "flips").mkdir()
    (where / "flips" / "notes.txt").write_text("mine")
    done = _run_suite(pytester)
    said = done.stdout.str() + done.stderr.str()
    assert done.ret != 0 and "[export].out" in said
    assert "is not empty" in said and " passed" not in done.stdout.str()
    assert (where / "flips" / "notes.txt").read_text() == "mine"


TINY_SUITE = """
[suite]
name = "tiny"
[thresholds]
min_relative_robustness = { accuracy = 0.0 }
[text]
typos = [3]
"""


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory):
    """A run of the demo detector on a generic csv file (task `label`, classes 0 and 1) whose pictures lie beside
    its folder, read with --memerobust-allow-outside-paths: its report. Run once for the session."""
    from PIL import Image

    def build(where: Path) -> None:
        (where / "pictures").mkdir()
        (where / "data").mkdir()
        rng = np.random.default_rng(0)
        rows = ["id,image,text,label"]
        for i in range(12):
            Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(where / "pictures" / f"{i}.png")
            caption = "we hate them all" if i % 2 else "a sunny day"
            rows.append(f"m{i},../pictures/{i}.png,{caption} number {i},{i % 2}")
        (where / "data" / "memes.csv").write_text("\n".join(rows) + "\n")
        (where / "memerobust-tiny.toml").write_text(TINY_SUITE)
        done = subprocess.run([sys.executable, "-m", "pytest", "--memerobust-model=demo", "--memerobust-task=label",
                               "--memerobust-data=csv:data/memes.csv", "--memerobust-allow-outside-paths",
                               "--memerobust-bootstrap=20", "-p", "no:cacheprovider", "-p", "no:randomly",
                               "--memerobust-report=r.json", "."], cwd=where, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode in (0, 1) and (where / "r.json").is_file(), done.stdout + done.stderr

    return built_once(tmp_path_factory, "export-csv-run", build)


def test_export_names_its_own_switch_for_pictures_outside_the_folder(csv_run, tmp_path, capsys, monkeypatch):
    """Issue 49: `memerobust export` told the user to pass --memerobust-allow-outside-paths, the pytest option;
    the command's own is --allow-outside-paths."""
    monkeypatch.chdir(csv_run)
    assert main(["export", "r.json", "--out", str(tmp_path / "out"), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "leads outside the dataset folder" in err and "allow paths outside it (--allow-outside-paths)" in err
    assert "--memerobust-allow-outside-paths" not in err and "load_dataset(" not in err
    assert not (tmp_path / "out").exists()


def test_export_labels_a_csv_files_classes_with_the_cards_class_names(csv_run, tmp_path, monkeypatch):
    """Issue 49: the export of a generic csv file (classes `0` and `1`) wrote ClassLabel(names=['0', '1']); its
    labels are the card's classes, in the card's order."""
    monkeypatch.chdir(csv_run)
    out = tmp_path / "out"
    assert main(["export", "r.json", "--out", str(out), "--no-cache", "--allow-outside-paths"]) == 0
    rows = load("parquet", out, tmp_path)
    assert rows.features["label"].names == ["non-hateful", "hateful"]
    info = json.loads((out / "export.json").read_text())
    assert info["task"] == "label" and info["classes"] == ["non-hateful", "hateful"]
    assert sorted(set(rows["label"])) == [0, 1]


def test_a_checkpoint_for_a_model_the_run_did_not_have_is_refused(run, tmp_path, capsys):
    """A typo in --checkpoint MODEL=PATH left the run's checkpoint in use, unsaid."""
    where, _ = run
    err = _refused(capsys, ["export", str(where / "r.json"), "--out", str(tmp_path / "out"), "--checkpoint",
                            f"dmeo={tmp_path / 'other.safetensors'}"], "unknown model 'dmeo'", "known: demo")
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


SLOW_WRITER = """
import sys, time
from pytest_memerobust.cli import main
from pytest_memerobust.track import export
add = export.ParquetRows.add
def slow(self, row, picture):  # a large export: long enough in its staging folder to be stopped there
    print(self.path.parents[1].name, flush=True)  # the staging folder it writes in
    time.sleep(0.5)
    add(self, row, picture)
export.ParquetRows.add = slow
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_export_stopped_while_it_writes_leaves_nothing(run, tmp_path, signum, code):
    """SIGTERM left a hidden .out.*.tmp/ folder beside the target; SIGINT printed a 53-line traceback."""
    where, _ = run
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, "export", str(where / "r.json"), "--out", str(out),
                                "--conditions", "text=typos@3", "--cache-dir", str(where / "cache")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=signals_as_in_a_terminal)
    staging, rc, err = stopped(process, signum)
    assert staging.startswith(".out.") and staging.endswith(".tmp\n")  # stopped inside the staging window
    assert (rc, err) == (code, "memerobust export: interrupted, nothing written\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
