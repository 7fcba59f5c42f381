"""A Django project that enqueues jobs plainly and through the outbox (see README.md)."""
