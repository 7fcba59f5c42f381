"""Running a leasekeeper: the ``leasekeeper`` command line and the service it wires together."""
