"""`memerobust card RESULT.json --out card.md`: the robustness section of a detector's Hugging Face model card, its
figures as `model-index` results written through huggingface_hub (ModelCardData / EvalResult), so the Hub shows them
and `huggingface_hub.ModelCard.load` reads them back."""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError


def add_parser(sub) -> None:
    card = sub.add_parser("card", help="write the robustness section of a detector's model card (Hugging Face "
                                       "model-index metadata)")
    card.add_argument("result", metavar="RESULT.json", help="a saved baseline (--memerobust-save-baseline)")
    card.add_argument("--out", required=True, metavar="PATH.md", help="the model card to write (README.md on the Hub)")
    card.add_argument("--model", metavar="NAME", help="which model of the file, when it holds several")
    card.add_argument("--name", metavar="TEXT", help="the model's name on the card (default: the model's)")
    card.add_argument("--resamples", type=int, default=2000, metavar="N",
                      help="paired bootstrap resamples of the memes for the intervals (default 2000)")
    card.add_argument("--force", action="store_true", help="replace an existing card at --out")


def run(args) -> int:
    from ..atomic import atomic_write_text
    from ..judge.leaderboard import ranking
    from ..report.card import model_card_text
    from .leaderboard import load_entries

    out = Path(args.out)
    if out.is_dir():
        raise ConfigError(f"--out {out} is a folder: name the card's file (e.g. {out / 'README.md'})")
    if out.exists() and not args.force:
        raise ConfigError(f"--out {out} exists: a model card holds more than robustness; pass --force to replace it "
                          "(or write to another file and paste the section)")
    if args.resamples < 100:
        raise ConfigError(f"--resamples {args.resamples}: at least 100 (intervals from fewer are noise)")
    entries, facts, fingerprint = load_entries([args.result])
    if args.model is not None:
        chosen = [e for e in entries if e.name.partition(" (recipe")[0] == args.model]
        if not chosen:
            raise ConfigError(f"--model {args.model}: {args.result} holds {', '.join(e.name for e in entries)}")
        entries = chosen
    elif len(entries) > 1:
        raise ConfigError(f"{args.result} holds {len(entries)} models ({', '.join(e.name for e in entries)}): name "
                          "one with --model")
    board = ranking(entries, n_resamples=args.resamples, seed=facts.get("seed") or 0)
    entry = board["entries"][0]
    text = model_card_text(entry, board, facts, fingerprint, args.name or entry.name.partition(" (recipe")[0])
    atomic_write_text(out, text)
    print(f"memerobust card: wrote {out}: {len(entry.figures)} figures of {entry.name} on {entry.dataset} as "
          f"model-index results (protocol {fingerprint})")
    return 0
