"""Test jobs and the code that enqueues them, without Kafka.

Nothing in the runtime (``producer``, ``workers``, ``leasekeeper``) imports this
package; it imports them. ``eager(app)``: jobs run inline at enqueue
(``jobtesting.eager``), and staged ones at commit (``jobtesting.outbox``).
"""

from jobtesting.eager import Eager, EagerJobDead, EagerRun, eager
from jobtesting.outbox import EagerOutbox

__all__ = ["Eager", "EagerJobDead", "EagerOutbox", "EagerRun", "eager"]
