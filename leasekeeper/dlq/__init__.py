"""The dead-letter queue toolset: read, filter, show and replay ``jobs.Q.dlq``.

``leasekeeper dlq list|show|replay`` is the command line (``cli.py``); the
pieces below are the same operations for scripts and tests.
"""

from leasekeeper.dlq.entries import DeadLetterFilter, DlqEntry, decode_entry
from leasekeeper.dlq.reader import DlqError, read_dead_letters
from leasekeeper.dlq.replay import Replayer, ReplayOptions, ReplayReport, default_group, replay_job

__all__ = [
    "DeadLetterFilter",
    "DlqEntry",
    "DlqError",
    "ReplayOptions",
    "ReplayReport",
    "Replayer",
    "decode_entry",
    "default_group",
    "read_dead_letters",
    "replay_job",
]
