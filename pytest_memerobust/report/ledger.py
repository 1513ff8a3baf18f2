"""The flip ledger as files: `flip-ledger.json` and a Markdown page a reviewer reads (a section per condition, the
largest changes first), written beside a gated run's reports or by `memerobust compare`. judge/ledger.py computes
the ledger from two baselines' cells; this only renders and writes it."""
from __future__ import annotations

import json
from pathlib import Path

from ..atomic import atomic_write_text
from ..errors import ConfigError
from .outline import p_value

FILES = ("flip-ledger.json", "flip-ledger.md")
_CAPTION_WIDTH = 80  # Markdown rows stay one screen wide; the JSON keeps the whole caption


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
        if c.get("basis"):  # unlabelled memes: each checkpoint against its own clean prediction
            parts += [f"## {c['model']} on {c['dataset']}: {c['condition']}", "",
                      f"{c['n']} memes without labels, each checkpoint against its own clean prediction: "
                      f"**{c['n_newly_wrong']} newly flipped**, **{c['n_newly_right']} no longer flipped**; McNemar "
                      f"p {p if p.startswith('<') else '= ' + p}; kept {c['accuracy_before']:.4f} -> "
                      f"{c['accuracy_after']:.4f}", ""]
        else:
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
