"""Where a run's results go beyond its own reports: experiment trackers (MLflow, W&B), perturbed memes as a
dataset, and the baseline file a later run is gated against (baseline.py). Each reads a finished run and computes no
verdict. The export regenerates a run's memes through a session, so this package sits beside run/, the run's layer:
nothing below imports it."""
