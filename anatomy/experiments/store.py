"""The output folder as a store of finished units, so that an interrupted run can be resumed.

A unit is one experiment on one seed. Each finished unit is written into ``OUT/units/`` as it completes, by one
atomic rename (a reader, or a run killed at any moment, sees the whole file or none of it), after its figures are in
place. ``OUT/units/run.json`` names what the units belong to: the preset, the number of seeds, the claims, the
version of the code (a hash of the package's source) and of torch, the device (``--device``). ``--resume`` runs
only the units that are missing, and refuses, naming the difference, when any of these differ: units measured by
other code or on other settings would be mixed into one report without anyone being told.

The stored numbers are exact: a Python float goes through JSON and back unchanged (``repr`` round-trips), NaN and
infinities included, so a resumed ``claims.json`` equals an uninterrupted one.

A unit is reused only after it is checked (:func:`check_unit`): it names what produced it (its experiment and seed,
equal to its file name; the preset, the device, torch's version and the package's code version, equal to the
run's), its metrics are numbers holding every metric the experiment's claims read, its figures are files inside
``OUT/figures/`` whose bytes are those it drew, and a digest of the whole record matches. A unit that fails is run
again (and replaced), said in one line naming the file. ``run.json`` itself is never guessed at: one that is not a
run record is refused in one line naming it, and so is anything in the way of writing a unit (a folder at its path).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anatomy.files import read_regular

UNITS = "units"
RUN_FILE = "run.json"
UNIT_FORMAT = 2  # the record put() writes; a unit of another format is run again
MAX_RECORD_BYTES = 16 * 2**20  # a unit or run.json is a few kB: anything bigger is not one of ours
FIGURE_LIMIT = 64 * 2**20  # the bytes of one figure checked against its digest (a PNG of ours is ~100 kB)
# run.json's fields ("device" too, since --device) and what each must be
IDENTITY = {
    "preset": (str, "a string"),
    "seeds": (int, "an integer"),
    "claims": (list, "a list"),
    "code": (str, "a string"),
    "torch": (str, "a string"),
}

Unit = tuple[str, int]  # (experiment, seed)
Result = tuple[dict[str, float], list[str], float]  # (metrics, figures written, seconds)
Run = tuple[Unit, "int | str", float, float]  # (unit, worker: a pid, or host:pid on a cluster, start, end)


class BadUnit(ValueError):
    """A stored unit that cannot be reused (the reason, in words): it is run again."""


def code_version() -> str:
    """A short hash of the package's source (every ``.py`` and ``.toml`` file under ``anatomy/``): two runs with the
    same hash ran the same code. It is every experiment's code version: an experiment's numbers depend on shared
    helpers (``fitting``, ``probes``, the models) as much as on its own module."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".toml") and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def unit_file(name: str, seed: int) -> str:
    return f"{name}.seed{seed}.json"


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object stored in ``path``; ValueError with the reason in words (not prefixed by the path)."""
    try:
        data = read_regular(path, MAX_RECORD_BYTES)
    except OSError as err:
        raise ValueError(f"cannot be read ({err.strerror or err})") from None
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"not JSON text (byte 0x{data[err.start]:02x} at offset {err.start} is not UTF-8)") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except RecursionError:
        raise ValueError("not JSON this lab writes (nested too deep)") from None
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__ if value is not None else 'null'}")
    return value


def digest(record: dict[str, Any]) -> str:
    """The sha256 of a unit's record without its own ``sha256`` field (canonical JSON: sorted keys, exact floats)."""
    body = {k: v for k, v in record.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _number(value: Any) -> bool:
    return isinstance(value, float)  # put() writes every number as a float (NaN and infinities too)


def check_unit(record: dict[str, Any], unit: Unit, want: dict[str, Any], out: Path) -> Result:
    """The result stored in ``record`` for ``unit``, after checking it against the unit's name and the run
    (``want``: preset, device, code, torch, and ``metrics`` the experiment's claims read); :class:`BadUnit`
    naming the first thing that fails."""
    name, seed = unit
    if record.get("format") != UNIT_FORMAT:
        raise BadUnit(f"a unit record of format {UNIT_FORMAT} was expected, it has format {record.get('format')!r}")
    if record.get("experiment") != name or type(record.get("seed")) is not int or record["seed"] != seed:
        raise BadUnit(
            f"it names experiment {record.get('experiment')!r} seed {record.get('seed')!r}, its file name "
            f"{name!r} seed {seed}"
        )
    for key in ("preset", "device", "code", "torch"):
        if record.get(key) != want[key]:
            raise BadUnit(f"it was made with {key} {record.get(key)!r}, this run uses {want[key]!r}")
    metrics, figures, seconds = record.get("metrics"), record.get("figures"), record.get("seconds")
    if not isinstance(metrics, dict) or not metrics:
        raise BadUnit(f"'metrics' must be a non-empty object of numbers, got {type(metrics).__name__}")
    odd = sorted(k for k, v in metrics.items() if not _number(v))
    if odd:
        raise BadUnit(f"metric {odd[0]!r} is {metrics[odd[0]]!r}, not a number")
    missing = sorted(set(want["metrics"]) - set(metrics))
    if missing:
        raise BadUnit(f"metric {missing[0]!r} is missing (its experiment's claims read it)")
    if not isinstance(seconds, float) or not math.isfinite(seconds) or seconds < 0:
        raise BadUnit(f"'seconds' must be a finite number >= 0, got {seconds!r}")
    if not isinstance(figures, list) or not all(isinstance(f, str) for f in figures):
        raise BadUnit(f"'figures' must be a list of paths, got {type(figures).__name__}")
    if seed != 0 and figures:
        raise BadUnit("figures are drawn on seed 0 only, this unit lists some")
    for rel in figures:
        parts = Path(rel).parts
        if len(parts) != 2 or parts[0] != "figures" or not rel.endswith(".png") or rel != "/".join(parts):
            raise BadUnit(f"figure {rel!r} is not a file figures/NAME.png inside the output folder")
    hashes = record.get("figure_sha256")
    if not isinstance(hashes, dict) or sorted(hashes) != sorted(figures):
        raise BadUnit("'figure_sha256' must give the digest of each of its figures")
    for rel in figures:
        _check_figure(out, rel, hashes[rel])
    if record.get("sha256") != digest(record):
        raise BadUnit("its digest does not match its content (edited or damaged since it was written)")
    return {k: float(v) for k, v in metrics.items()}, list(figures), float(seconds)


def _check_figure(out: Path, rel: str, sha: Any) -> None:
    path = out / rel
    try:
        data = read_regular(path, FIGURE_LIMIT)
    except FileNotFoundError:
        raise BadUnit(f"its figure {rel} is missing") from None
    except OSError as err:
        raise BadUnit(f"its figure {rel} cannot be read ({err.strerror or err})") from None
    if hashlib.sha256(data).hexdigest() != sha:
        raise BadUnit(f"its figure {rel} is not the one it drew (other bytes)")


@dataclass
class Store:
    """The units of one run in ``out/units/``: :meth:`start` (fresh or resumed), :meth:`put` each finished unit."""

    out: Path
    identity: dict[str, Any]
    done: dict[Unit, Result] = field(default_factory=dict)
    rejected: list[tuple[Path, str]] = field(default_factory=list)  # units found but run again: (file, why)

    @property
    def folder(self) -> Path:
        return self.out / UNITS

    @classmethod
    def start(
        cls,
        out: Path,
        *,
        preset: str,
        seeds: int,
        claims: list[str],
        resume: bool,
        device: str = "cpu",
        units: list[Unit] | None = None,
    ) -> Store:
        """A store for this run. Fresh: earlier units in ``out`` are removed. ``resume``: the stored ``units``
        (every unit of the run) are loaded, after checking that the run and each unit belong to this run
        (ValueError in one line naming the file or every difference; a unit that fails its own checks is left
        to run again and listed in :attr:`rejected`)."""
        import torch

        identity = {
            "preset": preset,
            "seeds": seeds,
            "claims": list(claims),
            "code": code_version(),
            "torch": torch.__version__,
            "device": device,
        }
        store = cls(Path(out), identity)
        if store.folder.is_dir():
            for cut in store.folder.glob(".*.tmp"):  # a write cut short (the run was killed during it)
                cut.unlink()
        if resume:
            store._load(units or [])
        else:
            store._start_over()
        return store

    def _start_over(self) -> None:
        """Remove the units of a finished earlier run; refuse to drop those of an unfinished one (hours of work,
        perhaps, that ``--resume`` would keep)."""
        units = sorted(self.folder.glob("*.seed*.json")) if self.folder.is_dir() else []
        run = self.folder / RUN_FILE
        finished = False
        if run.exists():
            try:
                finished = _json_object(run).get("finished") is True
            except ValueError:
                finished = False
        if units and not finished:
            raise ValueError(
                f"--out {self.out} holds {len(units)} finished unit{'s' if len(units) > 1 else ''} "
                f"of an unfinished run: add --resume to continue it, or remove {self.folder} to "
                "start over"
            )
        for old in [*units, run]:
            if old.is_dir() and not old.is_symlink():
                raise ValueError(f"{old}: a folder where the claims lab keeps a file; move it away to start")
            old.unlink(missing_ok=True)
        atomic_write(run, json.dumps(self.identity, indent=2).encode())

    def finish(self) -> None:
        """Mark the run finished (its report written): a later run without ``--resume`` may start over here."""
        atomic_write(self.folder / RUN_FILE, json.dumps({**self.identity, "finished": True}, indent=2).encode())

    def _stored_identity(self) -> dict[str, Any]:
        """What ``run.json`` says the units belong to; ValueError naming the file when it is not a run record."""
        path = self.folder / RUN_FILE
        if not path.exists() and not path.is_symlink():
            raise ValueError(
                f"--resume: {self.out} holds no {UNITS}/{RUN_FILE} (nothing to resume); run without --resume to start"
            )
        remedy = f"remove {self.folder} to start over"
        try:
            stored = _json_object(path)
        except ValueError as err:
            raise ValueError(f"{path}: not a run record of the claims lab ({err}); {remedy}") from None
        for key, (kind, words) in IDENTITY.items():
            if not isinstance(stored.get(key), kind) or isinstance(stored.get(key), bool):
                raise ValueError(
                    f"{path}: not a run record of the claims lab (field {key!r} should be {words}, "
                    f"got {stored.get(key)!r:.40}); {remedy}"
                )
        if not all(isinstance(c, str) for c in stored["claims"]) or not isinstance(stored.get("device", ""), str):
            raise ValueError(f"{path}: not a run record of the claims lab (claims and device are names); {remedy}")
        return {k: v for k, v in stored.items() if k != "finished"}

    def _load(self, units: list[Unit]) -> None:
        differences = describe_differences(self._stored_identity(), self.identity)
        if differences:
            raise ValueError(
                f"--resume: {self.out} was run with other settings ({'; '.join(differences)}); "
                "run without --resume to start again, or resume with the same settings"
            )
        for unit in units:
            path = self.folder / unit_file(*unit)
            if path.is_dir():
                raise ValueError(f"{path}: a folder where a unit's file belongs; move it away to resume")
            if not path.exists() and not path.is_symlink():
                continue
            try:
                self.done[unit] = check_unit(_json_object_or_bad(path), unit, self.expected(unit[0]), self.out)
            except BadUnit as err:
                self.rejected.append((path, str(err)))

    def expected(self, experiment: str) -> dict[str, Any]:
        """What a unit of ``experiment`` in this run must say: preset, device, code, torch, and the metrics its
        claims read."""
        from anatomy.experiments.registry import CLAIMS, EXPERIMENTS
        from anatomy.experiments.units import load_all

        load_all()
        exp = EXPERIMENTS.get(experiment)
        return {
            "preset": self.identity["preset"],
            "device": exp.device_for(self.identity["device"]) if exp else self.identity["device"],
            "code": self.identity["code"],
            "torch": self.identity["torch"],
            "metrics": sorted({m for c in CLAIMS.values() if c.experiment == experiment for m in c.metrics}),
        }

    @property
    def seeds(self) -> int:
        return int(self.identity["seeds"])

    def put(self, unit: Unit, result: Result) -> None:
        """Record a finished unit (its figures are already written), with what produced it."""
        metrics, figures, seconds = result
        want = self.expected(unit[0])
        record: dict[str, Any] = {
            "format": UNIT_FORMAT,
            "experiment": unit[0],
            "seed": unit[1],
            **{k: want[k] for k in ("preset", "device", "code", "torch")},
            "metrics": metrics,
            "figures": figures,
            "figure_sha256": {f: hashlib.sha256((self.out / f).read_bytes()).hexdigest() for f in figures},
            "seconds": seconds,
        }
        record["sha256"] = digest(record)
        atomic_write(self.folder / unit_file(*unit), json.dumps(record, indent=1).encode())
        self.done[unit] = result


def _json_object_or_bad(path: Path) -> dict[str, Any]:
    try:
        return _json_object(path)
    except ValueError as err:
        raise BadUnit(str(err)) from None


def describe_differences(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """What differs between the identity of the stored run and this one, one phrase each."""
    out = []
    for key, what in (("preset", "preset"), ("seeds", "seeds"), ("torch", "torch"), ("device", "--device")):
        default = "cpu" if key == "device" else None  # runs stored before --device existed ran on the CPU
        there, here = stored.get(key, default), wanted.get(key, default)
        if there != here:
            out.append(f"{what} {there!r} there, {here!r} now")
    if stored.get("claims") != wanted.get("claims"):
        there, here = list(stored.get("claims") or []), list(wanted.get("claims") or [])
        added = [c.split("-")[0] for c in here if c not in there]
        dropped = [c.split("-")[0] for c in there if c not in here]
        parts = ([f"now also {', '.join(added)}"] if added else []) + (
            [f"not now {', '.join(dropped)}"] if dropped else []
        )
        out.append("claims differ (" + ("; ".join(parts) or "other order") + ")")
    if stored.get("code") != wanted.get("code"):
        out.append(
            f"code version {stored.get('code')} there, {wanted.get('code')} now (the package's source changed since)"
        )
    return out
