"""What must survive a partition moving to another leasekeeper, packed into the
offset commit's metadata string (as Confluent's Parallel Consumer does).

A commit says "everything below offset C is done"; jobs finish out of order, so
some offsets beyond C are done too, and some jobs there have used attempts.
Without that, the next owner would re-run every finished job beyond C and give
every job a fresh attempt count (a poison job could loop across moves). The
metadata carries both, compressed:

    lq1:<span>:<resolved bitmap>:<claims>

``span`` offsets from C are described; bit i of the bitmap says whether C+i is
resolved; ``claims`` lists (offset - C, claim count) pairs as varints. Both are
zlib-compressed and URL-safe base64 encoded. The broker's limit is
``offset.metadata.max.bytes`` (4096 by default), so the leasekeeper keeps each
partition's span within ``MAX_SPAN`` offsets (it pauses fetching beyond it:
back-pressure), except while it reads past a deferred flood: then it reads on while
the compressed bitmap still fits (``describe``). Claims that do not fit are dropped,
which only makes the next owner count those jobs' attempts from the envelope again.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

PREFIX = "lq1"
# Where another section (the overflow lane's tenants) starts after the progress.
SECTIONS = "|"
METADATA_LIMIT = 4000  # under the broker's default 4096 bytes
MAX_SPAN = 16_000  # worst case (no compression): 2,000 bytes of bitmap, 2,668 in base64
BISECTIONS = 8  # tries at a prefix that fits, when the whole does not


@dataclass(frozen=True, kw_only=True)
class Progress:
    """Offsets resolved beyond the commit, and claims of the unresolved ones."""

    resolved: frozenset[int]
    claims: Mapping[int, int]


def _varints(values: Iterable[int]) -> bytes:
    out = bytearray()
    for value in values:
        while True:
            byte = value & 0x7F
            value >>= 7
            if value:
                out.append(byte | 0x80)
            else:
                out.append(byte)
                break
    return bytes(out)


def _read_varints(data: bytes) -> list[int]:
    values, current, shift = [], 0, 0
    for byte in data:
        current |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
        else:
            values.append(current)
            current, shift = 0, 0
    return values


def _pack(data: bytes) -> str:
    return base64.urlsafe_b64encode(zlib.compress(data, 9)).decode().rstrip("=")


def _unpack(text: str) -> bytes:
    return zlib.decompress(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def encode(committed: int, progress: Progress, limit: int = METADATA_LIMIT) -> str:
    """The metadata string for a commit at ``committed``; always within ``limit``."""
    return describe(committed, progress, limit)[0]


def _head(beyond: list[int]) -> str:
    span = beyond[-1] + 1 if beyond else 0
    bitmap = bytearray((span + 7) // 8)
    for index in beyond:
        bitmap[index // 8] |= 1 << (index % 8)
    return f"{PREFIX}:{span}:{_pack(bytes(bitmap))}:"


def describe(committed: int, progress: Progress, limit: int = METADATA_LIMIT) -> tuple[str, bool]:
    """The metadata string for a commit at ``committed``, within ``limit``, and whether
    it describes every resolved offset beyond the commit.

    Within ``MAX_SPAN`` everything fits. Beyond it (a partition read far past a
    deferred flood), a bitmap of sparse resolutions still compresses well; when it
    does not fit, a prefix that does (bisected: compressed sizes are only roughly
    monotonic) is described, and the next owner
    runs again only the resolved offsets past it (the caller stops reading further)."""
    beyond = sorted(o - committed for o in progress.resolved if o >= committed)
    head = _head(beyond)
    described = len(head) <= limit
    if not described:
        fits, over = 0, len(beyond)  # a prefix of ``fits`` offsets fits, of ``over`` not
        # At most BISECTIONS tries: each compresses a bitmap as long as the span, under
        # the engine's lock, once per commit while it does not fit.
        for _ in range(BISECTIONS):
            if over - fits <= 1:
                break
            middle = (fits + over) // 2
            if len(_head(beyond[:middle])) <= limit:
                fits = middle
            else:
                over = middle
        beyond = beyond[:fits]
        if not beyond:
            return "", False  # the next owner re-runs what is beyond the commit
        head = _head(beyond)
    span = beyond[-1] + 1 if beyond else 0
    claims = sorted(
        (o - committed, n) for o, n in progress.claims.items() if o >= committed
        and (described or o - committed < span)
    )  # fmt: skip
    while claims:
        text = head + _pack(_varints(v for pair in claims for v in pair))
        if len(text) <= limit:
            return text, described
        claims = claims[: len(claims) // 2]  # keep the oldest: they are likelier poison
    return head, described


def decode(committed: int, metadata: str | None) -> Progress:
    """The progress in ``metadata`` (empty for foreign or malformed metadata)."""
    empty = Progress(resolved=frozenset(), claims={})
    metadata = (metadata or "").partition(SECTIONS)[0]  # other sections follow the progress
    if not metadata or not metadata.startswith(PREFIX + ":"):
        return empty
    try:
        _, span_text, bitmap_text, claims_text = metadata.split(":", 3)
        span = int(span_text)
        bitmap = _unpack(bitmap_text)
        resolved = frozenset(committed + i for i in range(span) if bitmap[i // 8] & (1 << (i % 8)))
        pairs = _read_varints(_unpack(claims_text)) if claims_text else []
        claims = {committed + pairs[i]: pairs[i + 1] for i in range(0, len(pairs) - 1, 2)}
    except (ValueError, IndexError, zlib.error):
        return empty
    return Progress(resolved=resolved, claims=claims)
