"""The workers' gRPC front: claim, heartbeat and settle, and who may connect."""
