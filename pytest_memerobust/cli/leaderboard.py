"""`memerobust leaderboard RESULT.json ...`: detectors tested under one protocol, ranked, with intervals and the groups
that do not differ beyond noise (judge/leaderboard.py), as Markdown (stdout or --out), HTML and a plot."""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError


def add_parser(sub) -> None:
    board = sub.add_parser("leaderboard", help="rank detectors tested under one protocol (Markdown, HTML, plot)",
                           description="Rank the detectors of saved results (baselines from "
                                       "--memerobust-save-baseline; a file of several checkpoints of one recipe is "
                                       "one entry, their seeds' mean) by the average drop of accuracy, with "
                                       "intervals and the groups that do not differ beyond noise. Results of "
                                       "another protocol (seed, limit, data, meme ids, task, conditions, "
                                       "perturbation versions) are refused, naming what differs.")
    board.add_argument("results", nargs="+", metavar="RESULT.json")
    board.add_argument("--out", metavar="PATH.md", help="write the Markdown here (else it is printed)")
    board.add_argument("--html", metavar="PATH.html", help="also write an HTML page, the plot inside it")
    board.add_argument("--plot", metavar="PATH.png", help="also write the plot (average drop with its interval)")
    board.add_argument("--resamples", type=int, default=2000, metavar="N",
                       help="paired bootstrap resamples of the memes for the intervals and groups (default 2000)")
    board.add_argument("--confidence", type=float, default=0.95)


def load_entries(paths: list[str]) -> tuple[list, dict, str]:
    """(judge.leaderboard.Entry per model of each file, the protocol's facts, its fingerprint); a ConfigError naming
    the two entries and the first fact where any entry's protocol differs from the first's."""
    from ..judge.leaderboard import Entry, protocol, protocol_difference, protocol_fingerprint
    from ..perturb.conditions import attack_conditions
    from ..run.options import split_model
    from ..track.baseline import baseline_checkpoints, checkpoint_cells, load_baseline

    entries, first = [], None
    loaded = [(path, load_baseline(Path(path))) for path in paths]
    held = [m for _, data in loaded for m in data["results"] if split_model(m)[1] is None]
    for path, data in loaded:
        k = len(baseline_checkpoints(data))
        for model, by_spec in data["results"].items():
            if split_model(model)[1] is not None:
                continue  # one detector's channel (`memeclip:text`, the channel ablation): not an entry
            if len(by_spec) != 1:
                raise ConfigError(f"{path}: {model} was tested on {len(by_spec)} datasets ({', '.join(by_spec)}); a "
                                  "leaderboard ranks on one: save one result per dataset")
            facts = protocol(data, model)
            name = model + (f" (recipe, {k} seeds)" if k > 1 else "")
            if held.count(model) > 1:  # one card in several files: say which file
                name = f"{name} [{Path(path).name}]"
            if first is None:
                first = (name, path, facts)
            else:
                why = protocol_difference(first[2], facts)
                if why is not None:
                    raise ConfigError(f"{name} ({path}) was not tested under the protocol of {first[0]} "
                                      f"({first[1]}): {why}; a leaderboard ranks results of one protocol")
            spec, by_condition = next(iter(by_spec.items()))
            cells = {c: checkpoint_cells(e) for c, e in by_condition.items()}
            entries.append(Entry(name, spec, cells, attack_conditions(cells), str(path)))
    if not entries:
        raise ConfigError(f"{', '.join(map(str, paths))}: no detector to rank")
    return entries, first[2], protocol_fingerprint(first[2])


def run(args) -> int:
    from ..atomic import atomic_write_bytes, atomic_write_text
    from ..judge.leaderboard import ranking
    from ..report.leaderboard import html_page, markdown, plot_png

    if args.resamples < 100:
        raise ConfigError(f"--resamples {args.resamples}: at least 100 (intervals from fewer are noise)")
    if not 0 < args.confidence < 1:
        raise ConfigError(f"--confidence {args.confidence}: must lie strictly between 0 and 1, e.g. 0.95")
    outputs = [Path(p) for p in (args.out, args.html, args.plot) if p]
    for path in outputs:
        if path.is_dir():
            raise ConfigError(f"{path} is a folder: name a file to write")
        if str(path) in args.results:
            raise ConfigError(f"{path} is one of the results read: it would be overwritten")
    entries, facts, fingerprint = load_entries(args.results)
    seed = facts.get("seed") or 0
    board = ranking(entries, n_resamples=args.resamples, seed=seed, confidence=args.confidence)
    png = plot_png(board) if args.plot or args.html else None
    plot_ref = None
    if args.plot:
        atomic_write_bytes(Path(args.plot), png)
        plot_ref = Path(args.plot).name if args.out and Path(args.out).parent == Path(args.plot).parent \
            else str(args.plot)
    text = markdown(board, fingerprint, facts, plot_ref)
    if args.out:
        atomic_write_text(Path(args.out), text)
    else:
        print(text, end="")
    if args.html:
        atomic_write_text(Path(args.html), html_page(board, fingerprint, facts, png))
    written = [str(p) for p in outputs]
    if written:
        print(f"memerobust leaderboard: {len(entries)} entries under protocol {fingerprint}; wrote "
              f"{', '.join(written)}")
    return 0
