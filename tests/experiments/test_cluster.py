"""The claims lab on a real Ray cluster: a head started here as a user would (`ray start --head`, 2 CPUs, a free
port), one per module, stopped at the end. Its units give the numbers of a local serial run, and a worker killed
from outside in the middle of a unit is retried."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from anatomy.cli.main import main
from anatomy.experiments.runner import run_claims

ray = pytest.importorskip("ray", reason="waits for ray (pip install 'transformer-anatomy[cluster]')")

CLAIMS = ["C4", "C5", "C20"]  # head-parameters, dot-product-variance, mask-fills (figures): three experiments


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        chain.append(pid)
    return chain


@contextlib.contextmanager
def _ray_head():
    """``(address, process)`` of a Ray head with 2 CPUs, started by `ray start --head --block` and stopped (with
    every process it started) by SIGTERM at the end."""
    temp = tempfile.mkdtemp(prefix="rayt", dir="/tmp")  # short: Ray's socket paths must stay under 107 characters
    ray_cli = shutil.which("ray") or ""
    command = [ray_cli] if ray_cli else [sys.executable, "-m", "ray.scripts.scripts"]
    log = open(Path(temp) / "head.log", "w")  # closed below
    for attempt in range(3):  # Ray gives its raylet 30 s to come up, which a loaded machine can exceed: try again
        port = _free_port()
        process = subprocess.Popen(
            [
                *command,
                "start",
                "--head",
                f"--port={port}",
                "--num-cpus=2",
                "--include-dashboard=false",
                f"--temp-dir={temp}",
                "--disable-usage-stats",
                "--block",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
        )
        while process.poll() is None and "Ray runtime started" not in (Path(temp) / "head.log").read_text():
            time.sleep(0.5)
        if process.poll() is None:
            break
        if attempt == 2:
            pytest.fail(f"ray start --head exited 3 times: {(Path(temp) / 'head.log').read_text()[-2000:]}")
    try:
        yield f"127.0.0.1:{port}", process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def head():
    """A Ray head for the module (see :func:`_ray_head`)."""
    with _ray_head() as started:
        yield started


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    return out, run_claims(CLAIMS, preset="smoke", out=out, progress=False, jobs=1)


def _assert_equal_runs(a: dict, b: dict) -> int:
    compared = 0
    assert [c["id"] for c in a["claims"]] == [c["id"] for c in b["claims"]]
    for x, y in zip(a["claims"], b["claims"]):
        odd = set(x.get("nondeterministic", {}).get("metrics", []))
        for name in x["metrics"]:
            if name not in odd:
                assert x["metrics"][name] == y["metrics"][name], (x["id"], name)  # bit-equal values, n, ci...
                compared += 1
        for field in ("verdict", "reason_en", "reason_zh", "figures", "rule"):
            assert x[field] == y[field], (x["id"], field)
    return compared


def test_three_claims_on_a_ray_cluster_equal_a_local_run(head, local, tmp_path, capsys):
    address, _ = head
    local_out, local_doc = local
    out = tmp_path / "ray"
    assert (
        main(["claims", "run", *CLAIMS, "--preset", "smoke", "--out", str(out), "--cluster", address, "--quiet"]) == 0
    )
    import json

    doc = json.loads((out / "claims.json").read_text(encoding="utf-8"))
    assert _assert_equal_runs(local_doc, doc) >= 15
    assert doc["environment"]["cluster"] == {"address": address, "nodes": 1, "cpus": 2.0, "cpus_per_unit": 1.0}
    assert doc["schedule"]["retried"] == [] and sum(w["runs"] for w in doc["schedule"]["workers"]) == 3
    figures = sorted(p.name for p in (local_out / "figures").iterdir())
    assert figures and sorted(p.name for p in (out / "figures").iterdir()) == figures  # drawn there, written here
    for name in figures:
        assert (out / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list((out / "units").glob("*.seed0.json"))) == 3


def test_a_worker_killed_in_the_middle_of_a_unit_is_retried_and_the_numbers_stay(head, local, tmp_path, capsys):
    address, process = head
    killed: list[int] = []
    stop = threading.Event()

    def killer() -> None:  # SIGKILL the first worker seen running a unit of this cluster (not of anyone else's)
        while not stop.is_set() and not killed:
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    cmdline = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                pid = int(entry.name)
                if cmdline.startswith(b"ray::anatomy_unit") and process.pid in _ancestors(pid):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    break
            time.sleep(0.02)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        doc = run_claims(CLAIMS, preset="smoke", out=tmp_path, progress=False, cluster=address)
    finally:
        stop.set()
        thread.join()
    assert len(killed) == 1
    retried = doc["schedule"]["retried"]
    assert len(retried) == 1 and retried[0]["attempt"] == 2 and retried[0]["error"] == "WorkerCrashedError"
    assert f"a worker died during {retried[0]['experiment']} seed 0" in capsys.readouterr().err
    assert _assert_equal_runs(local[1], doc) >= 15


def test_a_wrong_cluster_address_is_one_line(tmp_path, capsys):
    port = _free_port()  # nothing listens there
    assert (
        main(
            [
                "claims",
                "run",
                "C4",
                "--preset",
                "smoke",
                "--out",
                str(tmp_path),
                "--cluster",
                f"127.0.0.1:{port}",
                "--quiet",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--cluster 127.0.0.1:{port}: no Ray head answers there" in err
    assert main(["report", "--preset", "smoke", "--out", str(tmp_path), "--cluster", "head-without-port"]) == 2
    assert "expected HOST:PORT of a Ray head" in capsys.readouterr().err
    assert not (tmp_path / "units").exists()  # refused before anything ran


@pytest.mark.parametrize(
    "reply",
    [b"", b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", b"+OK not ray\r\n"],
    ids=["silent", "http1", "other"],
)
def test_something_that_is_not_a_ray_head_at_the_address_is_one_line(tmp_path, capsys, monkeypatch, reply):
    """A plain TCP listener where the head should be: refused after one probe (PROBE_S), not Ray's minutes of
    retries."""
    from anatomy.experiments import cluster

    monkeypatch.setattr(cluster, "PROBE_S", 1.0)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            accepted.append(connection)
            if reply:
                connection.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    port = server.getsockname()[1]
    try:
        argv = ["claims", "run", "C4", "--preset", "smoke", "--quiet", "--out", str(tmp_path / "o")]
        assert main([*argv, "--cluster", f"127.0.0.1:{port}"]) == 2
    finally:
        server.close()
        for connection in accepted:
            connection.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"anatomy claims: error: --cluster 127.0.0.1:{port}: ")
    assert "something listens there, but not a Ray head" in err
    assert not (tmp_path / "o" / "units").exists()


def _command(process) -> list[str]:
    """A process's command line; ``[]`` once it has ended (a zombie, or gone)."""
    import psutil

    try:
        return process.cmdline()
    except psutil.Error:
        return []


def test_a_head_killed_in_the_middle_of_a_run_ends_it_in_one_line(tmp_path):
    """The head (and every process of it) SIGKILLed while a unit runs: the driver says so in one line within
    HEAD_LOST_S and a few seconds, exit code 1, rather than Ray's log lines after its own 60 s."""
    import psutil

    from anatomy.experiments.cluster import HEAD_LOST_S

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with _ray_head() as (address, process):
        driver = subprocess.Popen(
            [sys.executable, "-m", "anatomy", "claims", "run", "C1", "--preset", "quick", "--quiet"]
            + ["--cluster", address, "--out", str(tmp_path / "o")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            head = psutil.Process(process.pid)
            deadline = time.monotonic() + 240  # generous: imports and the package upload on a loaded machine
            while time.monotonic() < deadline and driver.poll() is None:
                if any(_command(c)[:1] == ["ray::anatomy_unit"] for c in head.children(recursive=True)):
                    break
                time.sleep(0.2)
            assert driver.poll() is None, driver.communicate()[1]
            for victim in [head, *head.children(recursive=True)]:  # the head and what it started, nothing else
                with contextlib.suppress(psutil.NoSuchProcess):
                    victim.kill()
            _, err = driver.communicate(timeout=HEAD_LOST_S + 40)  # Ray alone would take 60 s and more
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
    last = err.strip().splitlines()[-1]
    assert driver.returncode == 1, err
    assert last.startswith("anatomy claims: error: the Ray head at ") and f":{address.split(':')[1]} " in last, err
    assert "stopped answering" in last and "--resume" in last
    notes = err.strip().splitlines()[:-1]  # a unit that lost its node may be said before the head is found lost
    assert all(line.startswith("a worker died during") for line in notes), err
