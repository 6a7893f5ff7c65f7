"""`python -m llamalab.cli`: the `llamalab` command."""

from . import main

main()
