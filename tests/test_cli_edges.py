"""The memerobust command at its edges: a value no run could mean is one usage error before anything loads, and a
signal ends a command with one line and the shell's exit status."""
import signal
import subprocess
import sys

import pytest

from pytest_memerobust.cli import main


@pytest.mark.parametrize("argv", [["train", "demo", "--demo", "--out", "x.safetensors"],
                                  ["export", "r.json", "--out", "out"],
                                  ["budgets", "demo", "--data", "demo"]])
def test_an_unknown_device_is_one_usage_error(tmp_path, monkeypatch, capsys, argv):
    """--device tpu was a 35-line traceback from torch after the card, data and detector had loaded."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--device", "tpu"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith("argument --device: expected auto, cpu, cuda, cuda:N or mps, got "
                                                 "'tpu'")
    assert "Traceback" not in err and not list(tmp_path.iterdir())


SLEEPER = """
import sys, time
from pytest_memerobust import cli
from pytest_memerobust.cli import listing
def slow(args):
    print("started", flush=True)
    time.sleep(60)
    return 0
listing.run = slow
sys.exit(cli.main(["list"]))
"""


def signals_as_in_a_terminal() -> None:
    """`preexec_fn` for a child that is sent SIGINT: a test run started in the background (`cmd &` in a shell)
    ignores SIGINT, and its children would inherit that and never see the signal (as test_run_edges does)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stopped(process: subprocess.Popen, signum: int) -> tuple[str, int, str]:
    """Once `process` prints its first line, send it `signum`: that line, its exit status and standard error. A
    process that outlives the wait is killed (by its own pid) before the test goes on."""
    try:
        line = process.stdout.readline()
        if line:
            process.send_signal(signum)
        return line, process.wait(timeout=60), process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_a_command_with_one_line(signum, code):
    process = subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=signals_as_in_a_terminal)
    assert stopped(process, signum) == ("started\n", code, "memerobust list: interrupted\n")
