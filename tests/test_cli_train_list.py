"""The `memerobust` command's user-facing traps: training never writes into the installed package and reproduces the
shipped demo recipe; `list` shows defences and evasion-budget families and no internal names; `--version`."""
import json
import re

import pytest
from safetensors import safe_open

import pytest_memerobust
from pytest_memerobust.detectors import defences
from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.data.demo import demo_dataset
from pytest_memerobust.detectors.registry import load_detector
from pytest_memerobust.detectors.cards import available_cards, builtin_card_dir, file_sha256, find_card, load_card
from pytest_memerobust.perturb.budget_edits import family_names
from pytest_memerobust.run.training import hyperparameters


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli_main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"memerobust {pytest_memerobust.__version__}"


def _section(out: str, title: str) -> list[str]:
    """The indented lines under the line that starts with `title`."""
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith(title))
    section = []
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        section.append(line.strip())
    return section


def test_list_shows_every_defence_and_budget_family_and_no_internal_names(capsys):
    assert cli_main(["list"]) == 0
    out = capsys.readouterr().out
    shown = _section(out, "defences")
    assert [line.split()[0] for line in shown] == defences.names()
    for line in shown:  # each with what it does
        assert len(line.split()) > 3, line
    assert any(line.startswith("spelling") and ("not available here" in line) != _spellchecker_installed()
               for line in shown)
    families = _section(out, "evasion-budget families")
    assert [line.split()[0] for line in families] == family_names()
    assert any(line.startswith("image_linf") and "1, 2, 4, 8, 16, 32" in line and "picture" in line
               for line in families)
    assert any(line.startswith("char_edits") and "1 to 10" in line and "caption" in line for line in families)
    # no module constant leaks into what a user reads (an environment variable such as $OPENAI_API_KEY may)
    leaked = [m.group(0) for m in re.finditer(r"(?<![$\w])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b", out)]
    assert leaked == [] and "BACKEND_REASONS" not in out


def _spellchecker_installed() -> bool:
    try:
        import spellchecker  # noqa: F401
    except ImportError:
        return False
    return True


def test_train_never_overwrites_the_shipped_demo_checkpoint(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shipped = find_card("demo").checkpoint_path()
    before = (file_sha256(shipped), shipped.stat().st_mtime_ns)
    assert cli_main(["train", "demo", "--demo", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{shipped} ships inside the installed package: training never overwrites it" in err
    assert "pass --out PATH outside the package, e.g. --out demo.safetensors" in err
    assert "--memerobust-checkpoint=demo.safetensors" in err
    # naming a new file inside the package is refused too, before anything is written there
    inside = builtin_card_dir() / "mine.safetensors"
    assert cli_main(["train", "demo", "--demo", "--out", str(inside), "--quiet"]) == 2
    assert "is inside the installed package" in capsys.readouterr().err
    assert not inside.exists() and not inside.with_suffix(".metrics.json").exists()
    assert (file_sha256(shipped), shipped.stat().st_mtime_ns) == before


def test_the_default_recipe_of_every_shipped_demo_checkpoint_is_the_one_it_was_trained_with():
    checked = 0
    for name, path in available_cards().items():
        card = load_card(path)
        checkpoint = card.with_demo().checkpoint_path()
        if not (card.network.demo_weights and checkpoint and checkpoint.with_suffix(".metrics.json").is_file()):
            continue
        metrics = json.loads(checkpoint.with_suffix(".metrics.json").read_text())
        assert hyperparameters(card.with_demo()) == metrics["hyperparameters"], name
        checked += 1
    assert checked >= 4  # demo, memeclip, memeblip2, memeblip2-tda


def test_train_demo_with_its_defaults_rebuilds_the_shipped_detector(tmp_path):
    """The same machine gives the same bytes: trained twice here, the weights are equal. The shipped weights were
    built on another CPU, whose kernels round the last bit differently from the third epoch on (AVX2 and AVX-512
    measured 2026-11-30), and 30 epochs of training carry that on; against them the rebuild must show the same
    recipe, the same first epochs and the same detector: its best val AUROC, and its answers on the test memes."""
    first, second = tmp_path / "a" / "demo.safetensors", tmp_path / "b" / "demo.safetensors"
    for out in (first, second):
        assert cli_main(["train", "demo", "--demo", "--out", str(out), "--no-cache", "--quiet"]) == 0
    assert first.read_bytes() == second.read_bytes()
    shipped = find_card("demo").checkpoint_path()
    with safe_open(str(first), "pt") as new, safe_open(str(shipped), "pt") as old:
        assert {k: new.get_tensor(k).shape for k in new.keys()} == {k: old.get_tensor(k).shape for k in old.keys()}
        assert json.loads(new.metadata()["hyperparameters"]) == {"lr": 1e-3, "weight_decay": 1e-4, "epochs": 30,
                                                                 "batch_size": 16}
    metrics = json.loads(first.with_suffix(".metrics.json").read_text())
    shipped_metrics = json.loads(shipped.with_suffix(".metrics.json").read_text())
    assert metrics["hyperparameters"] == shipped_metrics["hyperparameters"]
    assert [row["loss"] for row in metrics["history"][:2]] == [row["loss"] for row in shipped_metrics["history"][:2]]
    assert metrics["best_val_auroc"] == pytest.approx(shipped_metrics["best_val_auroc"], abs=0.005)
    test_memes = demo_dataset("test").memes
    pictures, captions = [m.image for m in test_memes], [m.text for m in test_memes]
    rebuilt = load_detector("demo", checkpoint=first).predict_proba(pictures, captions).argmax(1)
    original = load_detector("demo").predict_proba(pictures, captions).argmax(1)
    assert (rebuilt == original).mean() >= 0.95, f"{(rebuilt != original).sum()} of {len(rebuilt)} answers differ"


def test_train_shows_its_progress_while_encoding_and_training_in_plain_lines_off_a_terminal(tmp_path, capsys):
    """Issue 49: 8 minutes of encoding with no sign of life. Off a terminal (capsys is not one) the encoding of each
    split and the epochs are plain lines, one per further 10%, ending at 100%; no carriage returns in a CI log."""
    out = tmp_path / "mine.safetensors"
    assert cli_main(["train", "demo", "--demo", "--out", str(out), "--epochs", "2", "--no-cache"]) == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    for stage in ("encoding demo:train pictures", "encoding demo:train captions", "encoding demo:val pictures",
                  "encoding demo:val captions"):
        mine = [line for line in lines if line.startswith(stage + ":")]
        assert mine and mine[-1].endswith("(100%)") and len(mine) <= 11, (stage, mine)
    assert [line.split(",")[0] for line in lines if line.startswith("training demo:")] == [
        "training demo: 1 of 2 epochs (50%)", "training demo: 2 of 2 epochs (100%)"]
    assert "val_auroc" in lines[-1] and "\r" not in err


def test_train_quiet_shows_no_progress(tmp_path, capsys):
    assert cli_main(["train", "demo", "--demo", "--out", str(tmp_path / "q.safetensors"), "--epochs", "1",
                     "--no-cache", "--quiet"]) == 0
    assert "encoding" not in capsys.readouterr().err


def test_progress_on_a_terminal_is_a_bar_per_stage():
    import io

    from pytest_memerobust.cli.common import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    shown = Progress(stream)
    for _ in range(3):
        shown.advance("encoding demo:train captions", 64, 192)
    shown.advance("training demo", 1, 2, unit="epoch", at=1, loss="0.5")
    shown.close()
    text = stream.getvalue()
    assert "\r" in text and "encoding demo:train captions: 100%" in text and "192/192" in text
    assert "training demo" in text and "loss=0.5" in text and "of 192 inputs" not in text


def test_the_card_train_writes_records_the_recipe_that_ran_under_a_name_of_its_own(tmp_path, capsys):
    """Issue 49: a 5-epoch run wrote `epochs = 10` (the card's default) and the shipped card's name, so two trained
    cards passed for the shipped one in test ids."""
    out = tmp_path / "mine.safetensors"
    assert cli_main(["train", "demo", "--demo", "--out", str(out), "--epochs", "2", "--lr", "0.002", "--no-cache",
                     "--quiet"]) == 0
    assert "mine.card.toml (card 'mine')" in capsys.readouterr().out
    written = load_card(out.with_suffix(".card.toml"))
    assert written.name == "mine"
    assert written.network.training == {"lr": 0.002, "weight_decay": 1e-4, "epochs": 2, "batch_size": 16}
    # named after a registered card, it gets a name of its own; --name names it
    again = tmp_path / "demo.safetensors"
    assert cli_main(["train", "demo", "--demo", "--out", str(again), "--epochs", "1", "--no-cache", "--quiet"]) == 0
    assert load_card(again.with_suffix(".card.toml")).name == "demo-trained"
    assert cli_main(["train", "demo", "--demo", "--out", str(again), "--epochs", "1", "--no-cache", "--quiet",
                     "--name", "run-7", "--force"]) == 0  # the finished checkpoint replaced, as asked
    assert load_card(again.with_suffix(".card.toml")).name == "run-7"
    capsys.readouterr()
    assert cli_main(["train", "demo", "--demo", "--out", str(tmp_path / "x.safetensors"), "--name", "memeclip",
                     "--quiet"]) == 2
    assert "--name 'memeclip': a registered card has that name" in capsys.readouterr().err
    assert not (tmp_path / "x.safetensors").exists()


def test_train_names_its_own_switch_for_pictures_outside_the_folder(tmp_path, capsys):
    """Issue 49: the commands said the pytest option (--memerobust-allow-outside-paths) instead of their own."""
    from PIL import Image

    (tmp_path / "data").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "p.png")
    (tmp_path / "data" / "m.csv").write_text("id,image,text,label\na,../p.png,hi,0\nb,../p.png,ho,1\n")
    spec = f"csv:{tmp_path / 'data' / 'm.csv'}"
    assert cli_main(["train", "demo", "--train", spec, "--val", spec, "--out", str(tmp_path / "x.safetensors"),
                     "--quiet", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "leads outside the dataset folder" in err and err.rstrip().endswith("(--allow-outside-paths)")
    assert "--memerobust-" not in err
