"""Suite files: declarative TOML that becomes one test per (model, condition).

    [suite]       name, description, task, dataset (a --memerobust-data spec used when none is given), modes,
                  group, captions ("ocr": every condition's captions read off its pictures, end to end),
                  transfer_from (a model or a list: every attack of the suite is also crafted on it and shown to
                  the run's models, `pgd_linf-4+from-memeclip`; the report adds the transfer matrix)
    [thresholds]  defaults for every condition (see Thresholds)
    [text]        perturbation = [severities] | "all" | true (no severities): text-only conditions
    [image]       the same for image-only conditions
    [prompt]      prompt edit = [severities] | true: a prompted detector's instruction reworded
                  (`paraphrase = [1, 2]`, `options_reversed = true`, `system = true`; perturb/prompts.PROMPT_EDITS)
    [grid]        text = ["typos@3", ...], image = ["gaussian_noise@3", ...]: every text x image pair, numbered
                  1.. in the order given, as in the Rainbow Noise tables 5-6; prompt = ["paraphrase@2", ...]: each
                  prompt edit with each text and each image side (`prompt=paraphrase@2+image=jpeg_compression@3`)
    [defence]     text = ["nfkc", "confusables", "zero_width"]: normalisers (detectors/defences.py) in front of the
                  detector; the clean case and every case with a caption side run twice, without and behind the defence
                  (`text=typos@3+defence=nfkc,confusables`, test name `typos-3+defended`), with the caption edits
                  re-chosen against it (adaptive); image-only cases run once, the defence leaves pictures alone;
                  image = ["area_resize"]: picture defences (defences.picture_names) in front of the detector's
                  resize; then the image cases run behind the defence too (`image=image_scaling@3+defence=area_resize`)
    [budgets]     families = ["char_edits", ...] (default: every family the model reads, budgets.py),
                  min_median_budget = { char_edits = 3 }: one more case per model, `budgets`, that searches each
                  harmful meme's smallest evading edit and fails when a family's median budget is below its floor
                  (with decision = "confident": only when the median's whole interval is)
    [[override]]  match = "glob on condition ids", plus threshold keys that replace the defaults there
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..perturb.conditions import Condition
from ..errors import SuiteError, UnknownNameError
from ..perturb import get as get_perturbation
from ..judge.thresholds import Thresholds
from ..tomlfile import read_toml

_TOP_KEYS = {"suite", "thresholds", "text", "image", "prompt", "grid", "defence", "budgets", "override", "export"}
_SUITE_KEYS = {"name", "description", "task", "dataset", "modes", "group", "captions", "transfer_from"}
MODES = ("multimodal", "text", "image")


@dataclass(frozen=True)
class BudgetCheck:
    """A suite's [budgets] table: the edit families searched (empty: every one the model reads) and the floors on
    their median evasion budgets."""

    families: tuple[str, ...] = ()
    min_median_budget: tuple[tuple[str, float], ...] = ()

    def searched(self, reads: tuple[str, ...]) -> list[str]:
        """The families to search for a model reading `reads`: the listed ones, else all it reads, plus any with
        a floor."""
        from ..perturb.budget_edits import FAMILIES

        chosen = list(self.families) or [n for n, f in FAMILIES.items() if f.modality in reads]
        return list(dict.fromkeys([*chosen, *(name for name, _ in self.min_median_budget)]))


@dataclass(frozen=True)
class SuiteSettings:
    """The [suite] table besides the name: what the suite's cases run on and how its models run."""

    description: str = ""
    task: str | None = None
    dataset: str | None = None
    modes: tuple[str, ...] = ()  # fusion modes each model runs in (channel ablation); () = as given
    group: str | None = None  # meta field for per-group robustness (e.g. "target")
    captions: str = "dataset"  # "ocr": captions read off each condition's (perturbed) pictures, end to end
    transfer_from: tuple[str, ...] = ()  # models every attack is also crafted on, for the run's models to face


@dataclass(frozen=True)
class SuiteChecks:
    """What the suite's cases are held to: [thresholds] for every condition, each [[override]] where its glob
    matches the condition's id, and the evasion-budget case's floors ([budgets], if the suite has one)."""

    thresholds: Thresholds
    overrides: tuple[tuple[str, dict], ...] = ()
    budgets: "BudgetCheck | None" = None

    def thresholds_for(self, condition: Condition) -> Thresholds:
        result = self.thresholds
        for pattern, override in self.overrides:
            if fnmatch.fnmatchcase(condition.id, pattern):
                result = result.merged(override)
        return result


@dataclass(frozen=True)
class Grid:
    """The [grid]'s sides as condition ids, in the order given: the rows and columns of its text x image table."""

    text: tuple[str, ...] = ()
    image: tuple[str, ...] = ()


@dataclass(frozen=True)
class Suite:
    """A suite file: its conditions (one case each per model), what they are held to, and how they run."""

    name: str
    path: Path
    conditions: tuple[Condition, ...]
    checks: SuiteChecks
    settings: SuiteSettings = SuiteSettings()
    grid: Grid = Grid()
    defence: str | None = None  # a text defence's id (defences.Defence), whose cases run besides the undefended
    export: dict | None = None  # [export]: out (a folder), counterexamples, format; the run exports its memes there

    def model_specs(self, models) -> list[str]:
        """`memeclip` x modes ("text", "image") -> memeclip:text, memeclip:image; a spec with a mode stays as is."""
        out = []
        for model in models:
            if not self.settings.modes or (":" in model and not model.endswith(".toml")):
                out.append(model)
            else:
                out += [model if mode == "multimodal" else f"{model}:{mode}" for mode in self.settings.modes]
        return list(dict.fromkeys(out))


def _side(modality: str, spec: str, where: str) -> tuple[str, int | None]:
    name, _, severity = spec.partition("@")
    severity, _, parameters = severity.partition(":")  # an attack's parameters: "apgd_ce@4:restarts=5"
    name = f"{name}:{parameters}" if parameters else name
    try:
        sev = int(severity) if severity else None
    except ValueError:
        raise SuiteError(f"{where}: bad entry {spec!r}; expected 'name@severity'") from None
    return _known(modality, name, [sev] if sev is not None else True, where)[0]


def _prompt_edits(name: str, severities, where: str) -> list[tuple[str, int | None]]:
    """(name, severity) pairs of a prompt edit after checking perturb/prompts.PROMPT_EDITS."""
    from ..perturb.prompts import PROMPT_EDITS, check_prompt_edit

    if severities == "all":
        severities = list(PROMPT_EDITS.get(name, ())) or True
    if severities is not True and not (isinstance(severities, list) and severities and all(
            isinstance(s, int) and not isinstance(s, bool) for s in severities)):
        raise SuiteError(f"{where}: {name!r}: expected a non-empty list of severities, \"all\" or true")
    pairs = [(name, None)] if severities is True else [(name, s) for s in severities]
    for pname, sev in pairs:
        try:
            check_prompt_edit(pname, sev)
        except ValueError as exc:
            raise SuiteError(f"{where}: {exc}") from None
    return pairs


def _prompt_side(spec: str, where: str) -> tuple[str, int | None]:
    name, _, severity = spec.partition("@")
    if severity and not severity.isdigit():
        raise SuiteError(f"{where}: bad entry {spec!r}; expected 'name@severity'")
    return _prompt_edits(name, [int(severity)] if severity else True, where)[0]


def _known(modality: str, name: str, severities, where: str) -> list[tuple[str, int | None]]:
    """(name, severity) pairs after checking the registry: the perturbation exists, has this modality and these
    severities."""
    try:
        p = get_perturbation(name)
    except UnknownNameError as exc:
        raise SuiteError(f"{where}: {exc}") from None
    if p.modality != modality:
        raise SuiteError(f"{where}: {name!r} is a {p.modality} perturbation, listed under [{modality}]")
    if severities == "all":
        severities = list(p.parameters.severities) or True
    if severities is True:
        if p.parameters.severities:
            raise SuiteError(f"{where}: {name!r} needs severities; valid: {list(p.parameters.severities)}")
        return [(name, None)]
    if not isinstance(severities, list) or not severities or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in severities
    ):
        raise SuiteError(f"{where}: {name!r}: expected a non-empty list of severities, \"all\" or true")
    bad = [s for s in severities if s not in p.parameters.severities]
    if bad:
        raise SuiteError(f"{where}: {name!r} has no severity {bad}; valid: {list(p.parameters.severities)}")
    return [(name, s) for s in severities]


def _table(data: dict, key: str, where: str) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise SuiteError(f"{where}: [{key}] must be a table, got {type(value).__name__} {value!r}")
    return value


def _strings(grid: dict, key: str, where: str) -> list[str]:
    value = grid.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SuiteError(f"{where}: [grid].{key} must be a list of 'name@severity' strings, got {value!r}")
    return list(dict.fromkeys(value))


def _overrides(data: dict, where: str) -> list[tuple[str, dict]]:
    entries = data.get("override", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise SuiteError(f"{where}: overrides are an array of tables: write [[override]], not [override]")
    out = []
    for i, entry in enumerate(entries, 1):
        entry = dict(entry)
        pattern = entry.pop("match", None)
        if not isinstance(pattern, str):
            raise SuiteError(f"{where}: [[override]] #{i} needs a 'match' glob string, got {pattern!r}")
        Thresholds.from_mapping(entry, f"{where}: [[override]] #{i}")
        out.append((pattern, entry))
    return out


def parse_suite(data: dict, path: Path, root: Path | None = None) -> Suite:
    """The suite in `data` (read from `path`); `root`: the project (pytest's rootdir), where its [export] may write
    besides the suite's own folder."""
    where = str(path)
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise SuiteError(f"{where}: unknown table(s) {sorted(unknown)}; valid: {sorted(_TOP_KEYS)}")
    meta = _table(data, "suite", where)
    if set(meta) - _SUITE_KEYS:
        raise SuiteError(f"{where}: [suite] unknown key(s) {sorted(set(meta) - _SUITE_KEYS)}; "
                         f"valid: {sorted(_SUITE_KEYS)}")
    for key in ("name", "description", "task", "dataset", "group"):
        if key in meta and not (isinstance(meta[key], str) and meta[key].strip()):
            raise SuiteError(f"{where}: [suite].{key} must be a non-empty string, got {meta[key]!r}")
    captions = meta.get("captions", "dataset")
    if captions not in ("dataset", "ocr"):
        raise SuiteError(f"{where}: [suite].captions must be \"dataset\" or \"ocr\" (read off the pictures), "
                         f"got {captions!r}")
    modes = meta.get("modes", [])
    if not isinstance(modes, list) or not all(m in MODES for m in modes):
        raise SuiteError(f"{where}: [suite].modes must be a list drawn from {list(MODES)}, got {modes!r}")
    try:
        thresholds = Thresholds.from_mapping(_table(data, "thresholds", where), f"{where}: [thresholds]")
        overrides = _overrides(data, where)
    except ValueError as exc:
        raise SuiteError(str(exc)) from None

    conditions = [Condition()]
    for modality in ("text", "image"):
        for name, severities in _table(data, modality, where).items():
            for pname, sev in _known(modality, name, severities, f"{where}: [{modality}]"):
                conditions.append(Condition(**{modality: pname, f"{modality}_severity": sev}))
    for name, severities in _table(data, "prompt", where).items():
        for pname, sev in _prompt_edits(name, severities, f"{where}: [prompt]"):
            conditions.append(Condition(prompt=pname, prompt_severity=sev))
    grid = _table(data, "grid", where)
    if set(grid) - {"text", "image", "prompt"}:
        raise SuiteError(f"{where}: [grid] takes only 'text', 'image' and 'prompt' lists")
    grid_text = [_side("text", s, f"{where}: [grid].text") for s in _strings(grid, "text", where)]
    grid_image = [_side("image", s, f"{where}: [grid].image") for s in _strings(grid, "image", where)]
    grid_prompt = [_prompt_side(s, f"{where}: [grid].prompt") for s in _strings(grid, "prompt", where)]
    if not grid_prompt and bool(grid_text) != bool(grid_image):
        raise SuiteError(f"{where}: [grid] needs both a 'text' and an 'image' list")
    for t, ts in grid_text:
        for i, is_ in grid_image:
            conditions.append(Condition(text=t, text_severity=ts, image=i, image_severity=is_))
    for p, ps in grid_prompt:
        conditions += [Condition(text=t, text_severity=ts, prompt=p, prompt_severity=ps) for t, ts in grid_text]
        conditions += [Condition(image=i, image_severity=is_, prompt=p, prompt_severity=ps) for i, is_ in grid_image]
    defence, guards_pictures = _defence(data, where)
    if defence:
        conditions += [replace(c, defence=defence) for c in conditions
                       if c.text or c.kind == "clean" or (guards_pictures and c.image)]
    transfer_from = _transfer_from(meta, where)
    conditions += [replace(c, source=model) for model in transfer_from for c in conditions if _attacks(c)]
    unique = list({c.id: c for c in reversed(conditions)}.values())[::-1]  # first occurrence wins
    return Suite(
        name=meta.get("name", path.stem), path=path, conditions=tuple(unique),
        checks=SuiteChecks(thresholds, tuple(overrides), _budgets(data, where)),
        settings=SuiteSettings(description=meta.get("description", ""), task=meta.get("task"),
                               dataset=meta.get("dataset"), modes=tuple(modes), group=meta.get("group"),
                               captions=captions, transfer_from=transfer_from),
        grid=Grid(tuple(Condition(text=t, text_severity=s).id for t, s in grid_text),
                  tuple(Condition(image=i, image_severity=s).id for i, s in grid_image)),
        defence=defence, export=_export(data, path, root),
    )


def _transfer_from(meta: dict, where: str) -> tuple[str, ...]:
    """[suite].transfer_from: a model name (card or path) or a list of them, on which each attack of the suite is
    crafted once more, the attacked memes then shown to the run's models (`pgd_linf-4+from-memeclip`)."""
    value = meta.get("transfer_from", [])
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not all(isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9_.:\-]+", v)
                                              for v in value):
        raise SuiteError(f"{where}: [suite].transfer_from must be a model name or a list of them (letters, digits, "
                         f"_ . : -), got {value!r}")
    return tuple(dict.fromkeys(value))


def _attacks(condition: Condition) -> bool:
    """Whether a side of `condition` is crafted against a detector (an attack): what transfer carries over."""
    return any(name and get_perturbation(name).needs_model for name in (condition.text, condition.image))


def _budgets(data: dict, where: str) -> BudgetCheck | None:
    """The [budgets] table, its families checked against budgets.FAMILIES; None without one."""
    from ..perturb.budget_edits import FAMILIES

    if "budgets" not in data:
        return None
    table = _table(data, "budgets", where)
    if set(table) - {"families", "min_median_budget"}:
        raise SuiteError(f"{where}: [budgets] takes 'families' and 'min_median_budget', got {sorted(table)}")
    families = table.get("families", [])
    if not isinstance(families, list) or not all(isinstance(f, str) for f in families):
        raise SuiteError(f"{where}: [budgets].families must be a list of family names, got {families!r}")
    floors = table.get("min_median_budget", {})
    if not isinstance(floors, dict):
        raise SuiteError(f"{where}: [budgets].min_median_budget must be a table of family = budget, got {floors!r}")
    for name in [*families, *floors]:
        if name not in FAMILIES:
            raise SuiteError(f"{where}: [budgets]: unknown edit family {name!r}; valid: {sorted(FAMILIES)}")
    for name, value in floors.items():
        last = FAMILIES[name].levels[-1]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= last:
            raise SuiteError(f"{where}: [budgets].min_median_budget.{name}: expected a number in (0, {last}] (the "
                             f"family's last level: a median past it is not measured), got {value!r}")
    return BudgetCheck(tuple(dict.fromkeys(families)), tuple(floors.items()))


def _export(data: dict, path: Path, root: Path | None = None) -> dict | None:
    """The [export] table: where the run writes this suite's perturbed memes as a dataset (track/export.py), a folder
    relative to the suite file, new, empty or an earlier export (which it replaces); checked here, before any case,
    with the `datasets` extra it needs. The folder stays inside the suite's folder or the project (`root`): a suite
    file, shared or downloaded, cannot make a run write, or replace an earlier export, anywhere on disk."""
    from ..track.export import LAYOUTS, ExportError, check_out, require_datasets

    if "export" not in data:
        return None
    where = str(path)
    table = _table(data, "export", where)
    if set(table) - {"out", "counterexamples", "format"}:
        raise SuiteError(f"{where}: [export] takes 'out' (a folder), 'counterexamples' (true: only the memes that "
                         f"flipped) and 'format' ({' or '.join(LAYOUTS)}), got {sorted(table)}")
    out = table.get("out")
    if not (isinstance(out, str) and out.strip()):
        raise SuiteError(f"{where}: [export].out must name a folder, e.g. \"exports/typos\", got {out!r}")
    counterexamples, layout = table.get("counterexamples", False), table.get("format", "parquet")
    if not isinstance(counterexamples, bool):
        raise SuiteError(f"{where}: [export].counterexamples must be true or false, got {counterexamples!r}")
    if layout not in LAYOUTS:
        raise SuiteError(f"{where}: [export].format must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    folder = (path.parent / out).resolve()
    bases = [path.parent.resolve(), *([Path(root).resolve()] if root is not None else [])]
    if Path(out).is_absolute() or not any(folder == base or base in folder.parents for base in bases):
        raise SuiteError(f"{where}: [export].out = {out!r} leads outside the suite's folder"
                         f"{' and the project' if root is not None else ''}: name a folder relative to the suite "
                         "file, inside " + " or ".join(map(str, bases)))
    try:
        require_datasets()
        check_out(folder, f"{where}: [export].out ", replace=True)
    except ExportError as exc:
        raise SuiteError(str(exc)) from None
    return {"out": str(folder), "counterexamples": counterexamples, "format": layout}


def _defence(data: dict, where: str) -> tuple[str | None, bool]:
    """(the id of the [defence] table's defence: its text normalisers, then its picture defences, each checked
    against its registry; or None), and whether it guards pictures."""
    from ..detectors.defences import Defence, names as text_names, picture_names

    table = _table(data, "defence", where)
    if not table:
        return None, False
    if set(table) - {"text", "image"}:
        raise SuiteError(f"{where}: [defence] takes only 'text' (a list of normaliser names) and 'image' (a list of "
                         f"picture defences), got {sorted(table)}")
    chosen = []
    for side, known, example in (("text", text_names(), '["nfkc", "confusables"]'),
                                 ("image", picture_names(), '["area_resize"]')):
        if side not in table:
            continue
        names = table[side]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
            raise SuiteError(f"{where}: [defence].{side} must be a non-empty list of names, e.g. {example}, got "
                             f"{names!r}")
        for name in names:
            if name.strip() not in known:
                raise SuiteError(f"{where}: [defence].{side}: unknown {side} defence {name!r}; known: "
                                 f"{', '.join(known)}")
        chosen += names
    return Defence.parse(chosen).id, "image" in table


def load_suite(path: Path, root: Path | None = None) -> Suite:
    """The suite file at `path`; `root`: the project, where its [export] may write besides the suite's folder."""
    path = Path(path)
    data = read_toml(path, "suite", SuiteError)
    return parse_suite(data, path, root)


SUITE_FILE_PATTERN = "memerobust-*.toml"


def builtin_suite_dir() -> Path:
    from importlib import resources

    return Path(str(resources.files("pytest_memerobust.suites")))


def builtin_suite_paths() -> list[Path]:
    """The shipped suites: TOML suites and Python suites (test_*.py, which use the plugin's fixtures)."""
    folder = builtin_suite_dir()
    return sorted([*folder.glob("*.toml"), *folder.glob("test_*.py")])


def builtin_suite_arg(arg: str) -> str:
    """A pasted node id of a built-in suite (`rainbow-noise::demo::typos-1`, `rainbow-noise.toml::...` or
    `test_caption_fuzz.py::...`) with its file part made the suite's real path, so it re-runs from any directory;
    any other argument as it is."""
    head, sep, rest = arg.partition("::")
    if not head or Path(head).exists():
        return arg
    for path in builtin_suite_paths():
        if head in (path.name, path.stem) and (path.suffix == ".toml" or head == path.name):
            return str(path) + sep + rest
    return arg


def builtin_suite_model_hint(arg: str) -> str | None:
    """For a run without --memerobust-model: what to say about an argument that is a built-in suite's node id (which
    pytest would otherwise report as a file not found), naming the model the id names; None for any other."""
    if builtin_suite_arg(arg) == arg:
        return None
    head, _, rest = arg.partition("::")
    model = rest.split("::")[0] if rest and not head.endswith(".py") else ""
    how = (f"pytest --memerobust-model={model} {arg!r}" if model else
           f"pytest --memerobust-model=NAME {arg!r} (NAME: a model card, e.g. demo)")
    return (f"{arg!r} is a case of the built-in suite {head!r}: built-in suite ids need --memerobust-model=NAME; "
            f"run {how}")


_SKIP_DIRS = {"node_modules", "site-packages", "__pycache__", "venv", "build", "dist"}


def find_suite_files(roots) -> list[Path]:
    """The user's `memerobust-*.toml` suites under `roots` (files or folders), skipping hidden folders,
    virtual environments and build output: what a run with a model and no paths collects besides the built-in
    suites."""
    import os

    found = []
    for root in map(Path, roots):
        if root.is_file():
            found += [root] if fnmatch.fnmatch(root.name, SUITE_FILE_PATTERN) else []
            continue
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS
                             and not (Path(folder) / d / "pyvenv.cfg").exists())
            found += [Path(folder) / f for f in sorted(files) if fnmatch.fnmatch(f, SUITE_FILE_PATTERN)]
    return list(dict.fromkeys(found))


def is_suite_file(path: Path) -> bool:
    """A user's `memerobust-*.toml` anywhere in the test tree, or any TOML among the built-in suites."""
    path = Path(path)
    if path.suffix != ".toml":
        return False
    return fnmatch.fnmatch(path.name, SUITE_FILE_PATTERN) or path.resolve().parent == builtin_suite_dir().resolve()
