"""`python -m stratumc`: the `stratumc` command (how `run --detach` starts its driver)."""

from stratumc import main

main()
