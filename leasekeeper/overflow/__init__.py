"""The overflow lane: a flooding tenant's jobs moved aside so that the others keep moving."""
