"""``python -m contextstore`` runs the command-line interface."""

from contextstore.cli import main

main()
