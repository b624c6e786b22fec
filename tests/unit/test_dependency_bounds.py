"""``constraints/lowest.txt`` and ``constraints/highest.txt`` pin every runtime dependency
(``[project].dependencies`` and the ``postgres`` extra) to the two ends of its bound in
``pyproject.toml``, so that the suite run against them (docs/operations.md, "Dependency
versions tested") tests what the bounds allow: a bound raised without its constraint, or a
constraint outside its bound, fails here."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _bounds() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [
        Requirement(r)
        for r in (*project["dependencies"], *project["optional-dependencies"]["postgres"])
    ]
    return {canonicalize_name(r.name): r for r in reqs}


def _pins(end: str) -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "constraints" / f"{end}.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{end}.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(req.name)] = Version(spec.version)
    return pins


@pytest.mark.parametrize("end", ["lowest", "highest"])
def test_every_runtime_dependency_is_pinned_within_its_bound(end: str) -> None:
    bounds, pins = _bounds(), _pins(end)
    assert sorted(pins) == sorted(bounds), f"constraints/{end}.txt must pin exactly these"
    for name, req in bounds.items():
        assert req.specifier.contains(pins[name]), f"{name} {pins[name]} is outside {req}"


def test_the_lowest_pins_are_the_lower_bounds() -> None:
    """Where a bound has a lower end (``>=``, ``==``), the lowest pin is exactly it: the
    bound states the oldest version the suite passed with."""
    pins = _pins("lowest")
    for name, req in _bounds().items():
        floors = [Version(s.version) for s in req.specifier if s.operator in (">=", "==")]
        assert floors, f"{name}: {req} has no lower bound"
        assert pins[name] == max(floors), f"{name}: lowest pin {pins[name]}, bound {req}"
