"""The flip ledger: which memes a candidate checkpoint newly gets wrong, and which it newly gets right.

`memerobust compare` says whether a condition regressed; the ledger says on which memes, so a reviewer can look at
them. Per model, dataset and condition in both baselines: the memes right before and wrong after (and the
reverse), each with its id, caption and probability of its true label under both checkpoints, largest change
first, and McNemar's exact test on those discordant memes. Pure reading of two baselines; the gate's refusals
apply (`gate.paired_cells`).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from . import metrics
from ..atomic import atomic_write_text
from ..errors import ConfigError
from .gate import baseline_memes, correct, paired_cells
from ..report import true_probability
from ..report.tables import p_value

FORMAT = "pytest-memerobust-ledger/1"
FILES = ("flip-ledger.json", "flip-ledger.md")
_CAPTION_WIDTH = 80  # Markdown rows stay one screen wide; the JSON keeps the whole caption


def flip_ledger(before: dict, after: dict, names=("baseline A", "baseline B")) -> dict:
    """The ledger of two loaded baselines (`before` = the old checkpoint, `after` = the candidate), as plain
    JSON-serialisable values. Memes are named by the ids saved with the baseline, or by row index in baselines
    saved without them (then `caption` is None)."""
    conditions = []
    for model, spec, condition, then, now in paired_cells(before, after, names):
        ids, captions = baseline_memes(after, model, spec)
        if captions is None:
            ids, captions = baseline_memes(before, model, spec)
        y = np.asarray(now["y"])
        right_before, right_after = correct(y, then["perturbed"]), correct(y, now["perturbed"])
        p_before, p_after = (true_probability(np.asarray(c["perturbed"], dtype=np.float64), y) for c in (then, now))

        def entries(rows) -> list[dict]:
            out = [{"row": int(i), "id": ids[i], "caption": None if captions is None else captions[i],
                    "label": now["y"][i], "p_true_before": float(p_before[i]), "p_true_after": float(p_after[i]),
                    "change": float(p_after[i] - p_before[i]),
                    "proba_before": then["perturbed"][i], "proba_after": now["perturbed"][i]} for i in rows]
            return sorted(out, key=lambda e: (-abs(e["change"]), e["row"]))

        wrong, right = np.flatnonzero(right_before & ~right_after), np.flatnonzero(~right_before & right_after)
        conditions.append({
            "model": model, "dataset": spec, "condition": condition, "n": int(len(y)),
            "accuracy_before": float(right_before.mean()), "accuracy_after": float(right_after.mean()),
            "n_newly_wrong": int(len(wrong)), "n_newly_right": int(len(right)),
            "mcnemar_p": metrics.mcnemar_p_value(right_before, right_after),
            "newly_wrong": entries(wrong), "newly_right": entries(right)})
    if not conditions:
        raise ConfigError(f"{names[0]} and {names[1]} share no model, dataset and condition: no flip ledger")
    return {"format": FORMAT, "before": str(names[0]), "after": str(names[1]),
            "models": {"before": before.get("models", {}), "after": after.get("models", {})},
            "conditions": conditions}


def ledger_markdown(ledger: dict, max_rows: int = 20) -> str:
    """A section per condition: how many memes flipped each way, McNemar's p, and the `max_rows` largest changes
    of each list (the JSON holds them all)."""
    if max_rows < 0:
        raise ValueError(f"max_rows must be 0 or more, got {max_rows}")
    parts = [f"# Flip ledger: {_cell(ledger['before'])} (before) -> {_cell(ledger['after'])} (after)", "",
             "Per condition, the memes the candidate newly gets wrong and newly gets right (perturbed predictions), "
             "with the probability of the true label before and after; McNemar: exact two-sided test on those memes.",
             ""]
    for c in ledger["conditions"]:
        p = p_value(c["mcnemar_p"])
        parts += [f"## {c['model']} on {c['dataset']}: {c['condition']}", "",
                  f"{c['n']} memes: **{c['n_newly_wrong']} newly wrong**, **{c['n_newly_right']} newly right**; "
                  f"McNemar p {p if p.startswith('<') else '= ' + p}; accuracy {c['accuracy_before']:.4f} -> "
                  f"{c['accuracy_after']:.4f}", ""]
        rows = [(what, e) for what in ("newly_wrong", "newly_right") for e in c[what][:max_rows]]
        if rows:
            parts += ["| flip | id | caption | p(true) before | p(true) after | change |",
                      "|---|---|---|---:|---:|---:|"]
            parts += [f"| {what.replace('_', ' ')} | {_cell(e['id'])} | {_cell(_short(e['caption']))} | "
                      f"{e['p_true_before']:.3f} | {e['p_true_after']:.3f} | {e['change']:+.3f} |" for what, e in rows]
            left = sum(max(0, len(c[what]) - max_rows) for what in ("newly_wrong", "newly_right"))
            if left:
                parts.append(f"\n{left} more in {FILES[0]}")
            parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def write_ledger(ledger: dict, directory: Path, max_rows: int = 20) -> list[Path]:
    """`flip-ledger.json` and `flip-ledger.md` in `directory` (made if missing), each written atomically: a reader
    sees the previous ledger or the whole new one."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"ledger folder {directory} is a file")
    paths = [directory / name for name in FILES]
    try:
        atomic_write_text(paths[0], json.dumps(ledger, indent=1) + "\n")
        atomic_write_text(paths[1], ledger_markdown(ledger, max_rows))
    except OSError as exc:
        raise ConfigError(f"cannot write the flip ledger in {directory}: {exc.strerror or exc}") from None
    return paths


def _short(caption: str | None) -> str:
    if caption is None:
        return "-"
    return caption if len(caption) <= _CAPTION_WIDTH else caption[: _CAPTION_WIDTH - 1] + "…"


def _cell(text) -> str:
    """Text safe in a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def ledger_folder(reports, cache_dir) -> Path | None:
    """Where a gated run writes its ledger: beside its first report (what CI uploads as artifacts), else in the
    cache dir; None with neither."""
    if reports:
        return Path(reports[0]).parent
    return None if cache_dir is None else Path(cache_dir)


def write_run_ledger(session, directory: Path) -> str:
    """The flip ledger of this run against the baseline it was gated on (`--memerobust-baseline`), written to
    `directory`; the summary line saying what flipped and where it went."""
    from .gate import baseline_data

    names = (str(session.options.baseline), "this run")
    ledger = flip_ledger(session.baseline, baseline_data(session), names=names)
    paths = write_ledger(ledger, directory)
    wrong, right = (sum(c[key] for c in ledger["conditions"]) for key in ("n_newly_wrong", "n_newly_right"))
    return (f"memerobust: flip ledger against {names[0]}: {wrong} memes newly wrong and {right} newly right over "
            f"{len(ledger['conditions'])} conditions; written to {paths[0]} and {paths[1]}")
