"""The public surface: re-exports kept honest, lazy heavy imports, the command line, the network guard."""
import socket
import subprocess
import sys

import pytest

import pytest_memerobust
from pytest_memerobust.cli import main as cli_main


def test_all_lists_exactly_the_public_names():
    """The public names are imported when first read (PEP 562): every name of __all__ reads, and once read they are
    exactly the package's public attributes that are not its modules."""
    for name in pytest_memerobust.__all__:
        assert hasattr(pytest_memerobust, name)
    public = {n for n in vars(pytest_memerobust) if not n.startswith("_") and n[0].isupper() or n in (
        "check", "load_dataset", "load_detector", "load_suite")}
    public -= {m for m in vars(pytest_memerobust) if type(vars(pytest_memerobust)[m]).__name__ == "module"}
    assert set(pytest_memerobust.__all__) - {"__version__"} == public
    assert set(pytest_memerobust.__all__) <= set(dir(pytest_memerobust))
    with pytest.raises(AttributeError, match="no attribute 'Engin'"):
        pytest_memerobust.Engin


def _env_without_omp() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}


def test_the_plugin_imports_nothing_heavy_and_leaves_the_environment_alone():
    """pytest imports the plugin in every run of an environment it is installed in: no numpy, torch, PIL or
    transformers, and no OMP_WAIT_POLICY, until the run uses memerobust; the run's session imports no torch either."""
    code = ("import os, sys, pytest_memerobust.plugin; "
            "print(sorted(m for m in ('numpy', 'torch', 'PIL', 'transformers') if m in sys.modules), "
            "os.environ.get('OMP_WAIT_POLICY')); "
            "import pytest_memerobust.run.session; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=_env_without_omp()).stdout
    assert out.splitlines() == ["[] None", "False"]


@pytest.mark.parametrize("library_use", ["from pytest_memerobust import Engine",
                                         "from pytest_memerobust.engine import Engine",
                                         "from pytest_memerobust.detectors import load_detector"])
def test_library_use_sets_idle_openmp_threads_to_sleep_before_torch(library_use):
    """The public names, and the two packages a library user starts from, set the policy before torch loads."""
    code = (f"import os, sys; {library_use}; "
            "print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=_env_without_omp()).stdout
    assert out.split() == ["PASSIVE", "False"]


def test_pytest_help_shows_the_options_without_the_library(tmp_path):
    """`pytest --help` lists the memerobust options, and an unrelated run imports none of the library."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout
    assert "robustness of harmful-meme detectors:" in out and "--memerobust-model=MEMEROBUST_MODEL" in out
    (tmp_path / "test_x.py").write_text(
        "import os, sys\n\n\ndef test_x():\n"
        "    assert not {'numpy', 'torch', 'PIL', 'pytest_memerobust.run.session'} & set(sys.modules)\n"
        "    assert 'OMP_WAIT_POLICY' not in os.environ\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                          "test_x.py"], capture_output=True, text=True, cwd=tmp_path, env=_env_without_omp())
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


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
