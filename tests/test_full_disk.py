"""A full disk is one line and nothing half-written (issue 62): a write that fails with ENOSPC (full_disk.fill: the
kernel's own error, met by each command's real writer) ends `memerobust train` and `memerobust augment` with one line
that names the file and says the disk is full, exit code 2 (the CLI's code for a run stopped with nothing written), no
temporary left behind, and a finished checkpoint from before unchanged."""
from __future__ import annotations

import errno
import importlib.util

import pytest

from pytest_memerobust.atomic import atomic_write_text, writing
from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.data.demo import demo_dataset
from pytest_memerobust.data.digests import input_digest
from pytest_memerobust.data.pictures import to_array
from pytest_memerobust.errors import DiskFull

from full_disk import fill, leftovers, small_disk

FULL = ("memerobust: error: the disk is full writing {} (No space left on device): nothing half-written is left (a "
        "file there before is unchanged); free some space, then ")


def _said(capsys) -> str:
    """The one line the command said (on standard error), with no traceback anywhere."""
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def _train(*args) -> int:
    return cli_main(["train", "demo", "--data", "demo", "--epochs", "1", "--no-cache", "--quiet",
                     "--out", "m.safetensors", *args])


@pytest.mark.parametrize("name", ["m.safetensors", "m.metrics.json", "m.card.toml"])
def test_a_full_disk_at_the_checkpoint_leaves_the_finished_one_and_says_resume(name, tmp_path, capsys, monkeypatch):
    """The checkpoint, its metrics and its card are written as one: whichever fails, none of the three from before
    changes, and the epochs just trained are kept for --resume."""
    monkeypatch.chdir(tmp_path)
    assert _train("--lr", "3e-3") == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert set(before) == {"m.safetensors", "m.metrics.json", "m.card.toml"}
    capsys.readouterr()
    with monkeypatch.context() as patched:
        fill(patched, name)
        assert _train("--lr", "1e-3", "--force") == 2
    assert _said(capsys) == FULL.format(name) + ("run the same command with --resume: it goes on from the epochs kept "
                                                 "in m.train-state.pt")
    assert leftovers(tmp_path) == sorted([*before, "m.train-state.pt"])  # no temporary beside them
    assert {key: (tmp_path / key).read_bytes() for key in before} == before
    # space freed: the same command with --resume writes the checkpoint from the epoch kept, training nothing again
    assert _train("--lr", "1e-3", "--force", "--resume") == 0
    assert '"lr": 0.001' in (tmp_path / "m.metrics.json").read_text(encoding="utf-8")
    assert leftovers(tmp_path) == sorted(before)


def test_a_full_disk_at_the_first_epochs_resume_state_leaves_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fill(monkeypatch, "m.train-state.pt")  # written after each epoch (torch.save)
    assert _train() == 2
    assert _said(capsys) == FULL.format("m.train-state.pt") + "run the command again"
    assert leftovers(tmp_path) == []


def _augment(layout: str) -> int:
    return cli_main(["augment", "--data", "demo:val", "--augment", "jpeg_compression@3:1", "--copies", "1",
                     "--format", layout, "--out", "aug", "--quiet"])


def _first_picture() -> str:
    """The file the first picture of an imagefolder of demo:val goes to: copy 0's first meme, clean."""
    return f"aug/images/{input_digest(to_array(demo_dataset('val').memes[0].picture('cpu')))}.png"


@pytest.mark.parametrize("layout, name, named", [
    ("parquet", "train-00000-of-00001.parquet", "aug/data/train-00000-of-00001.parquet"),
    ("parquet", "README.md", "aug/README.md"),
    ("parquet", "recipe.json", "aug/recipe.json"),
    ("imagefolder", "metadata.jsonl", "aug/metadata.jsonl"),
    ("imagefolder", ".png", None),  # a picture (an atomic write)
])
def test_a_full_disk_in_augment_names_the_file_in_the_set_and_leaves_no_set(layout, name, named, tmp_path, capsys,
                                                                            monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.chdir(tmp_path)
    fill(monkeypatch, name)
    assert _augment(layout) == 2
    assert _said(capsys) == FULL.format(named or _first_picture()) + "run the command again"
    assert leftovers(tmp_path) == []  # neither the set nor its staging folder


def test_a_full_quota_is_said_as_such_and_other_write_errors_are_left_alone(tmp_path):
    with pytest.raises(DiskFull) as info:
        with writing(tmp_path / "x.json"):
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
    assert str(info.value).startswith(f"the disk quota is used up writing {tmp_path / 'x.json'} (Disk quota "
                                      f"exceeded): nothing half-written is left")
    assert isinstance(info.value, OSError)  # the feature cache shrugs off a failed write (OSError) as before
    with pytest.raises(PermissionError):
        with writing(tmp_path / "x.json"):
            raise PermissionError(errno.EACCES, "Permission denied")
    atomic_write_text(tmp_path / "y.json", "{}")  # and a write that fits is as before
    assert leftovers(tmp_path) == ["y.json"]


def test_on_a_real_small_disk_train_and_augment_say_it_in_one_line_and_leave_nothing(tmp_path, capsys, monkeypatch):
    """A 512 KiB tmpfs, as a user meets a full disk: the resume state after epoch 1 (about 730 KB) does not fit, nor
    the augmented set (about 2.7 MiB, Arrow's own writer, which after a failed write has closed its file)."""
    with small_disk(tmp_path / "disk", "512k") as disk:
        monkeypatch.chdir(disk)
        assert _train() == 2  # its feature cache fills the disk first, shrugged off as before
        assert _said(capsys) == FULL.format("m.train-state.pt") + "run the command again"
        assert not [p for p in leftovers(disk) if not p.startswith(".pytest_cache")]
        assert not [p for p in leftovers(disk) if p.endswith(".tmp")]  # the cache's files are whole ones
        if importlib.util.find_spec("datasets") is not None:
            assert cli_main(["augment", "--data", "demo", "--augment", "jpeg_compression@3:1", "--copies", "2",
                             "--out", "aug", "--quiet"]) == 2
            assert _said(capsys) == FULL.format("aug/data/train-00000-of-00001.parquet") + "run the command again"
            assert not [p for p in leftovers(disk) if not p.startswith(".pytest_cache")]
        monkeypatch.chdir(tmp_path)
