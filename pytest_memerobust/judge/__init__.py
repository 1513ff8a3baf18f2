"""The judgement layer: everything that turns a detector's outputs into a verdict (metrics and their intervals,
suite thresholds, the baseline gate and its rules, the flip ledger, FDR, evasion budgets, reliance, prompt invariance,
the OCR view). Reports render what it decides; nothing here writes a report."""
