"""`python -m autotuner.cli`: the console script."""

from autotuner.cli.main import main

main()
