"""Model cards, the demo detector, and checkpoints: found by name, never unpickled, written atomically, and every
bad file named in the error."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from pytest_memerobust.data import demo_dataset
from pytest_memerobust.detectors import find_card, load_card, load_detector
from pytest_memerobust.detectors.checkpoints import load_state_dict, save_state_dict
from pytest_memerobust.errors import CheckpointError, ConfigError, UnknownNameError
from pytest_memerobust.detectors.training import save_trained
from pytest_memerobust.run.training.loop import train_head
from malicious import Evil

ROOT = Path(__file__).resolve().parents[1]
DEMO_WEIGHTS = ROOT / "models" / "demo.safetensors"
DEMO_CARD = ROOT / "models" / "demo.toml"


@pytest.fixture(scope="module")
def memes():
    return demo_dataset("test").head(8).memes


def proba_of(detector, memes) -> np.ndarray:
    return detector.predict_proba([m.image for m in memes], [m.text for m in memes])




# --- cards ------------------------------------------------------------------------------------------------------


def test_find_card_loads_the_shipped_demo_card():
    card = find_card("demo")
    assert card.name == "demo" and card.architecture == "demo"
    assert card.classes == ("non-hateful", "hateful")
    assert card.task == "hate"
    assert card.network.demo_weights is True
    assert card.network.params == {"text_dim": 512, "thumbnail_side": 16, "map_dim": 32, "dropout": 0.2}
    assert card.path.samefile(DEMO_CARD)
    assert card.checkpoint_path().samefile(DEMO_WEIGHTS)


def test_find_card_by_path_is_the_same_card():
    by_path = find_card(str(DEMO_CARD))
    by_name = find_card("demo")
    assert by_path.as_dict() | {"path": None} == by_name.as_dict() | {"path": None}


def test_unknown_model_name_lists_known_cards():
    with pytest.raises(UnknownNameError) as info:
        find_card("no-such-model")
    assert "no-such-model" in str(info.value)
    assert "demo" in str(info.value)
    assert "demo" in info.value.known


def write_card(tmp_path: Path, body: str, name: str = "card.toml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


def test_card_with_unknown_key_names_the_file(tmp_path):
    path = write_card(tmp_path, 'name = "x"\narchitecture = "demo"\nclasses = ["a", "b"]\nweights = "w.pt"\n')
    with pytest.raises(ConfigError) as info:
        find_card(str(path))
    assert str(path) in str(info.value) and "weights" in str(info.value)


@pytest.mark.parametrize("missing", ["name", "architecture", "classes"])
def test_card_with_missing_key_names_the_file(tmp_path, missing):
    lines = {"name": 'name = "x"', "architecture": 'architecture = "demo"', "classes": 'classes = ["a", "b"]'}
    body = "\n".join(v for k, v in lines.items() if k != missing) + "\n"
    path = write_card(tmp_path, body)
    with pytest.raises(ConfigError) as info:
        load_card(path)
    assert str(path) in str(info.value) and missing in str(info.value)


def test_unreadable_card_names_the_file(tmp_path):
    path = write_card(tmp_path, "name = \n")
    with pytest.raises(ConfigError, match="cannot read model card") as info:
        load_card(path)
    assert str(path) in str(info.value)


def test_card_with_unknown_architecture(tmp_path):
    path = write_card(tmp_path, 'name = "x"\narchitecture = "transformer9000"\nclasses = ["a", "b"]\n')
    with pytest.raises(UnknownNameError) as info:
        load_detector(str(path))
    assert "transformer9000" in str(info.value) and "demo" in str(info.value)


def test_card_checkpoint_sha256_is_verified(tmp_path):
    good = hashlib.sha256(DEMO_WEIGHTS.read_bytes()).hexdigest()
    body = (f'name = "pinned"\narchitecture = "demo"\nclasses = ["non-hateful", "hateful"]\n'
            f'checkpoint = "{DEMO_WEIGHTS.as_posix()}"\n')
    ok = write_card(tmp_path, body + f'checkpoint_sha256 = "{good}"\n', "ok.toml")
    assert load_detector(str(ok)).fingerprint == good
    bad = write_card(tmp_path, body + f'checkpoint_sha256 = "{"0" * 64}"\n', "bad.toml")
    with pytest.raises(CheckpointError) as info:
        load_detector(str(bad))
    assert str(DEMO_WEIGHTS) in str(info.value) and good in str(info.value)


# --- the demo detector ------------------------------------------------------------------------------------------


def test_load_demo_detector(memes):
    detector = load_detector("demo")
    p = proba_of(detector, memes)
    assert p.shape == (len(memes), 2)
    assert np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-6)
    assert detector.fingerprint == hashlib.sha256(DEMO_WEIGHTS.read_bytes()).hexdigest()
    assert detector.checkpoint.samefile(DEMO_WEIGHTS)
    assert detector.card.name == "demo"
    assert list(detector.classes) == ["non-hateful", "hateful"]
    # the split path gives the same numbers
    np.testing.assert_allclose(
        detector.head(detector.encode_images([m.image for m in memes]), detector.encode_texts([m.text for m in memes])),
        p)


def test_shipped_weights_beat_chance_on_demo_memes():
    data = demo_dataset("test").head(40)
    p = proba_of(load_detector("demo"), data.memes)
    assert np.mean(p.argmax(1) == data.labels("hate")) > 0.75


def test_untrained_detector_fingerprint():
    card = find_card("demo").without_checkpoint()
    detector = load_detector(card)
    assert detector.checkpoint is None
    assert detector.fingerprint == "untrained:demo"


# --- checkpoints ------------------------------------------------------------------------------------------------


def test_missing_checkpoint(tmp_path):
    path = tmp_path / "nope.safetensors"
    with pytest.raises(CheckpointError) as info:
        load_state_dict(path)
    assert str(path) in str(info.value)
    with pytest.raises(CheckpointError) as info:
        load_detector("demo", checkpoint=path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("content", [
    pytest.param(np.random.default_rng(0).bytes(512), id="random-bytes"),
    pytest.param(b"abc", id="too-short"),
    pytest.param(b"", id="empty"),
    pytest.param((9).to_bytes(8, "little") + b"{not json", id="bad-header"),
])
def test_corrupt_safetensors(tmp_path, content):
    path = tmp_path / "corrupt.safetensors"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        load_state_dict(path)
    assert str(path) in str(info.value) and "corrupt" in str(info.value)


def test_truncated_safetensors(tmp_path):
    path = tmp_path / "cut.safetensors"
    path.write_bytes(DEMO_WEIGHTS.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match="corrupt") as info:
        load_detector("demo", checkpoint=path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("suffix", [".h5", ".pkl", ".onnx", ""])
def test_unsupported_suffix(tmp_path, suffix):
    path = tmp_path / f"weights{suffix}"
    path.write_bytes(b"\x89HDF\r\n\x1a\n")
    with pytest.raises(CheckpointError) as info:
        load_state_dict(path)
    assert str(path) in str(info.value) and "unsupported" in str(info.value)


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".ckpt", ".bin"])
def test_pickled_object_is_refused_without_running_code(tmp_path, suffix):
    marker = tmp_path / "marker.txt"
    path = tmp_path / f"evil{suffix}"
    torch.save({"x": Evil(marker)}, path)
    assert not marker.exists()
    with pytest.raises(CheckpointError) as info:
        load_state_dict(path)
    assert str(path) in str(info.value) and "weights_only" in str(info.value)
    assert not marker.exists()
    with pytest.raises(CheckpointError):
        load_detector("demo", checkpoint=path)
    assert not marker.exists()


def test_the_evil_pickle_really_would_run_code(tmp_path):
    """Control for the test above: an unrestricted load does write the marker, so its absence means something."""
    marker = tmp_path / "marker.txt"
    path = tmp_path / "evil.pt"
    torch.save({"x": Evil(marker)}, path)
    torch.load(path, weights_only=False)
    assert marker.read_text() == "pwned"


@pytest.mark.parametrize("content", [np.random.default_rng(1).bytes(300), b""], ids=["random", "empty"])
def test_garbage_torch_file(tmp_path, content):
    path = tmp_path / "garbage.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        load_state_dict(path)
    assert str(path) in str(info.value)


def test_torch_file_without_a_state_dict(tmp_path):
    path = tmp_path / "list.pt"
    torch.save([torch.ones(2)], path)
    with pytest.raises(CheckpointError, match="holds no state dict") as info:
        load_state_dict(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("wrap", [False, True], ids=["plain", "state_dict-key"])
def test_torch_state_dict_of_tensors_loads(tmp_path, memes, wrap):
    shipped = load_detector("demo")
    state = shipped.shipped_state()
    path = tmp_path / "weights.pt"
    torch.save({"state_dict": state, "epoch": 3} if wrap else state, path)
    loaded, metadata = load_state_dict(path)
    assert metadata == {}
    assert set(loaded) == set(state)
    for k in state:
        assert torch.equal(loaded[k], state[k])
    detector = load_detector("demo", checkpoint=path)
    np.testing.assert_array_equal(proba_of(detector, memes), proba_of(shipped, memes))
    assert detector.fingerprint == hashlib.sha256(path.read_bytes()).hexdigest()


def test_safetensors_with_wrong_keys(tmp_path):
    path = tmp_path / "other.safetensors"
    state = dict(load_detector("demo").shipped_state())
    state["extra.weight"] = state.pop("classifier.2.weight")
    save_state_dict(state, path)
    with pytest.raises(CheckpointError) as info:
        load_detector("demo", checkpoint=path)
    message = str(info.value)
    assert str(path) in message
    assert "missing ['classifier.2.weight']" in message
    assert "unexpected ['extra.weight']" in message


def test_safetensors_with_wrong_shape(tmp_path):
    path = tmp_path / "shape.safetensors"
    state = dict(load_detector("demo").shipped_state())
    state["text_projection.weight"] = torch.zeros(32, 256)
    save_state_dict(state, path)
    with pytest.raises(CheckpointError) as info:
        load_detector("demo", checkpoint=path)
    assert str(path) in str(info.value) and "wrong shape ['text_projection.weight']" in str(info.value)


def test_non_tensor_value_in_state_dict(tmp_path):
    state = dict(load_detector("demo").shipped_state())
    state["classifier.2.bias"] = 1
    path = tmp_path / "mixed.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError):
        load_detector("demo", checkpoint=path)


def test_save_state_dict_round_trip_and_metadata(tmp_path):
    path = tmp_path / "sub" / "w.safetensors"
    tensors = {"a": torch.arange(6, dtype=torch.float32).reshape(2, 3).t(), "b": torch.ones(2)}  # a is not contiguous
    save_state_dict(tensors, path, metadata={"card": "demo", "best_epoch": 3, "auc": 0.5})
    loaded, metadata = load_state_dict(path)
    assert torch.equal(loaded["a"], tensors["a"]) and torch.equal(loaded["b"], tensors["b"])
    assert metadata == {"card": "demo", "best_epoch": "3", "auc": "0.5"}
    assert os.listdir(path.parent) == ["w.safetensors"]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_save_state_dict_is_atomic(tmp_path, monkeypatch):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    path = folder / "w.safetensors"
    save_state_dict({"a": torch.ones(3)}, path)
    before = path.read_bytes()

    real_write = Path.write_bytes

    def disk_full(self, data):  # half the file written, then the disk fills up
        real_write(self, data[: len(data) // 2])
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_bytes", disk_full)
    with pytest.raises(OSError, match="disk full"):
        save_state_dict({"a": torch.zeros(100)}, path)
    assert path.read_bytes() == before
    assert os.listdir(folder) == ["w.safetensors"]
    monkeypatch.undo()
    loaded, _ = load_state_dict(path)
    assert torch.equal(loaded["a"], torch.ones(3))


def test_save_state_dict_failure_with_no_previous_file_leaves_nothing(tmp_path, monkeypatch):
    real_write = Path.write_bytes

    def killed(self, data):
        real_write(self, b"half")
        raise RuntimeError("killed")

    monkeypatch.setattr(Path, "write_bytes", killed)
    with pytest.raises(RuntimeError):
        save_state_dict({"a": torch.ones(3)}, tmp_path / "new.safetensors")
    assert os.listdir(tmp_path) == []


# --- training round trip ----------------------------------------------------------------------------------------


def test_train_save_and_load_back(tmp_path, memes):
    torch.manual_seed(0)
    card = find_card("demo").without_checkpoint()
    detector = load_detector(card)
    before = proba_of(detector, memes)
    result = train_head(detector, demo_dataset("train"), demo_dataset("val"), epochs=3)
    assert 1 <= result.best_epoch <= 3
    assert [row["epoch"] for row in result.history] == [1, 2, 3]
    assert result.best_val_auroc == max(row["val_auroc"] for row in result.history)
    after = proba_of(detector, memes)
    assert not np.allclose(before, after)

    path = tmp_path / "trained.safetensors"
    save_trained(detector, path, card, result, {"epochs": 3})
    summary = json.loads(path.with_suffix(".metrics.json").read_text())
    assert summary["best_epoch"] == result.best_epoch and summary["history"] == result.history
    assert summary["hyperparameters"] == {"epochs": 3}
    written_card = load_card(path.with_suffix(".card.toml"))
    assert (written_card.name, written_card.checkpoint_path()) == ("demo", path)
    _, metadata = load_state_dict(path)
    assert metadata["card"] == "demo" and int(metadata["best_epoch"]) == result.best_epoch

    reloaded = load_detector("demo", checkpoint=path)
    np.testing.assert_array_equal(proba_of(reloaded, memes), after)
    assert reloaded.fingerprint == hashlib.sha256(path.read_bytes()).hexdigest()
    assert reloaded.fingerprint != load_detector("demo").fingerprint


def test_a_safetensors_file_under_a_torch_suffix_loads_as_safetensors(tmp_path):
    from pytest_memerobust.detectors.checkpoints import load_state_dict, save_state_dict

    weights = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
    save_state_dict(weights, tmp_path / "head.safetensors", metadata={"card": "x"})
    renamed = tmp_path / "head.pt"
    (tmp_path / "head.safetensors").rename(renamed)
    state, metadata = load_state_dict(renamed)
    assert torch.equal(state["w"], weights["w"]) and metadata == {"card": "x"}
    torch.save({"w": weights["w"]}, tmp_path / "pickled.pt")  # a real torch file still goes through torch.load
    assert torch.equal(load_state_dict(tmp_path / "pickled.pt")[0]["w"], weights["w"])


def test_train_refuses_an_out_path_that_is_not_safetensors_before_any_work(tmp_path, capsys):
    from pytest_memerobust.cli import main as cli_main

    code = cli_main(["train", "demo", "--data", "demo", "--out", str(tmp_path / "head.pt"), "--quiet"])
    assert code != 0
    assert "head.safetensors" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
