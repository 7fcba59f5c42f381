"""Test jobs and the code that enqueues them, without Kafka.

Nothing in the runtime (``producer``, ``workers``, ``leasekeeper``) imports this
package; it imports them. ``eager(app)``: jobs run inline at enqueue
(``jobtesting.eager``).
"""

from jobtesting.eager import Eager, EagerJobDead, EagerRun, eager

__all__ = ["Eager", "EagerJobDead", "EagerRun", "eager"]
