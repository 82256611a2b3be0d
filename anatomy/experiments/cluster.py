"""Run the units of a claims run on a Ray cluster (``--cluster ADDRESS``; the ``[cluster]`` extra).

Every unit (one experiment on one seed) is one Ray task asking for one CPU (``cpus``): it runs in a fresh
temporary folder on whichever node Ray picks, and sends back its metrics, its seconds and the bytes of the figures
it drew. This process (the driver) writes the figures and the unit into the output folder as each one arrives
(:mod:`anatomy.experiments.store`), then the report. Each task starts from ``seed_everything(seed)`` with one
intra-op thread, as a local run does, so the metrics are bit-equal to a local serial run except the wall-clock ones
(:data:`anatomy.experiments.runner.NONDETERMINISTIC`), given the same torch on every node.

The package reaches the workers through Ray's runtime environment (``py_modules``: this process uploads its own
``anatomy/`` folder once; the workers import it from there before anything installed). Its dependencies (torch,
numpy, matplotlib, tqdm) must be installed on every node. Before the first unit, one task checks that the workers
run the same code as this process.

A worker that dies during a unit (killed, out of memory, its node lost) is not an error of the experiment: the
unit is submitted again, up to ``retries`` times, and the retry is said on the terminal and in ``claims.json``
(``schedule.retried``). An exception raised by the experiment itself stops the run with that exception.

Ray is imported here only, when a cluster is asked for: ``import anatomy`` and local runs never need it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from anatomy.experiments.store import Result, Run, Unit, atomic_write

RETRIES = 3
# One intra-op thread per unit, figures to PNG files, and the workers at the ordinary priority: Ray starts its
# workers at niceness 15 unless told (RAY_worker_niceness), and on a busy node those starve behind everything else
# (measured: about 2% of a core each on the shared 2-core VM, where `--jobs` workers got their share); Ray's own job
# submission sets it to 0 in the same way.
_WORKER_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
    "RAY_worker_niceness": "0",
}


# How long the lab waits on a cluster before it says so in one line (rather than Ray's own minutes of retries):
PROBE_S = 5.0  # an address must accept a connection, and answer as a gRPC (HTTP/2) server does, within this each
HEAD_CHECK_S = 1.0  # during a run, the head's port is tried this often
HEAD_LOST_S = 10.0  # a head that refuses connections this long is lost: the run ends (Ray itself waits 60 s)
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # + an empty SETTINGS


class ClusterError(RuntimeError):
    """The cluster cannot run the units (unreachable, other code on the workers, a unit that keeps losing its
    worker): said in one line by the CLI. ``fatal``: Ray's connection is broken beyond a clean shutdown (the head
    is gone), so the process should end at once after saying it (the CLI does; Ray would end it after 60 s)."""

    def __init__(self, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


def check_address(address: str) -> str:
    """``address`` as Ray takes it: ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``. A ``HOST:PORT`` must answer a
    TCP connection at once (rather than Ray's long wait on a wrong address): ValueError in one line otherwise."""
    if address == "auto":
        return address
    bare = address.removeprefix("ray://")
    host, sep, port = bare.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"--cluster {address!r}: expected HOST:PORT of a Ray head (like 127.0.0.1:6379), ray://HOST:PORT, or auto"
        )
    try:
        connection = socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_S)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ValueError(
            f"--cluster {address}: no Ray head answers there ({reason}); start one with "
            f"`ray start --head --port {port}` or give its address"
        ) from None
    with connection:
        what = _speaks_grpc(connection)
    if what:
        raise ValueError(
            f"--cluster {address}: something listens there, but not a Ray head ({what}); give the HOST:PORT that "
            "`ray start --head` printed"
        )
    return address


def _speaks_grpc(connection: socket.socket) -> str:
    """``""`` when the server at the other end of ``connection`` answers the opening of an HTTP/2 connection as
    every gRPC server (a Ray head's GCS, a Ray client server) does, with a SETTINGS frame within ``PROBE_S``; what
    it did instead otherwise. Ray's own connection would retry for minutes against anything else."""
    connection.settimeout(PROBE_S)
    try:
        connection.sendall(HTTP2_PREFACE)
        head = b""
        while len(head) < 9:
            chunk = connection.recv(9 - len(head))
            if not chunk:
                return "it closed the connection without a word" if not head else f"it answered {head!r}"
            head += chunk
    except TimeoutError:
        return f"it said nothing within {PROBE_S:g} s" if not head else f"it answered {head!r} and stopped"
    except OSError as err:
        return f"the connection failed: {err.strerror or type(err).__name__}"
    if head[3] != 4 or head[5:9] != bytes(4):  # frame type 4 (SETTINGS) on stream 0
        return f"it answered {head!r}, not an HTTP/2 SETTINGS frame"
    return ""


class HeadWatch:
    """A thread that tries the head's port every ``HEAD_CHECK_S``; :attr:`lost` is set once it has refused
    connections for ``HEAD_LOST_S`` (Ray's own client would wait 60 s, then end the process with its log lines)."""

    def __init__(self, address: str) -> None:
        host, _, port = address.removeprefix("ray://").rpartition(":")
        self.target = (host.strip("[]"), int(port))
        self.lost = threading.Event()
        self.reason = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="anatomy-head-watch")

    def __enter__(self) -> HeadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _run(self) -> None:
        since: float | None = None
        while not self._stop.wait(HEAD_CHECK_S):
            try:
                with socket.create_connection(self.target, timeout=HEAD_CHECK_S):
                    since = None
            except OSError as err:
                now = time.monotonic()
                since = now if since is None else since
                if now - since >= HEAD_LOST_S:
                    self.reason = err.strerror or type(err).__name__
                    self.lost.set()
                    return


def anatomy_unit(
    name: str, preset: str, seed: int, device: str = "cpu"
) -> tuple[dict[str, float], list[str], float, dict[str, bytes], str]:
    """The Ray task: one unit in a temporary folder; ``(metrics, figures, seconds, figure bytes, worker)``."""
    import tempfile

    from anatomy.experiments.devices import check_device
    from anatomy.experiments.units import load_all, run_one

    load_all()
    device = check_device(device)  # on the node: a GPU task sees the GPU Ray gave it
    with tempfile.TemporaryDirectory(prefix="anatomy-unit-") as tmp:
        metrics, figures, seconds = run_one(name, preset, seed, tmp, device)
        blobs = {f: (Path(tmp) / f).read_bytes() for f in figures}
    return metrics, figures, seconds, blobs, f"{socket.gethostname()}:{os.getpid()}"


def worker_code_version() -> str:
    from anatomy.experiments.store import code_version

    return code_version()


def preflight(address: str) -> None:
    """Before anything is written: Ray is installed and ``address`` answers (ValueError in one line otherwise)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ValueError("--cluster needs Ray: pip install 'transformer-anatomy[cluster]' (ray>=2.9)") from None
    check_address(address)


def connect(address: str) -> tuple[Any, bool]:
    """``(ray, connected_here)``: Ray connected to the cluster at ``address`` with this package shipped to its
    workers. An already initialised Ray (a caller's own session) is used as it is."""
    try:
        import ray
    except ImportError:
        raise ValueError("--cluster needs Ray: pip install 'transformer-anatomy[cluster]' (ray>=2.9)") from None
    if ray.is_initialized():
        return ray, False
    address = check_address(address)
    package = Path(__file__).resolve().parents[1]
    runtime_env = {"py_modules": [str(package)], "env_vars": dict(_WORKER_ENV), "excludes": ["__pycache__", "*.pyc"]}
    try:
        ray.init(
            address=address,
            runtime_env=runtime_env,
            log_to_driver=False,
            logging_level=logging.WARNING,
            namespace="anatomy",
        )
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"--cluster {address}: cannot connect to Ray ({first})") from None
    return ray, True


def run_on_ray(
    tasks: list[Unit],
    preset: str,
    out: Path,
    address: str,
    finished: Callable[[Unit, Result], None],
    *,
    cpus: float = 1.0,
    retries: int = RETRIES,
    timeline: list[Run] | None = None,
    note: Callable[[str], None] = print,
    retried: list[dict[str, Any]] | None = None,
    started: Callable[[dict[str, Any]], None] | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Run ``tasks`` as Ray tasks of ``cpus`` CPUs each on the cluster at ``address``; ``finished(unit, result)``
    for each one as it arrives, after its figures are written into ``out``. Returns what the cluster was
    (``address``, ``cpus``, ``nodes``, ``slots``); ``started`` gets the same as soon as it is known. ``device``
    ``cuda``: each unit also asks for one GPU (Ray shows a task only the GPUs it asked for), and a cluster without
    GPUs is refused before any unit runs."""
    if not cpus > 0:
        raise ValueError(f"cluster CPUs per unit must be positive, got {cpus!r}")
    ray, connected_here = connect(address)
    head = _head_address(ray, address)
    watch = HeadWatch(head) if head else None
    lost = False
    try:
        if watch is not None:
            watch.__enter__()
        total = float(ray.cluster_resources().get("CPU", 0.0))
        nodes = len([n for n in ray.nodes() if n.get("Alive")])
        if total < cpus:
            raise ClusterError(f"the cluster at {address} has {total:g} CPUs, a unit asks for {cpus:g}")
        gpus = 1.0 if device.startswith("cuda") else 0.0
        have = float(ray.cluster_resources().get("GPU", 0.0))
        if have < gpus:
            raise ClusterError(
                f"--device {device}: the cluster at {address} has no GPUs (its nodes offer "
                f"{total:g} CPUs); run with --device cpu, or start nodes with GPUs"
            )
        slots = int(total // cpus) if not gpus else int(min(total // cpus, have // gpus))
        info = {
            "address": address,
            "cpus": total,
            "nodes": nodes,
            "slots": slots,
            "cpus_per_unit": cpus,
            **({"gpus": have, "gpus_per_unit": gpus} if gpus else {}),
        }
        if started is not None:
            started(info)
        check = ray.remote(worker_code_version).options(num_cpus=cpus, max_retries=retries)
        version = check.remote()
        _wait(ray, [version], watch, head)
        theirs, ours = ray.get(version), worker_code_version()
        if theirs != ours:
            raise ClusterError(
                f"the workers at {address} run other code (version {theirs}, here {ours}); "
                "install the same version on the nodes or let the runtime environment ship it"
            )
        remote = ray.remote(anatomy_unit)
        unit = remote.options(num_cpus=cpus, num_gpus=gpus, max_retries=0)
        cpu_unit = remote.options(num_cpus=cpus, max_retries=0) if gpus else unit
        pending: dict[Any, tuple[Unit, int]] = {}

        from anatomy.experiments.registry import EXPERIMENTS

        def submit(task: Unit, attempt: int) -> None:
            sent = cpu_unit if EXPERIMENTS[task[0]].cpu_only else unit  # on the CPU whatever --device: no GPU
            pending[sent.remote(task[0], preset, task[1], device)] = (task, attempt)

        for task in tasks:
            submit(task, 1)
        try:
            while pending:
                ready = _wait(ray, list(pending), watch, head)
                for ref in ready:
                    task, attempt = pending.pop(ref)
                    try:
                        metrics, figures, seconds, blobs, who = ray.get(ref)
                    except ray.exceptions.RayTaskError as err:  # the experiment's own error
                        raise err.as_instanceof_cause() from None
                    except ray.exceptions.RayError as err:  # the worker, its node or the object was lost
                        if attempt > retries:
                            raise ClusterError(
                                f"{task[0]} (seed {task[1]}) lost its worker {attempt} times "
                                f"({type(err).__name__}); giving up"
                            ) from None
                        note(
                            f"  a worker died during {task[0]} seed {task[1]} ({type(err).__name__}); "
                            f"retrying it (attempt {attempt + 1} of {retries + 1})"
                        )
                        if retried is not None:
                            retried.append(
                                {
                                    "experiment": task[0],
                                    "seed": task[1],
                                    "attempt": attempt + 1,
                                    "error": type(err).__name__,
                                }
                            )
                        submit(task, attempt + 1)
                        continue
                    for rel, data in blobs.items():
                        atomic_write(out / rel, data)
                    end = time.monotonic()
                    if timeline is not None:
                        timeline.append((task, who, end - seconds, end))
                    finished(task, (metrics, figures, seconds))
        except BaseException as err:
            if not getattr(err, "fatal", False):  # with the head gone, a cancel would wait on it
                for ref in pending:
                    ray.cancel(ref, force=True)
            raise
        return info
    except ClusterError as err:
        lost = err.fatal
        raise
    finally:
        if watch is not None:
            watch.__exit__()
        if connected_here and not lost:  # a shutdown would wait on the lost head (and print Ray's log lines)
            ray.shutdown()


def _head_address(ray: Any, address: str) -> str:
    """``HOST:PORT`` of the head's GCS, to watch during the run (``""``: unknown, not watched)."""
    known = getattr(ray.get_runtime_context(), "gcs_address", "") or ""
    if known:
        return str(known)
    return "" if address == "auto" or address.startswith("ray://") else address


def _wait(ray: Any, refs: list[Any], watch: HeadWatch | None, head: str) -> list[Any]:
    """The refs of ``refs`` that are ready (at least one), waiting in steps of ``HEAD_CHECK_S`` so that a lost head
    ends the run (:class:`ClusterError`, ``fatal``) rather than a wait without end."""
    while True:
        ready, _ = ray.wait(refs, num_returns=1, timeout=HEAD_CHECK_S)
        if watch is not None and watch.lost.is_set():
            raise ClusterError(
                f"the Ray head at {head} stopped answering ({watch.reason} for {HEAD_LOST_S:g} s); the units "
                "finished so far are kept: run again with --resume once a head is up",
                fatal=True,
            )
        if ready:
            return list(ready)
