"""The output folder as a store of finished units, so that an interrupted run can be resumed.

A unit is one experiment on one seed. Each finished unit is written into ``OUT/units/`` as it completes, by one
atomic rename (a reader, or a run killed at any moment, sees the whole file or none of it), after its figures are in
place. ``OUT/units/run.json`` names what the units belong to: the preset, the number of seeds, the claims, the
version of the code (a hash of the package's source) and of torch, the device (``--device``). ``--resume`` runs
only the units that are missing, and refuses, naming the difference, when any of these differ: units measured by
other code or on other settings would be mixed into one report without anyone being told.

The stored numbers are exact: a Python float goes through JSON and back unchanged (``repr`` round-trips), NaN and
infinities included, so a resumed ``claims.json`` equals an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

UNITS = "units"
RUN_FILE = "run.json"

Unit = tuple[str, int]  # (experiment, seed)
Result = tuple[dict[str, float], list[str], float]  # (metrics, figures written, seconds)


def code_version() -> str:
    """A short hash of the package's source (every ``.py`` and ``.toml`` file under ``anatomy/``): two runs with the
    same hash ran the same code."""
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


@dataclass
class Store:
    """The units of one run in ``out/units/``: :meth:`start` (fresh or resumed), :meth:`put` each finished unit."""

    out: Path
    identity: dict[str, Any]
    done: dict[Unit, Result] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        return self.out / UNITS

    @classmethod
    def start(
        cls, out: Path, *, preset: str, seeds: int, claims: list[str], resume: bool, device: str = "cpu"
    ) -> Store:
        """A store for this run. Fresh: earlier units in ``out`` are removed. ``resume``: the units already there
        are loaded, after checking that they belong to this run (ValueError naming every difference)."""
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
        for cut in store.folder.glob(".*.tmp"):  # a write cut short (the run was killed during it)
            cut.unlink()
        if resume:
            store._load()
        else:
            store._start_over()
        return store

    def _start_over(self) -> None:
        """Remove the units of a finished earlier run; refuse to drop those of an unfinished one (hours of work,
        perhaps, that ``--resume`` would keep)."""
        units = sorted(self.folder.glob("*.seed*.json")) if self.folder.is_dir() else []
        run = self.folder / RUN_FILE
        finished = False
        if run.is_file():
            try:
                finished = bool(json.loads(run.read_text(encoding="utf-8")).get("finished"))
            except (OSError, json.JSONDecodeError):
                finished = False
        if units and not finished:
            raise ValueError(
                f"--out {self.out} holds {len(units)} finished unit{'s' if len(units) > 1 else ''} "
                f"of an unfinished run: add --resume to continue it, or remove {self.folder} to "
                "start over"
            )
        for old in [*units, run]:
            old.unlink(missing_ok=True)
        atomic_write(run, json.dumps(self.identity, indent=2).encode())

    def finish(self) -> None:
        """Mark the run finished (its report written): a later run without ``--resume`` may start over here."""
        atomic_write(self.folder / RUN_FILE, json.dumps({**self.identity, "finished": True}, indent=2).encode())

    def _load(self) -> None:
        path = self.folder / RUN_FILE
        if not path.is_file():
            raise ValueError(
                f"--resume: {self.out} holds no {UNITS}/{RUN_FILE} (nothing to resume); run without --resume to start"
            )
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"--resume: {path} is unreadable ({err})") from None
        differences = describe_differences({k: v for k, v in stored.items() if k != "finished"}, self.identity)
        if differences:
            raise ValueError(
                f"--resume: {self.out} was run with other settings ({'; '.join(differences)}); "
                "run without --resume to start again, or resume with the same settings"
            )
        for unit_path in self.folder.glob("*.seed*.json"):
            try:
                unit = json.loads(unit_path.read_text(encoding="utf-8"))
                key = (unit["experiment"], int(unit["seed"]))
                result = (
                    {k: float(v) for k, v in unit["metrics"].items()},
                    list(unit["figures"]),
                    float(unit["seconds"]),
                )
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not a unit of ours (an atomic write leaves no half file): it runs again
            self.done[key] = result

    @property
    def seeds(self) -> int:
        return int(self.identity["seeds"])

    def put(self, unit: Unit, result: Result) -> None:
        """Record a finished unit (its figures are already written)."""
        metrics, figures, seconds = result
        record = {"experiment": unit[0], "seed": unit[1], "metrics": metrics, "figures": figures, "seconds": seconds}
        atomic_write(self.folder / unit_file(*unit), json.dumps(record, indent=1).encode())
        self.done[unit] = result


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
