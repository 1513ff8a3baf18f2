"""The `memerobust` command's user-facing traps: training never writes into the installed package and reproduces the
shipped demo recipe; `list` shows defences and evasion-budget families and no internal names; `--version`."""
import json
import re

import pytest
from safetensors import safe_open

import pytest_memerobust
from pytest_memerobust.detectors import defences
from pytest_memerobust.cli import hyperparameters, main as cli_main
from pytest_memerobust.detectors.cards import available_cards, builtin_card_dir, file_sha256, find_card, load_card
from pytest_memerobust.judge.budgets import family_names


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
        if not (card.demo_weights and checkpoint and checkpoint.with_suffix(".metrics.json").is_file()):
            continue
        metrics = json.loads(checkpoint.with_suffix(".metrics.json").read_text())
        assert hyperparameters(card.with_demo()) == metrics["hyperparameters"], name
        checked += 1
    assert checked >= 4  # demo, memeclip, memeblip2, memeblip2-tda


def test_train_demo_with_its_defaults_rebuilds_the_shipped_weights_exactly(tmp_path, capsys):
    out = tmp_path / "demo.safetensors"
    assert cli_main(["train", "demo", "--demo", "--out", str(out), "--no-cache", "--quiet"]) == 0
    shipped = find_card("demo").checkpoint_path()
    with safe_open(str(out), "pt") as new, safe_open(str(shipped), "pt") as old:
        assert set(new.keys()) == set(old.keys())
        for key in old.keys():
            assert new.get_tensor(key).equal(old.get_tensor(key)), key
        assert json.loads(new.metadata()["hyperparameters"]) == {"lr": 1e-3, "weight_decay": 1e-4, "epochs": 30,
                                                                 "batch_size": 16}
    metrics = json.loads(out.with_suffix(".metrics.json").read_text())
    shipped_metrics = json.loads(shipped.with_suffix(".metrics.json").read_text())
    assert metrics["best_epoch"] == shipped_metrics["best_epoch"]
    assert [row["val_accuracy"] for row in metrics["history"]] == \
        [row["val_accuracy"] for row in shipped_metrics["history"]]
