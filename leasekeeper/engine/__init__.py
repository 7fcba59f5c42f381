"""The lease engine: the composition root that builds the core, the features and the
ports over them, under one lock. The only folder that imports both."""

from leasekeeper.core.context import Counters
from leasekeeper.engine.config import EngineConfig
from leasekeeper.engine.lease_engine import UNKNOWN_JOB_TYPE, LeaseEngine

__all__ = ["UNKNOWN_JOB_TYPE", "Counters", "EngineConfig", "LeaseEngine"]
