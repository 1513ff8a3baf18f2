"""The paper's tables (Rainbow Noise 2-7) rendered from a report dict, so a saved JSON re-renders identically."""
from __future__ import annotations

from tabulate import tabulate

from .analysis_tables import analysis_notes, analysis_table, analysis_title
from .figures import NO_LABELS
from .outline import NOT_JUDGED, VERDICT_LABELS, VERDICT_RANK, group_title, p_value, signed, unnumbered

METRIC_COLUMNS = (("accuracy", "Accuracy"), ("auroc", "AUROC"), ("macro_f1", "F1"))


def _fmt(value, digits=3) -> str:
    return unnumbered(value) or f"{value:.{digits}f}"


NO_ANSWERS = "no answers"


def unlabelled_row(row: dict | None) -> bool:
    """A result of unlabelled memes (meme.Dataset.unlabelled): its label-bound figures are not judged."""
    return bool(row) and row.get("labelled") is False


def unanswered(row: dict | None) -> bool:
    """A result with no meme left to score: the detector declined them (a prompted model whose label words got too
    little of its answer), so its metrics are undefined, not zero."""
    return bool(row) and row.get("n") == 0 and bool(row.get("n_declined"))


def metric_text(row: dict, value, digits=3) -> str:
    """A measure of `row`: `no answers` where the detector declined every meme, else the number (worded where it is
    undefined for another reason, or not measured: `unnumbered`)."""
    if value is None or value != value:
        if unanswered(row):
            return NO_ANSWERS
        if unlabelled_row(row):
            return NO_LABELS
    return _fmt(value, digits)


def single_channel_table(group: dict, kind: str, tablefmt: str) -> str | None:
    """Tables 2-4 shape: a clean row, then one row per perturbation, robustness of accuracy as the paper prints."""
    rows = [r for r in group["results"] if r["kind"] == kind]
    if not rows:
        return None
    clean = group["clean"]
    body = [["Clean", *(metric_text(clean, clean["metrics"][m]) for m, _ in METRIC_COLUMNS), *["–"] * 5]]
    for r in rows:
        side = r["condition"] if kind == "prompt" else r["condition"].split("=", 1)[1]
        lo, hi = r["relative_robustness_ci"]["accuracy"]
        body.append([side, *(metric_text(r, r["metrics"][m]) for m, _ in METRIC_COLUMNS),
                     *(["–"] * 4 if unanswered(r) else
                       [metric_text(r, r["absolute_robustness"]["accuracy"], 5),
                        metric_text(r, r["relative_robustness"]["accuracy"], 5),
                        NO_LABELS if unlabelled_row(r) else f"{_fmt(lo, 3)}..{_fmt(hi, 3)}", _fmt(r["flip_rate"], 3)]),
                     p_value(r.get("mcnemar_p"))])
    # Robustness columns are of accuracy, as the paper prints them; McNemar's exact test asks whether accuracy
    # changed more than chance would (same memes, clean vs perturbed).
    headers = ["Perturbation", *(h for _, h in METRIC_COLUMNS), "Abs. Rob. Acc.", "Rel. Rob. Acc.",
               "Rel. Rob. Acc. CI", "Flip", "McNemar p"]
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def grid_table(group: dict, tablefmt: str) -> str | None:
    """Tables 5-6 shape: text index x image index with drops from clean, then average drop and dropping rate."""
    cells = {r["condition"]: r for r in group["results"] if r["kind"] == "combined"}
    if not cells:
        return None
    clean = group["clean"]["metrics"]
    body = [["0", "0", *(metric_text(group["clean"], clean[m]) for m, _ in METRIC_COLUMNS), "–", "–", "–"]]
    for ti, text in enumerate(group["grid_text"], 1):
        for ii, image in enumerate(group["grid_image"], 1):
            r = cells.get(f"{text}+{image}")
            if r is None:
                continue
            body.append([str(ti), str(ii), *(metric_text(r, r["metrics"][m]) for m, _ in METRIC_COLUMNS),
                         *(metric_text(r, clean[m] - r["metrics"][m]) for m, _ in METRIC_COLUMNS)])
    summary = group["grid_summary"]
    if unanswered(group["clean"]):  # declined every clean meme: no cell has answers either
        body += [[name, "", "", "", "", *[NO_ANSWERS] * 3] for name in ("Average drop", "Average dropping rate")]
    else:
        body.append(["Average drop", "", "", "", "", *(_fmt(summary["average_drop"][m], 4) for m, _ in METRIC_COLUMNS)])
        body.append(["Average dropping rate", "", "", "", "",
                     *(unnumbered(rate) or f"{100 * rate:.2f}%"
                       for rate in (summary["dropping_rate"][m] for m, _ in METRIC_COLUMNS))])
    headers = ["Text noise", "Image noise", *(h for _, h in METRIC_COLUMNS), "Δ Acc", "Δ AUROC", "Δ F1"]
    table = tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True)
    legend = ("Text-noise indices: " + "; ".join(f"{i} = {t.split('=', 1)[1]}" for i, t in
                                                 enumerate(group["grid_text"], 1)) +
              "\nImage-noise indices: " + "; ".join(f"{i} = {t.split('=', 1)[1]}" for i, t in
                                                    enumerate(group["grid_image"], 1)))
    return f"{table}\n{legend}" if tablefmt != "html" else f"{table}<p>{legend.replace(chr(10), '<br>')}</p>"


def group_table(group: dict, tablefmt: str) -> str | None:
    """Relative robustness of accuracy per group (e.g. PrideMM target) and condition, with the gap per row."""
    rows = [r for r in group["results"] if r.get("groups", {}).get("accuracy")]
    if not rows:
        return None
    names = sorted({g for r in rows for g in r["groups"]["accuracy"]})
    sizes = {g: next(r["groups"]["accuracy"][g]["n"] for r in rows if g in r["groups"]["accuracy"]) for g in names}
    body = []
    for r in rows:
        scores = r["groups"]["accuracy"]
        values = [scores[g]["relative_robustness"] for g in names if g in scores]
        body.append([r["condition"].replace("text=", "").replace("image=", ""),
                     *(_fmt(scores[g]["relative_robustness"]) if g in scores else "–" for g in names),
                     _fmt(max(values) - min(values)) if len(values) > 1 else "–"])
    headers = ["Condition", *(f"{g} (n={sizes[g]})" for g in names), "Gap"]
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def ocr_view_table(group: dict, tablefmt: str) -> str | None:
    """Per image condition: how much of the caption OCR still reads (character error rate against its clean reading,
    with the interval; the share of its words still read; the share of memes it reads nothing of) next to the
    detector's accuracy drop and flip rate."""
    view = group.get("ocr_view")
    if not view or not view["rows"]:
        return None
    body = []
    for r in view["rows"]:
        lo, hi = r["cer_ci"]
        body.append([r["condition"].replace("image=", ""), str(r["memes"]), _fmt(r["cer"]),
                     f"{_fmt(lo)}..{_fmt(hi)}", _fmt(r["words_kept"]), _fmt(r["unread"]), _fmt(r["accuracy_drop"]),
                     _fmt(r["flip_rate"])])
    headers = ["Image perturbation", "Memes read", "OCR CER", "CER CI", "Words kept", "Read nothing",
               "Detector Δ Acc", "Flip"]
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def caption_attack_table(group: dict, tablefmt: str) -> str | None:
    """When a group has TextAttack cases: every caption-only case's attack measures side by side, TextAttack's own
    (success rate, queries, words changed in its successful attacks) next to ours for every perturbation (success
    rate from the predictions, share of words changed over all memes), accuracy, robustness and flips."""
    rows = [r for r in group["results"] if r["kind"] == "text"]
    if not any((r.get("caption_edit") or {}).get("textattack") for r in rows):
        return None
    body = []
    for r in rows:
        edit = r.get("caption_edit") or {}
        measured = edit.get("textattack") or {}
        lo, hi = r["relative_robustness_ci"]["accuracy"]
        body.append([r["condition"].split("=", 1)[1], _fmt(r.get("attack_success_rate")),
                     _fmt(measured.get("success_rate")) if measured else "–",
                     f"{measured['avg_queries']:.1f}" if measured.get("avg_queries") is not None else "–",
                     _fmt(edit.get("words_changed")), _fmt(measured.get("words_changed")) if measured else "–",
                     _fmt(r["metrics"]["accuracy"]), _fmt(r["relative_robustness"]["accuracy"]),
                     f"{_fmt(lo)}..{_fmt(hi)}", _fmt(r["flip_rate"])])
    headers = ["Caption edit", "Success", "Success (TA)", "Queries (TA)", "Words changed", "Words changed (TA)",
               "Accuracy", "Rel. Rob. Acc.", "Rel. Rob. Acc. CI", "Flip"]
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def picture_attack_table(group: dict, tablefmt: str) -> str | None:
    """When a group has per-meme image attacks: per case, robust accuracy with its interval, the memes it fooled of
    those the detector got right clean (judge.results.ConditionResult.fooled, as the transfer matrix counts them),
    queries, words changed by a joint attack, which member of an ensemble won, and the sanity flags
    (image_attacks.summary measures them; this only lays them out). An attack crafted on another model (`from=`)
    was run against that model: its queries, winners and flags are its source's; what it fooled is this model's."""
    rows = [r for r in group["results"] if r.get("picture_attack")]
    if not rows:
        return None
    body = []
    for r in rows:
        a = r["picture_attack"]
        lo, hi = r["relative_robustness_ci"]["accuracy"]
        won = ", ".join(f"{k} {v}" for k, v in (a.get("won_by") or {}).items()) or "–"
        body.append([r["condition"].split("=", 1)[1], _fmt(r["metrics"]["accuracy"]),
                     _fmt(r["relative_robustness"]["accuracy"]), f"{_fmt(lo)}..{_fmt(hi)}",
                     "–" if a.get("fooled_of_right_clean") is None  # (a report of an earlier version)
                     else f"{a['fooled_of_right_clean']} of {a['right_clean']}",
                     (str(a["queries"]) if a["queries"] else "–") + (" on its source" if a.get("on_source") else ""),
                     _fmt(a["words_changed"]) if a.get("words_changed") is not None else "–", won,
                     ", ".join(f"{k} {_fmt(v)}" for k, v in (a.get("medians") or {}).items()) or "–",
                     "; ".join(a.get("flags") or []) or "none"])
    headers = ["Image attack", "Robust Acc.", "Rel. Rob. Acc.", "Rel. Rob. Acc. CI", "Fooled of right clean", "Queries",
               "Words changed", "Won by", "Medians", "Sanity flags"]
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def transfer_table(matrix: dict, tablefmt: str) -> str:
    """Sources down, targets across: memes fooled of those the target got right clean, share and interval
    (judge/transfer.py computes them; the diagonal is the white-box attack)."""
    body = []
    for source, row in zip(matrix["sources"], matrix["cells"]):
        body.append([f"crafted on {source}"] + ["–" if c is None else
                                                f"{_fmt(c['share'])} ({_fmt(c['ci'][0])}..{_fmt(c['ci'][1])}) "
                                                f"{c['fooled']}/{c['out_of']}" for c in row])
    return tabulate(body, headers=["", *(f"on {t}" for t in matrix["targets"])], tablefmt=tablefmt,
                    disable_numparse=True)


def instruction_table(group: dict, tablefmt: str) -> str | None:
    """When a group has cases whose image perturbation writes a verdict or the benign class's words into the
    picture: per case, of the memes not called benign clean, the share whose verdict follows the writing, with its
    interval (judge/instructions.py computes them)."""
    rows = [r for r in group["results"] if r.get("instruction_followed")]
    if not rows:
        return None
    body = []
    for r in rows:
        f = r["instruction_followed"]
        lo, hi = f["ci"]
        body.append([r["condition"], f["written"].replace("_", " "), _fmt(f["share"]), f"{_fmt(lo)}..{_fmt(hi)}",
                     f"{f['count']} of {f['out_of']}"])
    headers = ["Condition", "Written", "Followed", "Followed CI", "Memes"]
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def abstention_table(group: dict, tablefmt: str) -> str | None:
    """When the detector can decline (a prompted vision-language model): per condition, how often it declined, the
    change from clean with its interval, and how many memes were left out of the metrics (declined clean or there)."""
    rows = [r for r in [group["clean"], *group["results"]] if "abstention_rate" in r]
    if not rows:
        return None
    body = []
    for r in rows:
        lo, hi = r.get("abstention_increase_ci", (None, None))
        change = "–" if "abstention_increase" not in r else f"{r['abstention_increase']:+.3f}"
        body.append([r["condition"], _fmt(r["abstention_rate"]), change,
                     "–" if lo is None else f"{lo:+.3f}..{hi:+.3f}", str(r.get("n_declined", 0)), str(r["n"])])
    headers = ["Condition", "Declined", "Δ from clean", "Δ CI", "Left out", "Scored"]
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def sampling_table(group: dict, tablefmt: str) -> str | None:
    """When the detector was asked each meme k times (a card with samples/temperature): per condition, the
    repeat-sampling figures with their intervals over memes, and the flip rate between one asking of the clean meme
    and one of the perturbed meme beside the self flip rate of asking the clean meme again (judge/sampling.py)."""
    rows = [r for r in [group["clean"], *group["results"]] if "sampling" in r]
    if not rows:
        return None

    def cell(s: dict, name: str) -> str:
        if name not in s:
            return "–"
        lo, hi = s[f"{name}_ci"]
        return f"{_fmt(s[name])} ({_fmt(lo)}..{_fmt(hi)})"

    body = [[r["condition"], str(r["sampling"]["k"]),
             *(cell(r["sampling"], name) for name in ("expected_accuracy", "consensus_accuracy", "internal_variance",
                                                     "consistency_rate", "flip_rate", "self_flip_rate")),
             _fmt(r["sampling"]["declined_rate"])] for r in rows]
    headers = ["Condition", "k", "Expected acc.", "Consensus acc.", "Internal var.", "Consistency", "Flip (sampled)",
               "Self flip (clean)", "Declined"]
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def prompt_table(entry: dict, tablefmt: str) -> str:
    """Per prompt variant: the share of memes whose verdict it changes, how many it declines, its accuracy."""
    body = [[r["variant"], _fmt(r["flip_rate"]), _fmt(r["declined"]), _fmt(r["accuracy"])] for r in entry["variants"]]
    return tabulate(body, headers=["Prompt variant", "Verdicts changed", "Declined", "Accuracy"], tablefmt=tablefmt,
                    disable_numparse=True)


def prompt_summary(entry: dict) -> list[str]:
    """The prompt-invariance figures per meme, with their intervals, and the memes most sensitive to wording."""
    (lo, hi), (alo, ahi) = entry["mean_flip_share_ci"], entry["any_flip_share_ci"]
    lines = [f"per meme, share of variants that change its verdict: {_fmt(entry['mean_flip_share'])} "
             f"({_fmt(lo)}..{_fmt(hi)}); memes changed by at least one: {_fmt(entry['any_flip_share'])} "
             f"({_fmt(alo)}..{_fmt(ahi)}); accuracy with the card's prompt {_fmt(entry['base_accuracy'])}"]
    return lines + [f"most sensitive: {m['id']} ({_fmt(m['flip_share'])}) {m['caption'][:60]!r}"
                     for m in entry["most_sensitive"]]


def render(report: dict, tablefmt: str = "simple", heading=lambda text: f"{text}\n") -> str:
    """Every table of every (model, dataset) group, each under a heading."""
    parts = []
    for group in report["groups"]:
        title = group_title(group)
        for label, table in (("text-only perturbations", single_channel_table(group, "text", tablefmt)),
                             ("image-only perturbations", single_channel_table(group, "image", tablefmt)),
                             ("combined text x image perturbations", grid_table(group, tablefmt)),
                             ("prompt edits, alone and with text or image perturbations",
                              single_channel_table(group, "prompt", tablefmt)),
                             ("caption attacks: success, queries and words changed (TA: TextAttack's own measures; "
                              "words changed: all memes, TA: its successful attacks)",
                              caption_attack_table(group, tablefmt)),
                             ("image attacks per meme: robust accuracy, memes fooled of those right clean, queries, "
                              "the ensemble's winner and its sanity flags", picture_attack_table(group, tablefmt)),
                             ("written into the picture: of the memes not called benign clean, the share whose "
                              "verdict follows the writing (Wilson interval)", instruction_table(group, tablefmt)),
                             ("relative robustness of accuracy per group", group_table(group, tablefmt)),
                             ("abstentions: memes the detector declined to classify (left out of the metrics)",
                              abstention_table(group, tablefmt)),
                             ("repeat sampling: each meme asked k times (intervals over memes; a perturbation's "
                              "flip rate beside the model's own, asking the clean meme again)",
                              sampling_table(group, tablefmt)),
                             (f"what OCR ({group.get('ocr_view', {}).get('backend')}) still reads of the caption, "
                              f"next to the detector's drop", ocr_view_table(group, tablefmt)),
                             *((f"behind the defence {d['defence']} (caption edits re-chosen against it): "
                                f"{defence_cost(d)}", defence_table(d, tablefmt)) for d in group.get("defences", ()))):
            if table:
                parts.append(heading(f"{title}: {label}") + table)
        if len(parts) == 0 or not any(r["kind"] != "clean" for r in group["results"]):
            c = group["clean"]
            parts.append(heading(f"{title}: clean") + tabulate(
                [[metric_text(c, c["metrics"][m]) for m, _ in METRIC_COLUMNS]], headers=[h for _, h in METRIC_COLUMNS],
                tablefmt=tablefmt, disable_numparse=True))
    for entry in report.get("prompt_invariance", []):
        parts.append(heading(f"prompt invariance: {entry['model']} on {entry['dataset']} (n={entry['n']})")
                     + prompt_table(entry, tablefmt) + "\n" + "\n".join(prompt_summary(entry)))
    if report.get("reliance"):
        parts.append(heading("modality reliance: which channel decides") + reliance_table(report["reliance"], tablefmt))
    for matrix in report.get("transfer", []):
        parts.append(heading(f"transfer of {', '.join(matrix['conditions'])} on {matrix['dataset']}: memes fooled of "
                             f"those right clean (95% Wilson interval); the diagonal is the white-box attack")
                     + transfer_table(matrix, tablefmt))
    for entry in report.get("budgets", []):
        parts.append(heading(budget_title(entry)) + budget_table(entry["entries"], tablefmt))
    for entry in report.get("analyses", []):  # registered analyses: their own neutral tables
        parts.append(heading(analysis_title(entry)) + analysis_table(entry, tablefmt)
                     + "".join(f"\n{note}" for note in analysis_notes(entry)))
    return "\n\n".join(parts)


def budget_title(entry: dict) -> str:
    return (f"evasion budgets: {entry.get('label', entry['model'])} on {entry['dataset']} (the smallest edit that "
            f"gets a harmful meme it flags past it)")


def _told_apart(pairs: dict) -> str:
    """`0.222 of 9`; `no pairs` where there are none to tell apart (the share is undefined, never `nan of 0`)."""
    return f"{_fmt(pairs['told_apart'])} of {pairs['pairs']}" if pairs["pairs"] else "no pairs"


def reliance_table(entries: list[dict], tablefmt: str = "simple") -> str:
    """One row per (model, dataset): modality-swap shares and confounder pairs told apart (reliance.py)."""
    rows = []
    for e in entries:
        swap, same_text, same_image = e["swap"], e["confounders"]["same_text"], e["confounders"]["same_image"]
        rows.append([e["model"], e["dataset"], f"{swap['n_informative']}/{swap['n_swaps']}",
                     _fmt(swap["follows_text"]), _fmt(swap["follows_image"]),
                     _told_apart(same_text), _told_apart(same_image)])
    return tabulate(rows, headers=["model", "data", "informative swaps", "follows caption", "follows picture",
                                   "same-caption pairs told apart", "same-picture pairs told apart"],
                    tablefmt=tablefmt, disable_numparse=True)


def failure_table(model: str, condition: str, violations, result, regressions=()) -> str:
    """What a failing suite item prints: each violated threshold with its value, limit and interval, and each
    regression against the baseline."""
    rows = [[v.what, _fmt(v.value, 4), f"{v.comparison} {v.limit:.4f}", f"{_fmt(v.ci[0], 4)}..{_fmt(v.ci[1], 4)}"]
            for v in violations]
    conf = f"{violations[0].confidence:.0%} CI" if violations else "CI"
    table = tabulate(rows, headers=["metric", "value", "required", conf], tablefmt="simple", disable_numparse=True)
    clean, now = result.clean_values, result.values
    context = ", ".join(f"{m} {_fmt(clean[m])} -> {_fmt(now[m])}" for m, _ in METRIC_COLUMNS)
    parts = []
    if violations:
        parts.append(f"{model} under {condition} is below the suite's robustness thresholds:\n{table}")
    if regressions:
        parts.append(f"{model} under {condition} against the baseline:\n"
                     + "\n".join(f"  {r}" for r in regressions))
    mcnemar = ("" if result.condition.kind == "clean"
               else f"; McNemar p {p_value(result.mcnemar_p)} (did accuracy change more than chance?)")
    if not result.labelled:  # no labels: nothing is right or wrong, the flips and the confidence are what moved
        context, mcnemar = f"{NO_LABELS} (accuracy, AUROC, F1 not judged)", (
            "" if result.condition.kind == "clean" else f"; confidence drop {_fmt(result.confidence_drop)}")
    parts.append(f"clean -> perturbed: {context}; flip rate {_fmt(result.flip_rate)} "
                 f"(n={len(result.memes.y_true)}){mcnemar}")
    return "\n".join(parts)


def _budget(value, levels) -> str:
    """A budget level as read: `3`, `> 10` past the last level (censored), `–` where nothing was measured."""
    if value is None:
        return "–"
    if value == "inf":
        return f"> {levels[-1]}"
    return f"{value:g}"


def budget_table(entries: list[dict], tablefmt: str = "simple") -> str:
    """One row per edit family (budgets.py): the median budget that gets a harmful meme past the detector, with its
    interval; the share evaded within the first level and within the last; the robustness curve's area (1: every
    meme falls at the first level)."""
    rows = []
    for e in entries:
        levels = e["levels"]
        lo, hi = e["median_ci"]
        rows.append([e["family"], f"{levels[0]}..{levels[-1]} {e['unit']}".strip(), e["n"],
                     f"{_budget(e['median'], levels)} ({_budget(lo, levels)}..{_budget(hi, levels)})",
                     _fmt(e["curve"][0]), _fmt(e["curve"][-1]),
                     f"{_fmt(e['area'])} ({_fmt(e['area_ci'][0])}..{_fmt(e['area_ci'][1])})", e["n_censored"]])
    return tabulate(rows, headers=["family", "budgets", "memes", "median budget (CI)", "evaded at first",
                                   "evaded by last", "curve area (CI)", "not evaded"],
                    tablefmt=tablefmt, disable_numparse=True)


def defence_cost(entry: dict) -> str:
    """The defence's price on clean memes, e.g. `clean accuracy 0.712 -> 0.705 (cost 0.007), AUROC ...`."""
    return ", ".join(f"clean {h if m != 'accuracy' else 'accuracy'} {_fmt(c['undefended'])} -> {_fmt(c['defended'])} "
                     f"(cost {_fmt(c['cost'])})" for m, h in METRIC_COLUMNS if (c := entry["clean"][m]))


def defence_table(entry: dict, tablefmt: str = "simple") -> str | None:
    """Attack x defence (judge/summaries.py, defence_summary): relative robustness of accuracy and flip rate without and
    behind the defence, and whether the defence neutralises the attack."""
    if not entry["rows"]:
        return None

    def cell(side: dict, key: str) -> str:
        lo, hi = side[f"{key}_ci"]
        return f"{_fmt(side[key])} ({_fmt(lo)}..{_fmt(hi)})"

    body = [[r["condition"], cell(r["undefended"], "relative_accuracy"), cell(r["defended"], "relative_accuracy"),
             cell(r["undefended"], "flip_rate"), cell(r["defended"], "flip_rate"), r["verdict"]] for r in entry["rows"]]
    return tabulate(body, headers=["attack", "Rel. Rob. Acc. undefended", "defended", "Flip undefended", "defended",
                                   "verdict"], tablefmt=tablefmt, disable_numparse=True)


VERDICT_WORDS = {"pass": "pass", "fail for sure": "FAIL", "fail within noise": "noise", "error": "ERROR",
                 "skipped": "skip", NOT_JUDGED: NOT_JUDGED}


def family_rollup(report: dict, tablefmt: str = "simple", width: int | None = None) -> str:
    """The terminal's default tables: per suite, model and dataset, one line per perturbation family with its worst
    case (judge.verdict.worst_case), how many of its cases fail their thresholds, and that case's verdict as
    recorded; narrow enough for an 80-column CI log. Each headline names the dataset by its file's name and, within
    `width` columns, keeps its figure whole (what gives way is the name before it)."""
    from .gate_tables import short_condition
    from .outline import family_summaries

    # the clean row is one per model and dataset, whichever suite's group holds it (a suite whose only case ran is
    # its clean case has none of its own)
    clean = {(g["label"], g["dataset"]): g["clean"] for g in report["groups"]}
    parts = []
    for entry in family_summaries(report):
        suite, model, dataset, mine = entry["suite"], entry["model"], entry["dataset"], entry["records"]
        regressions = any(r["regressions"] for r in mine)
        lines = []
        for f in entry["families"]:
            family, cases, failing = f["family"], f["cases"], f["failing"]
            regressed = [str(f["regressed"])] if regressions else []
            if f["worst_row"] is None:  # all skipped, or cases with no condition row (the evasion budgets)
                done = [r for r in cases if r["outcome"] != "skipped"]
                worst_verdict = max((r["verdict"] for r in done), key=VERDICT_RANK.get, default=None)
                unjudged = all(r["verdict"] == NOT_JUDGED for r in cases)  # measured, but none of them judged
                lines.append([family, f"{failing}/{len(cases)}" if done else
                              f"{len(cases)} {NOT_JUDGED if unjudged else 'skip'}", *regressed,
                              "", "", "", VERDICT_WORDS[worst_verdict] if worst_verdict else ""])
                continue
            record, worst = f["worst_record"], f["worst_row"]
            drop = worst["metrics"]["accuracy"] - worst["clean_metrics"]["accuracy"]
            lines.append([family, f"{failing}/{len(cases)}", *regressed, short_condition(worst["condition"]),
                          NO_ANSWERS if unanswered(worst) else NO_LABELS if unlabelled_row(worst) else signed(drop),
                          metric_text(worst, worst.get("flip_rate", float("nan"))), VERDICT_WORDS[record["verdict"]]])
        c = clean.get((model, dataset))
        clean_record = next((r for r in mine if r["condition"] == "clean"), None)
        accuracy = ("unlabelled memes (flips judged, accuracy not)" if unlabelled_row(c) else
                    f"clean accuracy {metric_text(c, (c or {}).get('metrics', {}).get('accuracy'))}")
        figure = (f": {accuracy}"
                  + (f" ({clean_record['verdict']}" + (", regressed" if clean_record["regressed"] else "") + ")"
                     if clean_record else ""))
        title = _headline(f"{suite}: {model} on {short_dataset(dataset)}", figure, width)
        headers = ["family", "fail", *(["regr."] if regressions else []), "worst case", "Δ acc.", "flips", "verdict"]
        parts.append(f"{title}\n" + tabulate(lines, headers=headers, tablefmt=tablefmt, disable_numparse=True))
    if parts:
        parts.append("fail: cases below their thresholds; verdict (of the worst case): FAIL = its\n"
                     "interval is past the limit, noise = only its estimate is, pass")
    return "\n\n".join(parts)


def short_dataset(spec: str) -> str:
    """A dataset spec as a headline names it: a path by its file's (or folder's) name, `pridemm:m3h_ocr.csv` for
    `pridemm:/data/PrideMM/m3h_ocr.csv`; the reports keep the whole spec."""
    from ..data.reading import CAPTIONS_BY_OCR

    ocr = spec.endswith(CAPTIONS_BY_OCR)
    name, colon, path = spec.removesuffix(CAPTIONS_BY_OCR).partition(":")
    if colon and ("/" in path or "\\" in path):
        path = path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or path
    return f"{name}{colon}{path}" + (" (OCR captions)" if ocr else "")


def _headline(head: str, figure: str, width: int | None) -> str:
    """`head` and its `figure`, within `width` columns when one is given: the head is shortened (ending in `…`),
    never the figure."""
    if width is None or width <= 0 or len(head) + len(figure) <= width:
        return head + figure
    room = max(width - len(figure) - 1, 8)
    return head[:room] + "…" + figure


def gate_table(baseline: dict, tablefmt: str = "simple", limit: int | None = 12) -> str:
    """The gate's side-by-side view (the verdict's `baseline` block): per condition, the regressed first (clean
    leading) and then the closest to regressing, baseline beside now, the paired difference, its interval and the
    paired test's p (McNemar for accuracy and flips, the paired bootstrap otherwise)."""
    from .gate_tables import comparison_conditions, comparison_headers, comparison_rows

    table = tabulate(comparison_rows(baseline["rows"], limit), headers=comparison_headers(), tablefmt=tablefmt,
                     disable_numparse=True)
    more = comparison_conditions(baseline["rows"]) - (limit or 0)
    return table + (f"\n... and {more} more regressed, improved or close (every comparison is in the JSON and HTML "
                    "reports)" if limit is not None and more > 0 else "")


def verdict_lines(verdict: dict) -> list[str]:
    """The run's verdict (judge.verdict.run_verdict) as the terminal's last lines: per model the counts and the
    weakest families, the false-discovery-rate line, the gate's summary, and PASSED or FAILED with what decided it
    (INTERRUPTED with how many cases ran, for a run that did not finish; NO VERDICT or PARTIAL for one that judged
    none or too few of its cases)."""
    lines = []
    failed_comparison = ("not shown non-inferior to the baseline"
                         if (verdict.get("baseline") or {}).get("mode") == "non-inferiority"
                         else "regressed against the baseline")
    for m in verdict["models"]:
        n = m["cases"]  # every case, skipped ones too: the counts after it add up to it, as the reports' tables do
        lines.append(f"{m['model']}: {n} case{'s' * (n != 1)}: {m['pass']} pass, "
                     f"{m['fail for sure']} fail for sure, {m['fail within noise']} fail within noise"
                     + (f", {m['error']} {VERDICT_LABELS['error']}" if m.get("error") else "")
                     + (f", {m[NOT_JUDGED]} {NOT_JUDGED}" if m.get(NOT_JUDGED) else "")
                     + (f", {m['skipped']} skipped" if m["skipped"] else "")
                     + (f"; {m['regressed']} {failed_comparison}" if m["regressed"] else ""))
        errors = m.get("errors") or {}
        if errors:
            lines.append(f"  {sum(errors.values())} raised an error instead of a measurement: "
                         + ", ".join(f"{kind} ×{n}" for kind, n in errors.items()))
        if m["weakest_families"]:
            lines.append("  weakest: " + "; ".join(
                f"{w['family']} ({w['condition']}: {w['what'].replace('relative robustness of ', 'rel. ')} "
                f"{_fmt(w['value'])}, limit {_fmt(w['limit'])})" for w in m["weakest_families"][:3]))
    fdr = verdict.get("fdr")
    if fdr:
        lines.append(f"false discovery rate: {fdr['surviving']} of {fdr['failing']} failing cases survive "
                     f"Benjamini-Hochberg at q = {fdr['q']:g} over {fdr['confident']} confident cases"
                     + (f" ({fdr['failing'] - fdr['surviving']} may be chance)" if fdr["surviving"] < fdr["failing"]
                        else ""))
    if verdict.get("unlabelled"):  # what the run can and cannot show, before the word that passes it
        lines.append(f"unlabelled: {verdict['unlabelled']}")
    if verdict.get("baseline"):
        from ..judge.gate import improved_count_clause

        b = verdict["baseline"]  # what improved said beside what regressed (an improvement never passes a run)
        lines.append(f"against the baseline {b['path']}: {b['summary']}{improved_count_clause(b)}")
    if verdict.get("interrupted"):  # never PASSED nor FAILED: the cases that did not run decided nothing
        from ..judge.verdict import cases_ran_text

        return lines + [f"INTERRUPTED: {cases_ran_text(verdict['cases_run'], verdict.get('cases_collected'))}; "
                        "no verdict"]
    if verdict.get("no_verdict"):  # nothing was measured: neither PASSED nor FAILED
        return lines + [f"NO VERDICT: {verdict['no_verdict']}"]
    gate = verdict["gate"]
    n = len(verdict["failing"])
    unarmed = gate == "regressions" and not verdict.get("baseline")
    skipped = verdict.get("skipped")
    failed_gate = (f"{n or 'no'} robustness test{'s' * (n != 1)} failed the gate (--memerobust-gate={gate}"
                   + (", no baseline: nothing could regress)" if unarmed else ")"))
    if verdict.get("partial"):  # failed nothing, but judged too few of its cases to pass: neither PASSED nor FAILED
        return lines + [f"PARTIAL: {verdict['partial']}, too few to pass the run; {failed_gate}"]
    lines.append(f"{'PASSED' if verdict['passed'] else 'FAILED'}: {failed_gate}"
                 # a pass with skipped cases says so: skipped cases never make a run green
                 + (f"; {skipped['text']}" if skipped and verdict["passed"] else ""))
    return lines
