"""Circuit breakers per job type: the policy, its gate in dispatch, the shared feed, the CLI."""
