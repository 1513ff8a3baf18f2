"""One module per built-in analysis registered after the registry existed: its runner, registered on import.
run/analysis_registry.py imports every module here, so a new analysis is its module here, its judgement in judge/
and its suite in suites/, and nothing else."""
