"""Where a run's results go beyond its own reports: experiment trackers (MLflow, W&B) and perturbed memes as a
dataset. Each reads a finished report (the JSON's dict) and computes no verdict. The export regenerates a run's memes
through a session, so this package sits beside run/, the run's layer: nothing below imports it."""
