"""``python -m workers``: the same command as the ``workers`` script."""

from workers.cli import main

main()
