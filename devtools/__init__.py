"""Development tooling: the local Kafka manager, the ``make run`` demo, the retry-storm
simulator. The runtime packages never import it at module level, so a deployment does
not carry (or break on) what only development and tests need."""
