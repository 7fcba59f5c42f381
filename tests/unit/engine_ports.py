"""Fakes of the lease engine for the Kafka side's unit tests: ``with_ports`` gives a
fake written with one method per operation the ports the loop, the committer, the
slow path and the overflow watch call (``LeaseEngine.partitions``, ``.fetch``...)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TypeVar

T = TypeVar("T")

# Per port: its method's name -> the fake's.
PORTS = {
    "partitions": {
        "assign": "assign",
        "assignment_received": "assignment_received",
        "begin_revoke": "begin_revoke",
        "revoke": "revoke",
        "assigned": "assigned",
        "in_flight": "in_flight",
    },
    "fetch": {
        "offer": "offer",
        "offer_many": "offer_many",
        "cancellations_arrived": "cancellations_arrived",
        "note_delayed": "note_delayed",
        "noted": "noted",
        "prune_notes": "prune_notes",
        "forget_delayed": "forget_delayed",
        "track_unoffered": "track_unoffered",
        "promote_due": "promote_due",
        "window_room": "window_room",
        "over_share": "over_share",
        "window_records": "window_records",
    },
    "workers": {
        "claim": "claim",
        "heartbeat": "heartbeat",
        "settle": "settle",
        "run_first_classes": "run_first_classes",
        "expire": "expire",
        "sweep_unhandled": "sweep_unhandled",
    },
    "commits": {
        "commit_positions": "commit_positions",
        "shrink_metadata": "shrink_metadata",
        "over_span": "over_span",
        "committed": "committed",
        "commit_soon": "commit_soon",
    },
    "copies": {"add": "copy", "take": "take_copies", "delivered": "copy_delivered"},
    "limits": {"park_excess": "park_excess"},
    "ordering": {"assign_lines": "assign_lines"},
    "overflow": {
        "floods": "overflow_floods",
        "watched": "overflow_watched",
        "committed": "overflow_committed",
        "copying": "copying",
    },
}


def with_ports(fake: T) -> T:
    """``fake`` with a namespace per port holding those of its methods the port has."""
    for port, names in PORTS.items():
        found = {new: getattr(fake, old) for new, old in names.items() if hasattr(fake, old)}
        if port == "fetch":  # the loop reads it once, for the overflow watch's slices
            found.setdefault("window_records", 1000)
        setattr(fake, port, SimpleNamespace(**found))
    return fake
