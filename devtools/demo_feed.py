"""What the demo enqueues: a steady stream with something for every dashboard page.

Most jobs succeed; a few receipts are retried (the worker app's hiccups), one in
40 is for a negative amount and dead-letters (Dead letters), one in 25 waits
minutes before it runs (Scheduled: the delay tiers), and a cron entry fires every
half minute (Scheduled: cron entries, and the Job page behind its last fire).
"""

from __future__ import annotations

import itertools
import random
import threading
from pathlib import Path

from jobcore.kafka import KafkaSettings

__all__ = ["TENANTS", "cron_config", "produce"]

TENANTS = ("acme", "globex", "initech", "umbrella")
DEAD_EVERY = 40
DELAYED_EVERY = 25
CRON_ENTRY = "thumbnail-sweep"


def produce(settings: KafkaSettings, queue: str, stop: threading.Event) -> int:
    """Enqueue until ``stop`` is set; returns how many jobs went out."""
    from producer import JobProducer

    with JobProducer(settings) as producer:
        for n in itertools.count(1):
            if stop.wait(0.05):
                return n - 1
            tenant = random.choice(TENANTS)
            delay = random.uniform(120, 600) if n % DELAYED_EVERY == 0 else None
            if n % 3:
                payload = {
                    "order_id": n,
                    "email": f"{tenant}-{n}@example.com",
                    "amount_cents": -1999 if n % DEAD_EVERY == 1 else 1999,
                }
                producer.enqueue(queue, "send_receipt", payload, tenant_id=tenant, delay=delay)
            else:
                payload = {"image_url": f"s3://uploads/{n}.png", "width": 640, "height": 480}
                producer.enqueue(queue, "resize_image", payload, tenant_id=tenant, delay=delay)
    return 0  # not reached: count() never ends


def cron_config(queue: str, path: Path) -> Path:
    """A ``producer cron run`` file with one entry on ``queue``, written to ``path``."""
    path.write_text(
        f"[[cron]]\n"
        f'name = "{CRON_ENTRY}"\n'
        f'schedule = "*/30 * * * * *"\n'
        f'queue = "{queue}"\n'
        f'type = "resize_image"\n'
        f'tenant = "acme"\n'
        f'payload = {{ image_url = "s3://uploads/sweep.png", width = 64, height = 64 }}\n'
    )
    return path
