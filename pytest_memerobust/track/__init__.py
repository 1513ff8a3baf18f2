"""Where a run's results go beyond its own reports, and the formats of what they leave: experiment trackers
(MLflow, W&B), a run history, perturbed memes as a dataset (its columns, card and folder), the baseline file a later
run is gated against (baseline.py), pictures and code digests a manifest records (artifacts.py). Each reads a
finished run's report and computes no verdict. It is a layer of its own, below run/: run/outputs.py ends a run by
calling it and run/export.py evaluates a report's recipe again before track/export.py writes the set; nothing here
imports run/."""
