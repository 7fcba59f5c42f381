"""Reading past a flood: a flooding tenant's records wait in Kafka, the others go on."""
