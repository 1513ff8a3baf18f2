"""Suite files: declarative TOML that becomes one test per (model, condition).

    [suite]       name, description, task, dataset (a --memerobust-data spec used when none is given)
    [thresholds]  defaults for every condition (see Thresholds)
    [text]        perturbation = [severities] | "all" | true (no severities): text-only conditions
    [image]       the same for image-only conditions
    [grid]        text = ["typos@3", ...], image = ["gaussian_noise@3", ...]: every text x image pair, numbered
                  1.. in the order given, as in the Rainbow Noise tables 5-6
    [[override]]  match = "glob on condition ids", plus threshold keys that replace the defaults there
"""
from __future__ import annotations

import fnmatch
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .engine import Condition
from .errors import SuiteError, UnknownNameError
from .perturb import get as get_perturbation
from .thresholds import Thresholds

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_TOP_KEYS = {"suite", "thresholds", "text", "image", "grid", "override"}
_SUITE_KEYS = {"name", "description", "task", "dataset"}


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    conditions: tuple[Condition, ...]
    thresholds: Thresholds
    overrides: tuple[tuple[str, dict], ...] = ()
    grid_text: tuple[str, ...] = ()
    grid_image: tuple[str, ...] = ()
    description: str = ""
    task: str | None = None
    dataset: str | None = None

    def thresholds_for(self, condition: Condition) -> Thresholds:
        result = self.thresholds
        for pattern, override in self.overrides:
            if fnmatch.fnmatchcase(condition.id, pattern):
                result = result.merged(override)
        return result


def _side(modality: str, spec: str, where: str) -> tuple[str, int | None]:
    name, _, severity = spec.partition("@")
    try:
        sev = int(severity) if severity else None
    except ValueError:
        raise SuiteError(f"{where}: bad entry {spec!r}; expected 'name@severity'") from None
    return _known(modality, name, [sev] if sev is not None else True, where)[0]


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
        severities = list(p.severities) or True
    if severities is True:
        if p.severities:
            raise SuiteError(f"{where}: {name!r} needs severities; valid: {list(p.severities)}")
        return [(name, None)]
    if not isinstance(severities, list) or not severities or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in severities
    ):
        raise SuiteError(f"{where}: {name!r}: expected a non-empty list of severities, \"all\" or true")
    bad = [s for s in severities if s not in p.severities]
    if bad:
        raise SuiteError(f"{where}: {name!r} has no severity {bad}; valid: {list(p.severities)}")
    return [(name, s) for s in severities]


def parse_suite(data: dict, path: Path) -> Suite:
    where = str(path)
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise SuiteError(f"{where}: unknown table(s) {sorted(unknown)}; valid: {sorted(_TOP_KEYS)}")
    meta = data.get("suite", {})
    if set(meta) - _SUITE_KEYS:
        raise SuiteError(f"{where}: [suite] unknown key(s) {sorted(set(meta) - _SUITE_KEYS)}; valid: {sorted(_SUITE_KEYS)}")
    try:
        thresholds = Thresholds.from_mapping(data.get("thresholds", {}), f"{where}: [thresholds]")
        overrides = []
        for i, entry in enumerate(data.get("override", [])):
            entry = dict(entry)
            if "match" not in entry:
                raise SuiteError(f"{where}: [[override]] #{i + 1} needs a 'match' glob")
            pattern = entry.pop("match")
            Thresholds.from_mapping(entry, f"{where}: [[override]] #{i + 1}")
            overrides.append((pattern, entry))
    except ValueError as exc:
        raise SuiteError(str(exc)) from None

    conditions = [Condition()]
    for modality in ("text", "image"):
        for name, severities in data.get(modality, {}).items():
            for pname, sev in _known(modality, name, severities, f"{where}: [{modality}]"):
                conditions.append(Condition(**{modality: pname, f"{modality}_severity": sev}))
    grid = data.get("grid", {})
    if set(grid) - {"text", "image"}:
        raise SuiteError(f"{where}: [grid] takes only 'text' and 'image' lists")
    if bool(grid.get("text")) != bool(grid.get("image")):
        raise SuiteError(f"{where}: [grid] needs both a 'text' and an 'image' list")
    grid_text = [_side("text", s, f"{where}: [grid].text") for s in grid.get("text", [])]
    grid_image = [_side("image", s, f"{where}: [grid].image") for s in grid.get("image", [])]
    for t, ts in grid_text:
        for i, is_ in grid_image:
            conditions.append(Condition(text=t, text_severity=ts, image=i, image_severity=is_))
    seen, unique = set(), []
    for c in conditions:
        if c.id not in seen:
            seen.add(c.id)
            unique.append(c)
    return Suite(
        name=meta.get("name", path.stem), path=path, conditions=tuple(unique), thresholds=thresholds,
        overrides=tuple(overrides),
        grid_text=tuple(Condition(text=t, text_severity=s).id for t, s in grid_text),
        grid_image=tuple(Condition(image=i, image_severity=s).id for i, s in grid_image),
        description=meta.get("description", ""), task=meta.get("task"), dataset=meta.get("dataset"),
    )


def load_suite(path: Path) -> Suite:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SuiteError(f"cannot read suite {path}: {exc}") from None
    return parse_suite(data, path)


SUITE_FILE_PATTERN = "memerobust-*.toml"


def builtin_suite_dir() -> Path:
    from importlib import resources

    return Path(str(resources.files("pytest_memerobust.suites")))


def builtin_suite_paths() -> list[Path]:
    return sorted(builtin_suite_dir().glob("*.toml"))


def is_suite_file(path: Path) -> bool:
    """A user's `memerobust-*.toml` anywhere in the test tree, or any TOML among the built-in suites."""
    path = Path(path)
    if path.suffix != ".toml":
        return False
    return fnmatch.fnmatch(path.name, SUITE_FILE_PATTERN) or path.resolve().parent == builtin_suite_dir().resolve()
