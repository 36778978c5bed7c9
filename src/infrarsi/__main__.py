"""``python -m infrarsi`` runs the command-line interface."""

from infrarsi.cli import main

main()
