"""Runs on Ray clusters on this machine (engine/executors.py): a local cluster and a two-node cluster on 127.0.0.1
give the report one process gives, on the built-in suites; an actor killed mid-run is restarted and its shard run
again, the results unchanged; a cluster that cannot be reached, or lacks the GPU the run asks for, is one usage
error before any case.

Ray is the [ray] extra (also in [dev]); without it these tests skip. Every cluster a test starts is stopped by it,
and only its own processes are ended."""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from report_compare import comparable

ray = pytest.importorskip("ray", reason="Ray is the [ray] extra (pip install 'pytest-memerobust[ray]')")

MODEL = "memeblip2-tda"
# the built-in suites on 16 memes in shards of 8: two shards per engine, so two actors share every pass
RUN = [f"--memerobust-model={MODEL}", "--memerobust-limit=16", "--memerobust-batch-size=8",
       "--memerobust-shard-size=8", "--memerobust-bootstrap=50", "--memerobust-tables=none", "-p", "no:cacheprovider",
       "-p", "no:randomly", "-q"]
RAY_BIN = Path(sys.executable).with_name("ray")


def _run(folder: Path, name: str, *extra: str, env: dict | None = None) -> tuple[int, dict, str]:
    report = folder / f"{name}.json"
    run = subprocess.run([sys.executable, "-m", "pytest", *RUN, *extra, f"--memerobust-report={report}",
                          f"--memerobust-cache-dir={folder / name}"], cwd=folder, capture_output=True, text=True,
                         env={**os.environ, **(env or {})}, timeout=900)
    assert report.is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    return run.returncode, json.loads(report.read_text()), run.stdout


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("one-process"), "one-process")


def test_a_local_ray_cluster_reports_what_one_process_reports(one_process, tmp_path):
    code, report, _ = _run(tmp_path, "local", "--memerobust-ray=local:2")
    assert code == one_process[0]
    assert len(report["cases"]) == len(one_process[1]["cases"]) > 100
    assert comparable(report) == comparable(one_process[1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _end_session(leader: subprocess.Popen) -> None:
    """End `ray start` and every process it started (they keep its session id), and nothing else."""
    sid = leader.pid
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:  # field 6 of /proc/PID/stat: the session id
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
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


def test_a_two_node_cluster_on_127_0_0_1_reports_what_one_process_reports(one_process, two_nodes, tmp_path):
    address, env = two_nodes
    code, report, _ = _run(tmp_path, "two-nodes", f"--memerobust-ray={address}", env=env)
    assert code == one_process[0]
    assert comparable(report) == comparable(one_process[1])


def test_an_actor_killed_mid_run_is_restarted_and_changes_nothing():
    from pytest_memerobust.engine import Condition
    from pytest_memerobust.results import StatsConfig
    from pytest_memerobust.session import Options, RobustnessSession

    conditions = [Condition(text="typos", text_severity=3), Condition(image="gaussian_noise", image_severity=3),
                  Condition(text="hotflip", text_severity=1), Condition("typos", 3, "uap", 1)]

    def evaluate(ray_target, on_start=None):
        session = RobustnessSession(Options(models=(MODEL,), limit=48, batch_size=8, shard_size=8,
                                            feature_cache=False, stats=StatsConfig(n_resamples=20), ray=ray_target))
        try:
            for condition in conditions:
                session.plan(MODEL, None, condition)
            if on_start is not None:
                on_start(session.executor)
            return {c.id: session.evaluate(MODEL, c).proba for c in conditions}
        finally:
            session.close()

    killed = {}

    def kill_one_actor(executor):
        def kill():
            pids = executor.actor_pids()  # waits for the actors to start
            time.sleep(1.0)  # they are building their engines or evaluating their first shards
            os.kill(pids[0], signal.SIGKILL)
            killed["pid"], killed["at"] = pids[0], time.monotonic()
            killed["restarted"] = executor.actor_pids()  # Ray started it again
        threading.Thread(target=kill, daemon=True).start()

    alone = evaluate(None)
    started = time.monotonic()
    with_a_kill = evaluate("local:2", kill_one_actor)
    finished = time.monotonic()
    assert "pid" in killed and started < killed["at"] < finished  # killed mid-run
    assert killed["pid"] not in killed["restarted"]
    for condition in conditions:
        assert np.array_equal(with_a_kill[condition.id], alone[condition.id]), condition.id


def test_an_unreachable_cluster_is_one_usage_error_before_any_case(tmp_path):
    port = _free_port()  # nothing listens there
    run = subprocess.run([sys.executable, "-m", "pytest", *RUN, f"--memerobust-ray=127.0.0.1:{port}"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
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
