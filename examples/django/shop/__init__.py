"""The shop: orders whose receipts are sent by a job."""
