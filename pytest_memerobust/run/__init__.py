"""A run: the session (detector and dataset caches, evaluation), suites, replay of counterexamples, and what a
finished run writes. Below the pytest face and the command, above the judge and the reports it feeds."""
