"""The robustness section of a Hugging Face model card: one entry's leaderboard figures (judge/leaderboard.py) as
`model-index` results through huggingface_hub's ModelCardData / EvalResult, and as a Markdown table. Renders, decides
nothing."""
from __future__ import annotations

TASK_TYPE = "image-text-classification"
SOURCE_URL = "https://pypi.org/project/pytest-memerobust/"
TASK_NAME = "harmful meme detection"
METRIC_TYPES = {"clean accuracy": "accuracy", "clean auroc": "roc_auc", "clean macro_f1": "f1",
                "average drop": "accuracy_drop", "dropping rate": "dropping_rate", "robust accuracy": "accuracy"}


def _metric_type(key: str) -> str:
    if key in METRIC_TYPES:
        return METRIC_TYPES[key]
    return "dropping_rate" if key.endswith("dropping rate") else "accuracy_drop"


def _metric_name(key: str, figure: dict) -> str:
    names = {"clean accuracy": "clean accuracy", "clean auroc": "clean AUROC", "clean macro_f1": "clean macro-F1",
             "average drop": "average drop of accuracy (every perturbed condition)",
             "dropping rate": "dropping rate of accuracy (every perturbed condition)",
             "robust accuracy": f"accuracy under the strongest attack (worst of {figure.get('attacks')})"}
    if key in names:
        return names[key]
    family, _, what = key.partition(" ")
    return f"{family}: {'mean drop of accuracy' if what == 'drop' else 'dropping rate of accuracy'}"


def eval_results(entry, facts: dict, fingerprint: str, version: str) -> list:
    """One huggingface_hub.EvalResult per figure, the interval, protocol and tool in its metric_args."""
    from huggingface_hub import EvalResult

    loader, _, _ = entry.dataset.partition(":")
    out = []
    for key, figure in entry.figures.items():
        out.append(EvalResult(
            task_type=TASK_TYPE, task_name=TASK_NAME, dataset_type=loader or entry.dataset,
            dataset_name=entry.dataset, dataset_split=(entry.dataset.split(":")[2]
                                                       if entry.dataset.count(":") >= 2 else None),
            metric_type=_metric_type(key), metric_name=_metric_name(key, figure),
            metric_value=round(float(figure["value"]), 4),
            metric_config=f"memerobust-protocol-{fingerprint}",
            metric_args={"interval": [round(float(figure["low"]), 4), round(float(figure["high"]), 4)],
                         "seeds": entry.seeds, "protocol": fingerprint, "seed": facts.get("seed"),
                         "tool": f"pytest-memerobust {version}"},
            source_name=f"pytest-memerobust {version}", source_url=SOURCE_URL))
    return out


def model_card_text(entry, board: dict, facts: dict, fingerprint: str, model_name: str) -> str:
    """The card's text: YAML metadata written by huggingface_hub, then the robustness section."""
    from huggingface_hub import ModelCard, ModelCardData

    from .. import __version__
    from .leaderboard import figure_text, protocol_line
    from .markdown import cell, table

    data = ModelCardData(model_name=model_name, tags=["pytest-memerobust", "robustness", "hateful-memes"],
                         eval_results=eval_results(entry, facts, fingerprint, __version__))
    rows = [[cell(_metric_name(k, f)), figure_text(f, k.endswith("dropping rate"))]
            for k, f in entry.figures.items()]
    body = "\n".join([
        f"# {model_name}", "", "## Robustness", "",
        f"Measured with pytest-memerobust {__version__} on {entry.dataset}: "
        + protocol_line(board, fingerprint, facts) + (f"; the mean of {entry.seeds} seeds" if entry.seeds > 1 else "")
        + ".", "",
        table(["figure", "value [95% interval]"], rows), "",
        "Drops are clean accuracy minus accuracy under the edit (a family's: the mean over its severities); the "
        "dropping rate is the drop over clean accuracy (Rainbow Noise, tables 2-3). Intervals: paired bootstrap of "
        f"the memes ({board['resamples']:,} resamples). Results under another protocol (fingerprint) do not compare.",
        ""])
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")
    return str(card)
