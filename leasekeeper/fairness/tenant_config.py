"""Tenant weights and caps from the command line and a small TOML file.

``--tenant-cap N`` caps every tenant, ``--tenant-cap-for T=N`` one of them;
``--tenant-weight T=W`` weighs one tenant; ``--tenants FILE`` holds many::

    [defaults]
    weight = 1
    cap = 50

    [tenants.acme]
    weight = 5
    cap = 10

Flags win over the file. A mistake is a ValueError naming the flag or the file,
the value and the fix, for the CLI to print in one line.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from leasekeeper.fairness.weighted import TenantPolicy


def _pairs(values: tuple[str, ...], flag: str, kind: type[int] | type[float]) -> dict[str, float]:
    found: dict[str, float] = {}
    for value in values:
        tenant, sep, number = value.rpartition("=")
        try:
            parsed = kind(number)
        except ValueError:
            parsed = -1
        if not sep or not tenant or parsed <= 0:
            raise ValueError(f"{flag} {value!r}: expected TENANT=N with N > 0 (e.g. acme=4)")
        found[tenant] = parsed
    return found


def _from_file(path: Path) -> tuple[dict[str, float], dict[str, int], dict[str, float]]:
    """(weights, caps, defaults) from ``path``."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"--tenants {path}: {exc}") from None
    weights: dict[str, float] = {}
    caps: dict[str, int] = {}
    for tenant, entry in dict(data.get("tenants", {})).items():
        if not isinstance(entry, dict) or not set(entry) <= {"weight", "cap"}:
            raise ValueError(f"--tenants {path}: [tenants.{tenant}] takes weight and cap only")
        if "weight" in entry:
            weights[tenant] = _positive(entry["weight"], f"{path} tenants.{tenant}.weight")
        if "cap" in entry:
            caps[tenant] = int(_positive(entry["cap"], f"{path} tenants.{tenant}.cap"))
    defaults = {
        key: _positive(value, f"{path} defaults.{key}")
        for key, value in dict(data.get("defaults", {})).items()
    }
    return weights, caps, defaults


def _positive(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"--tenants {where}: expected a number > 0, got {value!r}")
    return float(value)


def tenant_policy(
    *,
    cap: int | None = None,
    cap_for: tuple[str, ...] = (),
    weight_for: tuple[str, ...] = (),
    path: Path | None = None,
) -> TenantPolicy:
    """The tenants' weights and caps from the flags and the optional file."""
    weights, caps, defaults = _from_file(path) if path is not None else ({}, {}, {})
    weights.update(_pairs(weight_for, "--tenant-weight", float))
    caps.update({t: int(n) for t, n in _pairs(cap_for, "--tenant-cap-for", int).items()})
    if cap is not None and cap < 1:
        raise ValueError(f"--tenant-cap {cap}: expected 1 or more (omit it for no cap)")
    default_cap = cap if cap is not None else defaults.get("cap")
    return TenantPolicy(
        weights=weights,
        default_weight=defaults.get("weight", 1.0),
        caps=caps,
        default_cap=None if default_cap is None else int(default_cap),
    )
