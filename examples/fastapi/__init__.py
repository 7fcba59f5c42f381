"""A FastAPI app that enqueues receipts and reports their status (see README.md)."""
