"""Performance harness; RESULTS.md records command, machine and figures."""
