"""Where a run's results go beyond its own reports: experiment trackers (MLflow, W&B) and perturbed memes as a
dataset. Each reads a finished report (the JSON's dict); none computes a verdict."""
