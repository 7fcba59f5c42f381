"""``python -m leasekeeper.dlq``: the ``leasekeeper dlq`` commands on their own."""

from leasekeeper.dlq.cli import dlq

dlq(prog_name="leasekeeper dlq")
