"""Runs on Ray clusters on this machine (engine/executors.py): a local cluster gives the report one process gives, on
the built-in suites, and a two-node cluster on 127.0.0.1 one process's records of the cases it ran, a case of each
kind of condition; an actor killed while it holds a shard (executors' test-only hold) is restarted and the shard
evaluated again, the report unchanged; SIGTERM mid-shard ends the run on pytest's interrupted path with every Ray
process of the run gone; a cluster that cannot be reached, an address where something else listens, or a cluster
without the GPU the run asks for is one usage error before any case.

Ray is the [ray] extra (also in [dev]); without it these tests skip. Every cluster a test starts is stopped by it,
and only its own processes are ended."""
from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from report_compare import comparable
from small_fits import patch_small_fits, small_fits_plugin

ray = pytest.importorskip("ray", reason="Ray is the [ray] extra (pip install 'pytest-memerobust[ray]')")

MODEL = "memeblip2-tda"
# the built-in suites on 8 memes in shards of 4: two shards per engine, so two actors share every pass (8 memes,
# not 16, halve what every run here evaluates; the suites' cases still pass, fail and skip)
RUN = [f"--memerobust-model={MODEL}", "--memerobust-limit=8", "--memerobust-batch-size=4",
       "--memerobust-shard-size=4", "--memerobust-bootstrap=50", "--memerobust-tables=none", "-p", "no:cacheprovider",
       "-p", "no:randomly", "-q"]
RAY_BIN = Path(sys.executable).with_name("ray")


# Universal attacks fitted on 16 training memes, the UAP in 5 steps (their defaults: 64 memes, 20 steps): these tests
# check that a run's fits reach every shard unchanged, not their strength. The fits are made in the run's driver,
# made small there by small_fits_plugin (-p small_fits) or by patch_small_fits; Ray's actors get them with the shards
# (a fit an actor made itself, at full size, would differ from one process's and fail the comparison).
FIT_MEMES, UAP_STEPS = 16, 5
def _run(folder: Path, name: str, *extra: str, env: dict | None = None) -> tuple[int, dict, str]:
    report = folder / f"{name}.json"
    plugins = folder / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / "small_fits.py").write_text(small_fits_plugin(FIT_MEMES, UAP_STEPS))
    path = os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-m", "pytest", *RUN, "-p", "small_fits", *extra,
                          f"--memerobust-report={report}", f"--memerobust-cache-dir={folder / name}"], cwd=folder,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path, **(env or {})},
                         timeout=900)
    assert report.is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    return run.returncode, json.loads(report.read_text()), run.stdout


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    # workers=1: one process outside pytest-xdist too, where the default is a pool of worker processes
    return _run(tmp_path_factory.mktemp("one-process"), "one-process", "--memerobust-workers=1")


def test_a_local_ray_cluster_reports_what_one_process_reports(one_process, tmp_path):
    code, report, out = _run(tmp_path, "local", "--memerobust-ray=local:2")
    assert code == one_process[0]
    assert len(report["cases"]) == len(one_process[1]["cases"]) > 100
    assert comparable(report) == comparable(one_process[1])
    # the run's note counts what the actors encoded, not only the driver: about what the other run encoded (each
    # process's store is its own, so an input met in two processes' shards counts twice)
    encoded = [re.search(r"encoded (\d+) pictures and (\d+) captions", text).groups() for text in (out, one_process[2])]
    for ray_run, other in zip(*encoded):
        assert int(other) > 0 and 0.8 * int(other) <= int(ray_run) <= 1.25 * int(other), encoded


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> tuple[bool, int]:
    """(whether process `pid` runs: not ended, nor a zombie not reaped yet; its session id), from /proc/PID/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False, 0
    return fields[0] not in "ZX", int(fields[3])  # fields 3 and 6 of /proc/PID/stat: the state, the session id


def _in_session(sid: int) -> list[int]:
    """The live processes of session `sid`: a process started with start_new_session and every process it started
    (Ray's GCS, raylet, agents and workers keep its session id)."""
    pids = [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    return [pid for pid in pids if _alive(pid) == (True, sid)]


def _end_session(leader: subprocess.Popen) -> None:
    """End `leader` (started with start_new_session) and every process it started, and nothing else."""
    for pid in _in_session(leader.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    leader.wait(timeout=30)


@pytest.fixture
def two_nodes(tmp_path):
    """A head and a second node, one CPU each, on 127.0.0.1, with a token of their own: (address, environment)."""
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    common = ["--num-cpus=1", "--node-ip-address=127.0.0.1", "--disable-usage-stats", "--block"]
    nodes = [subprocess.Popen([str(RAY_BIN), "start", "--head", f"--port={port}", "--include-dashboard=false",
                               *common], env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    try:
        address = f"127.0.0.1:{port}"
        for _ in range(60):  # the head listens within seconds
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        nodes.append(subprocess.Popen([str(RAY_BIN), "start", f"--address={address}", *common], env=env,
                                      start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        probe = ("import ray, sys, time\nray.init(address=sys.argv[1], log_to_driver=False)\n"
                 "for _ in range(60):\n    if len([n for n in ray.nodes() if n['Alive']]) == 2: break\n"
                 "    time.sleep(0.5)\nprint(len([n for n in ray.nodes() if n['Alive']]))")
        alive = subprocess.run([sys.executable, "-c", probe, address], env=env, capture_output=True, text=True,
                               timeout=120)
        assert alive.stdout.strip().endswith("2"), alive.stderr[-2000:]
        yield address, {k: env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    finally:
        for node in reversed(nodes):
            _end_session(node)


# The two-node run's cases, one of each kind of condition (the local run above has every case): a text edit, HotFlip,
# the fitted universal trigger and UAP, ImageNet-C and AugMix pictures, and a text x image pair (HotFlip, fitted UAP)
TWO_NODE_CASES = ("clean", "typos-1", "hotflip-1", "universal_trigger-1", "uap-1", "imagenet_c-1", "augmix-1",
                  "hotflip-3+uap-3")
# what a report says of the whole selection of cases (the verdict, the grids, the worst examples), or of the Python
# suites, which the two-node run leaves out
SELECTION_WIDE = ("verdict", "grid_text", "grid_image", "grid_summary", "worst_examples", "reliance")


def _records(report: dict) -> dict:
    """A report's records by what each is of: a case by node id, a clean or perturbed result by model, suite and
    condition, a model's entry by name, and the rest of the run's entries by key; without SELECTION_WIDE's, so a run
    of some of the cases has the records of a run of every case, where it has one."""
    report = comparable(report)
    records = {("case", case["nodeid"]): case for case in report["cases"]}
    for group in report["groups"]:
        for result in (group["clean"], *group["results"]):
            records["result", group["model"], group["suite"], result["condition"]] = result
        records["group", group["model"], group["suite"]] = {k: v for k, v in group.items()
                                                             if k not in ("clean", "results", *SELECTION_WIDE)}
    records.update({("model", name): entry for name, entry in report["models"].items()})
    records.update({(key,): value for key, value in report.items()
                    if key not in ("cases", "groups", "models", *SELECTION_WIDE)})
    return records


def test_a_two_node_cluster_on_127_0_0_1_reports_what_one_process_reports(one_process, two_nodes, tmp_path):
    address, env = two_nodes
    code, report, _ = _run(tmp_path, "two-nodes", f"--memerobust-ray={address}", "-k",
                           f"rainbow-noise and ({' or '.join(TWO_NODE_CASES)})", env=env)
    assert [case["nodeid"] for case in report["cases"]] == [f"rainbow-noise::{MODEL}::{name}"
                                                           for name in TWO_NODE_CASES]
    assert len([key for key in _records(report) if key[0] == "result"]) == len(TWO_NODE_CASES)  # clean's, and each's
    # every record of the cases it ran (each result's probabilities by digest) is the one-process run's
    alone = _records(one_process[1])
    assert _records(report) == {key: alone.get(key) for key in _records(report)}
    assert code == (pytest.ExitCode.TESTS_FAILED if any(case["outcome"] == "failed" for case in report["cases"])
                    else pytest.ExitCode.OK)


@pytest.fixture
def hold(tmp_path, monkeypatch):
    """A folder where each actor notes the shards it evaluates and holds those named there (executors.hold_for_tests),
    so a test acts provably mid-shard; set before any cluster starts, whose actors inherit it."""
    from pytest_memerobust.engine.executors import HOLD_ENV

    folder = tmp_path / "hold"
    folder.mkdir()
    monkeypatch.setenv(HOLD_ENV, str(folder))
    yield folder
    for held in folder.glob("hold-*"):  # a shard still held ends its wait
        held.unlink()


def _noted(hold: Path, index: int, deadline_s: float = 300, running: subprocess.Popen | None = None) -> list[int]:
    """The processes that evaluated shard `index` (at least one: waits for it, as long as `running` runs)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and (running is None or running.poll() is None):
        pids = [int(p.name.rpartition("-")[2]) for p in hold.glob(f"shard-{index}-pid-*")]
        if pids:
            return pids
        time.sleep(0.05)
    raise AssertionError(f"no actor evaluated shard {index} in {deadline_s} s")


def test_an_actor_killed_mid_shard_is_restarted_and_its_shard_evaluated_again_changing_nothing(hold, monkeypatch):
    from pytest_memerobust.engine import Condition
    from pytest_memerobust.judge.results import StatsConfig
    from pytest_memerobust.run.options import CacheOptions, ComputeOptions, DataOptions, JudgingOptions, Options

    from pytest_memerobust.run.session import RobustnessSession

    # 8 memes in shards of 4 on one actor (two would share 2 cores): shard 0, then shard 1, held and killed; the
    # attacks are fitted before the shards and shipped to the actor (hotflip's captions, the UAP's pattern)
    conditions = [Condition(text="typos", text_severity=3), Condition(image="gaussian_noise", image_severity=3),
                  Condition(text="hotflip", text_severity=1), Condition("typos", 3, "uap", 1)]

    def evaluate(ray_target, during=None):
        session = RobustnessSession(Options(models=(MODEL,), data=DataOptions(limit=8),
                                            compute=ComputeOptions(batch_size=4, shard_size=4,
                                                                   cache=CacheOptions(features=False), ray=ray_target),
                                            judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
        try:
            for condition in conditions:
                session.plan(MODEL, None, condition)
            if during is not None:
                during(session.executor)
            proba = {c.id: session.evaluate(MODEL, c).answers.proba for c in conditions}
            report = json.dumps(comparable(session.report()), sort_keys=True).encode()
            return proba, report, session.executor.actor_pids() if ray_target else []
        finally:
            session.close()

    returned, killed = [], {}  # (shard, pid that evaluated it) as the driver got them; what the kill saw

    def kill_mid_shard(executor):
        run = executor.run

        def recorded(*args):
            for result in run(*args):
                returned.append((result.index, result.accounting.pid))
                yield result

        executor.run = recorded

        def kill():
            try:
                (pid,) = _noted(hold, 1)  # the actor evaluated shard 1 and now waits in hold_for_tests
                killed["returned before"] = list(returned)
                os.kill(pid, signal.SIGKILL)  # an actor of the cluster this test's session started
                deadline = time.monotonic() + 30
                while _alive(pid)[0] and time.monotonic() < deadline:
                    time.sleep(0.01)
                killed.update(pid=pid, gone=not _alive(pid)[0], held=(hold / "hold-1").exists())
            finally:
                (hold / "hold-1").unlink(missing_ok=True)  # the retry goes through

        threading.Thread(target=kill, daemon=True).start()

    patch_small_fits(monkeypatch, FIT_MEMES, UAP_STEPS)  # for both sessions: their fits are made here
    (hold / "hold-1").touch()
    alone, alone_report, _ = evaluate(None)  # in this process: no actor, nothing held or noted
    assert not list(hold.glob("shard-*"))
    with_a_kill, report, actors = evaluate("local:1", kill_mid_shard)
    # the kill landed mid-shard: shard 1 was evaluated by that actor, which was still held (its result not handed
    # back) when it died, and the driver had not received shard 1
    assert killed["gone"] and killed["held"], killed
    assert 1 not in [index for index, _ in killed["returned before"]]
    # shard 1 was evaluated again, by the restarted actor, and every shard by an actor, not by this process
    again = [pid for index, pid in returned if index == 1]
    assert len(again) == 1 and actors == again != [killed["pid"]]
    assert sorted(_noted(hold, 1)) == sorted([killed["pid"], again[0]])
    assert sorted(index for index, _ in returned) == [0, 1]
    assert {pid for _, pid in returned} <= {killed["pid"], *actors} and os.getpid() not in {killed["pid"], *actors}
    for condition in conditions:
        assert with_a_kill[condition.id].tobytes() == alone[condition.id].tobytes(), condition.id
    assert report == alone_report


def test_sigterm_mid_shard_ends_a_ray_run_as_interrupted_and_leaves_no_ray_process(hold, tmp_path):
    """Ray's own SIGTERM handler (a sys.exit inside ray.wait) ended pytest in a SIGABRT (exit 134), nothing printed,
    with Ray's agents left running."""
    (hold / "hold-0").touch()
    # one case, typos: nothing to fit before the shards; its 8 memes in one shard, so one actor builds an engine and
    # holds, the other is started and idle (each shard's engine costs an actor a model load)
    report = tmp_path / "r.json"
    run = subprocess.Popen([sys.executable, "-m", "pytest", *RUN, "--memerobust-shard-size=8",
                            "--memerobust-ray=local:2", "-k", "rainbow and typos-3 and not uap and not imagenet_c and "
                            "not augmix", f"--memerobust-report={report}",
                            f"--memerobust-cache-dir={tmp_path / 'cache'}"],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    try:
        _noted(hold, 0, running=run)  # an actor evaluated shard 0 and holds it; the driver waits for it
        started = _in_session(run.pid)
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=120)
        deadline = time.monotonic() + 30  # Ray's processes end once the driver shut the cluster down
        while _in_session(run.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _in_session(run.pid)
    finally:
        _end_session(run)
    assert len(started) >= 5  # pytest, Ray's GCS and raylet, the two actors at least
    assert run.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    assert f"memerobust: interrupted: {report}" in out, out[-3000:]
    assert not report.exists() or json.loads(report.read_text())["groups"] == []  # no numbers of a part of the run
    assert not left, [Path(f"/proc/{pid}/cmdline").read_bytes()[:80] for pid in left]


def test_an_address_where_something_else_listens_is_one_usage_error_within_seconds():
    """Ray retries such an address for minutes: the run checks for a gRPC server there first (a ConfigError is
    pytest's usage error, as the next test shows)."""
    import http.server

    from pytest_memerobust.engine.executors import RayActors
    from pytest_memerobust.errors import ConfigError

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

    silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nothing is ever said
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        for server, said in ((silent, "it said nothing in 5 s)"), (web.socket, "it answered '")):
            address = f"127.0.0.1:{server.getsockname()[1]}"
            started = time.monotonic()
            with pytest.raises(ConfigError) as error:
                RayActors(address)
            assert time.monotonic() - started < 10
            assert str(error.value).startswith(f"--memerobust-ray={address}: something listens at {address} but it "
                                               f"is not a Ray cluster ({said}")
    finally:
        web.shutdown()
        web.server_close()
        silent.close()
    assert not ray.is_initialized()


def test_an_unreachable_cluster_is_one_usage_error_before_any_case(tmp_path):
    port = _free_port()  # nothing listens there
    # on the CPU named, not auto: no torch imported to look for a GPU; the cluster is reached before any model loads
    run = subprocess.run([sys.executable, "-m", "pytest", *RUN, "--memerobust-device=cpu",
                          f"--memerobust-ray=127.0.0.1:{port}"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 4  # pytest's usage error
    assert f"--memerobust-ray=127.0.0.1:{port}: no Ray cluster answers at 127.0.0.1:{port}" in run.stderr
    assert "passed" not in run.stdout and "failed" not in run.stdout


def test_ray_with_pytest_xdist_or_a_bad_target_is_a_usage_error(tmp_path):
    for extra, message in ((["--memerobust-ray=local:2", "-n", "2"], "--memerobust-ray with pytest-xdist"),
                           (["--memerobust-ray=local:0"], "local:N needs a number of CPUs >= 1")):
        run = subprocess.run([sys.executable, "-m", "pytest", *RUN, *extra], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 4, run.stdout[-2000:] + run.stderr[-2000:]
        assert message in run.stderr


def test_a_cluster_without_a_gpu_is_refused_when_the_run_asks_for_one():
    from pytest_memerobust.engine.executors import RayActors
    from pytest_memerobust.errors import ConfigError

    with pytest.raises(ConfigError, match="asks for a GPU .* but the cluster has none"):
        RayActors("local:1", gpus=True)
    assert not ray.is_initialized()  # the cluster it started for the check is gone
