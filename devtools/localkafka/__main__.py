from devtools.localkafka.cli import kafka_cli

kafka_cli(prog_name="python -m devtools.localkafka")
