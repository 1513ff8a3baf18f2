"""The project's own tests run with the network cut: a hidden download fails loudly here instead of passing on a
machine that happens to be online. Only this machine's loopback is reachable (the Ray clusters tests start)."""
import os
import socket
from pathlib import Path

import pytest

# Idle OpenMP threads sleep, as in a memerobust run (pytest_memerobust/openmp.py), set before torch loads OpenMP:
# these tests import torch before the plugin knows whether a run uses it. With `-n 2` on 2 cores the tests took 105 s
# with spinning threads and 40 s with sleeping ones (docs/benchmarks.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# A run that writes reports appends its verdict to the CI job summary GitHub names here (track/github.py): the
# project's own test runs, in a GitHub Actions job, would append hundreds of them to that job's page. Tests that check
# it set their own.
os.environ.pop("GITHUB_STEP_SUMMARY", None)

_real_connect = socket.socket.connect


class NetworkBlocked(RuntimeError):
    pass


LOOPBACK = ("127.0.0.1", "::1", "localhost")  # servers the tests start on this machine (a Ray cluster)


def _guarded(self, address, *args, **kwargs):
    if self.family == getattr(socket, "AF_UNIX", object()) or (isinstance(address, tuple) and address[0] in LOOPBACK):
        return _real_connect(self, address, *args, **kwargs)
    raise NetworkBlocked(f"network access attempted during tests: connect to {address!r}")


def _import_what_tests_share():
    """The modules every test process needs imported once, before any test runs (why each, below)."""
    # pytester's in-process runs drop the modules they imported when they end; torch._dynamo (imported lazily, e.g.
    # by an optimizer step) registers C++ operator libraries that cannot be registered twice, so a second in-process
    # run that imports it again fails. Imported once here, it stays for the whole session.
    import torch._dynamo  # noqa: F401
    # Likewise transformers' model modules: re-imported after a pytester run dropped them, a model loaded with
    # from_pretrained is left with CLIP's `position_ids` buffer uninitialised (its weight initialisation looks the
    # module's classes up by identity), and the tiny LLaVA then indexes past its position embeddings.
    import transformers.models.clip.modeling_clip  # noqa: F401
    import transformers.models.llava.modeling_llava  # noqa: F401
    import transformers.models.qwen2_vl.modeling_qwen2_vl  # noqa: F401
    import transformers.models.idefics3.modeling_idefics3  # noqa: F401
    import transformers.models.siglip.modeling_siglip  # noqa: F401
    import transformers.models.gemma3.modeling_gemma3  # noqa: F401
    import transformers.models.shieldgemma2.modeling_shieldgemma2  # noqa: F401
    # And matplotlib, which the re-rendered captions ask for its DejaVu Sans Bold: imported first inside a pytester run
    # and dropped, it comes back with new classes, and a figure made later meets a GridSpec it does not recognise.
    import matplotlib.figure  # noqa: F401
    import matplotlib.lines  # noqa: F401
    import matplotlib.patches  # noqa: F401
    import matplotlib.style  # noqa: F401


def _runs_tests(config) -> bool:
    """False in pytest-xdist's controller, which hands the tests to its workers and runs none: the imports above
    cost it 10 to 13 s on one core before the first worker starts."""
    return getattr(config, "workerinput", None) is not None or not config.getoption("numprocesses", None)


TEXTATTACK_ADAPTER = Path(__file__).parent / "textattack_adapter"


def _runs_only_the_textattack_adapter(config) -> bool:
    """The adapter's tests (tests/textattack_adapter/run.sh, in their own environment) make one in-process run in a
    worker at most and load none of the models above: the imports cost each of its workers about 21 s (transformers
    4's torch._dynamo alone 11 s) before its first test."""
    return all(Path(arg.partition("::")[0]).resolve().is_relative_to(TEXTATTACK_ADAPTER) for arg in config.args)


def pytest_configure(config):
    if _runs_tests(config) and not _runs_only_the_textattack_adapter(config):
        _import_what_tests_share()
    socket.socket.connect = _guarded
    socket.socket.connect_ex = _guarded
    _share_the_cores(config)


def _share_the_cores(config):
    """A pytest-xdist worker computes with its share of the cores (`-n 2` on 2 cores: one thread each), as the
    plugin's own workers do (session.share_cpu_threads): at torch's default, one thread per core, the workers' thread
    pools busy-wait on each other (measured on 2 cores: a MiniLM batch took 4x as long at 2 threads in each of two
    processes as at 1). Results do not depend on it (determinism.py); the tests that compare thread counts set
    theirs."""
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, int(worker.get("workercount", 1)))))


# Modules whose every test runs end to end in other processes; elsewhere a test is e2e when its own source starts
# one (E2E_CALLS)
E2E_MODULES = frozenset({"test_ray", "test_pool_cost", "test_pool_kill", "test_pool_restart", "test_local_pool",
                         "test_xdist", "test_hosted_rate"})
E2E_CALLS = ("runpytest_subprocess(", "subprocess.run(", "subprocess.Popen(", "subprocess.check_", "spawn_pytest(",
             "--memerobust-workers", "--memerobust-ray", "workers=2", "workers=4")


def _starts_other_processes(item) -> bool:
    import inspect

    if Path(str(item.fspath)).stem in E2E_MODULES:
        return True
    try:
        source = inspect.getsource(item.function)
    except (OSError, TypeError, AttributeError):
        return False
    return any(call in source for call in E2E_CALLS)


def pytest_collection_modifyitems(config, items):
    """The `e2e` marker (pyproject's markers) on every test that runs in other processes."""
    for item in items:
        if _starts_other_processes(item):
            item.add_marker(pytest.mark.e2e)


def pytest_unconfigure(config):
    socket.socket.connect = _real_connect
    socket.socket.connect_ex = socket.socket.__dict__.get("connect_ex", _real_connect)


pytest_plugins = ["pytester"]
