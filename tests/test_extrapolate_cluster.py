"""``--executor ray`` (``posenc.extrapolate.cluster``): the smoke profile's language-modelling runs on a
local Ray cluster write the numbers ``--jobs 1`` writes; a worker killed mid-run has its run scheduled
again, nothing lost or written twice; the cluster listens on, and talks to, loopback addresses only.

One small cluster (2 CPUs) for the whole module: the executor joins it, as it joins any running one.
"""

from __future__ import annotations

import ipaddress
import json
import threading
import time

import psutil
import pytest

from posenc.cli import main
from posenc.extrapolate import cluster
from posenc.stats.results import load

pytestmark = pytest.mark.xdist_group("cluster")

COMMAND = ["extrapolate", "--profile", "smoke", "--part", "lm", "--seeds", "0,1"]  # the command
QUIET = ["--no-progress"]


@pytest.fixture(scope="module")
def ray_cluster():
    started = cluster.connect("ray", num_cpus=2)
    assert started, "a Ray cluster was already running in this process"
    import ray

    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """``--jobs 1`` with one torch thread, the threads a Ray task of the executor runs with by default."""
    path = tmp_path_factory.mktemp("serial") / "serial.jsonl"
    assert main([*COMMAND, *QUIET, "--jobs", "1", "--threads", "1", "--out", str(path)]) == 0
    return load(path)


def _numbers(record: dict) -> tuple:
    return (record["eval"], record["train_loss"], record.get("params"), record["spec"], record["settings"])


def _same_numbers(path, reference: dict) -> None:
    lines = path.read_bytes().splitlines()
    keys = [json.loads(x)["key"] for x in lines]
    assert len(keys) == len(set(keys)) == len(reference), "every run written once"
    got = load(path)
    assert set(got) == set(reference)
    for key, record in got.items():
        assert _numbers(record) == _numbers(reference[key]), record["label"]


def test_ray_writes_the_numbers_jobs_1_writes(ray_cluster, serial, tmp_path, capsys):
    path = tmp_path / "ray.jsonl"
    assert main([*COMMAND, *QUIET, "--executor", "ray", "--out", str(path)]) == 0
    err = capsys.readouterr().err
    assert "Ray tasks of 1 CPU each" in err and "estimate: about" in err
    _same_numbers(path, serial)
    assert {r["env"]["threads"] for r in load(path).values()} == {1}
    # a second start runs nothing and leaves the file as it was
    before = path.read_bytes()
    assert main([*COMMAND, *QUIET, "--executor", "ray", "--out", str(path)]) == 0
    assert path.read_bytes() == before


def _ray_processes() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()]


def test_a_worker_killed_mid_run_loses_nothing(ray_cluster, serial, tmp_path):
    """A worker SIGKILLed while it runs a task: Ray runs that task again (``MAX_RETRIES``), the driver
    writes each record once, and the numbers are those of ``--jobs 1``."""
    killed: list[int] = []
    stop = threading.Event()

    def kill_a_busy_worker() -> None:
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            for proc in _ray_processes():
                try:
                    if proc.name().startswith("ray::work"):  # Ray names a worker by the task it runs
                        proc.kill()
                        killed.append(proc.pid)
                        return
                except psutil.Error:
                    continue
            time.sleep(0.005)

    killer = threading.Thread(target=kill_a_busy_worker, daemon=True)
    killer.start()
    path = tmp_path / "killed.jsonl"
    few = ["--scheme", "nope", "--scheme", "rope"]  # their runs have the keys of the profile's (a smaller plan)
    try:
        assert main([*COMMAND, *QUIET, *few, "--executor", "ray", "--out", str(path)]) == 0
    finally:
        stop.set()
        killer.join()
    assert killed, "no worker was seen running a task: the kill never happened"
    got = load(path)
    assert len(got) >= 4 and set(got) <= set(serial)
    _same_numbers(path, {key: serial[key] for key in got})


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def test_the_cluster_listens_and_talks_on_loopback_only(ray_cluster):
    @ray_cluster.remote
    def one() -> int:
        return 1

    assert ray_cluster.get([one.remote() for _ in range(4)]) == [1] * 4  # workers up and connected
    listening, talking = [], []
    names = []
    for proc in _ray_processes():
        try:
            name, conns = proc.name(), proc.net_connections(kind="inet")
        except psutil.Error:  # a worker that exited meanwhile
            continue
        names.append(name)
        for c in conns:
            (listening if c.status == psutil.CONN_LISTEN else talking).append((name, c.laddr, c.raddr))
    assert {"raylet", "gcs_server"} <= set(names), names
    assert listening, "no listening socket found: the check would pass vacuously"
    for name, laddr, raddr in listening + talking:
        assert _loopback(laddr.ip), f"{name} listens or talks on {laddr.ip}"
        assert not raddr or _loopback(raddr.ip), f"{name} talks to {raddr.ip}"
    assert ray_cluster.util.get_node_ip_address() == cluster.LOOPBACK


@pytest.mark.parametrize("value", ["ray://host", "ray://:10001", "ray://h:0", "dask", "ray:// h:x"])
def test_a_bad_executor_exits_2_with_one_line(value, capsys):
    with pytest.raises(SystemExit) as e:
        main([*COMMAND, "--executor", value])
    assert e.value.code == 2
    assert "--executor" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--executor"):
        cluster.check_executor(value)


def test_jobs_with_ray_is_refused(capsys):
    assert main([*COMMAND, "--executor", "ray", "--jobs", "2"]) == 2
    assert "leave --jobs out" in capsys.readouterr().err
