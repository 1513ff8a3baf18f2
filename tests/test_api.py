"""The public surface: re-exports kept honest, lazy heavy imports, the command line, the network guard."""
import socket
import subprocess
import sys

import pytest

import pytest_memerobust
from pytest_memerobust.cli import main as cli_main


def test_all_lists_exactly_the_public_names():
    public = {n for n in vars(pytest_memerobust) if not n.startswith("_") and n[0].isupper() or n in (
        "check", "load_dataset", "load_detector", "load_suite")}
    public -= {m for m in vars(pytest_memerobust) if type(vars(pytest_memerobust)[m]).__name__ == "module"}
    assert set(pytest_memerobust.__all__) - {"__version__"} == public
    for name in pytest_memerobust.__all__:
        assert hasattr(pytest_memerobust, name)


def test_the_plugin_imports_without_torch():
    code = "import sys, pytest_memerobust.plugin, pytest_memerobust.run.session; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_memerobust_list_names_the_registered_pieces(capsys):
    assert cli_main(["list"]) == 0
    out = capsys.readouterr().out
    assert "models:\n  demo " in out and "memeclip-vit-l-14" in out
    assert "typos" in out and "gaussian_noise" in out and "severities [1, 2, 3, 4, 5]" in out
    assert "pridemm" in out and "hateful_memes" in out and "rainbow-noise.toml" in out


def test_cli_errors_name_the_culprit(capsys):
    assert cli_main(["train", "no-such-card"]) == 2
    assert "unknown model 'no-such-card'; known: demo" in capsys.readouterr().err


def test_train_demo_rebuilds_the_shipped_weights_on_the_demo_memes(tmp_path, capsys):
    import shutil

    from pytest_memerobust.detectors import find_card

    assert cli_main(["train", "demo"]) == 2  # where would the checkpoint go?
    assert "--out PATH for the checkpoint, or --demo" in capsys.readouterr().err
    card = tmp_path / "demo.toml"  # a copy, so the shipped checkpoint is left alone
    shutil.copy(find_card("demo").path, card)
    assert cli_main(["train", str(card), "--demo", "--epochs", "1", "--no-cache", "--quiet"]) == 0
    assert (tmp_path / "demo.safetensors").is_file() and (tmp_path / "demo.metrics.json").is_file()
    assert "best epoch 1" in capsys.readouterr().out


def test_network_is_cut_during_the_tests():
    """Every address but this machine's loopback (where the Ray tests start their clusters) is cut."""
    with pytest.raises(RuntimeError, match="network access attempted"):
        socket.create_connection(("192.0.2.1", 9), timeout=1)  # TEST-NET-1: never routed
    with pytest.raises(ConnectionRefusedError):  # loopback is reached: nothing listens on port 9 here
        socket.create_connection(("127.0.0.1", 9), timeout=1)
