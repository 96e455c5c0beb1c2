"""Performance harness; benchmarks/results/ records command, machine and figures per topic."""
