"""What the dashboard answers when a request cannot be served: its own page, with
the navigation, saying in a sentence what is wrong (no such queue, Kafka down), or
for ``/api/...`` a JSON body with the same sentence.

The sentence never carries the client library's ``KafkaError{code=...,val=...}``:
it names the cluster, the problem and the way out, as the commands do.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from http import HTTPStatus

from jobcore.kafka import ErrorKind, KafkaError, classify

__all__ = ["Response", "api_error", "kafka_trouble", "no_queue", "readable"]


@dataclass(frozen=True, kw_only=True)
class Response:
    status: HTTPStatus
    body: str
    content_type: str = "text/html; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()
    message: str = ""  # an error's sentence, for the JSON of an /api/ path


# How the client library prints an error: its code, number and text.
_KAFKA_ERROR = re.compile(r'KafkaError\{code=(\w+),val=-?\d+,str="([^"]*)"\}')


def readable(text: str) -> str:
    """``text`` with each ``KafkaError{...}`` replaced by its own words."""
    return _KAFKA_ERROR.sub(lambda m: m.group(2) or m.group(1), text)


def kafka_trouble(exc: Exception, bootstrap: str) -> str:
    """The sentence for a Kafka call that failed while building a page."""
    first = exc.args[0] if exc.args else None
    detail = readable(first.str() if isinstance(first, KafkaError) else str(exc))
    if classify(exc) is ErrorKind.TRANSIENT:
        return (
            f"Kafka at {bootstrap} does not answer ({detail}). This page shows again once "
            "it does: check that the brokers run, or the dashboard's --bootstrap."
        )
    return f"Kafka at {bootstrap} could not serve this page: {detail}"


def no_queue(queue: str, known: list[str]) -> str:
    """The sentence for a queue name that matches no queue of the cluster."""
    some = ", ".join(known[:10]) + (", …" if len(known) > 10 else "")
    listed = f"the queues are: {some}" if known else "it has no queues yet"
    return (
        f"There is no queue {queue!r} in this cluster ({listed}); "
        f"`producer create-queue --queue {queue}` creates one."
    )


def api_error(status: HTTPStatus, message: str) -> Response:
    """An error of ``/api/...``: JSON a script can read, with the page's status."""
    body = json.dumps({"error": message, "status": int(status)})
    return Response(status=status, body=body, content_type="application/json", message=message)
