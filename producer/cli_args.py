"""What every ``producer`` command takes the same way: the queue, as ``--queue Q`` or as
the first argument."""

from __future__ import annotations

import click

__all__ = ["QUEUE_HELP", "queue_and_arguments"]

QUEUE_HELP = "The queue (topic jobs.QUEUE), as every command takes it; a first argument works too."


def queue_and_arguments(
    flag: str | None, words: tuple[str, ...], names: tuple[str, ...]
) -> tuple[str, tuple[str, ...]]:
    """The queue and the other arguments, whether the queue came as ``--queue Q`` (the
    spelling of every command) or as the first argument (the older one, kept)."""
    expected = len(names) + (0 if flag else 1)
    if len(words) != expected:
        given = " ".join(words) or "nothing"
        if flag:
            wanted = " ".join(names) or "no argument"
            raise click.UsageError(f"expected {wanted} after --queue {flag}, got {given}")
        positional = " ".join(("QUEUE", *names))
        with_flag = " ".join(("--queue QUEUE", *names))
        raise click.UsageError(f"expected {positional} or {with_flag}, got {given}")
    if flag:
        return flag, words
    return words[0], words[1:]
