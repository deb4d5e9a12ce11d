"""`python -m safebeat` runs the `safebeat` command line."""

from safebeat.cli import main

main(prog_name="safebeat")
