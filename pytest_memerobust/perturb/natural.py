"""Natural misspellings: the real-world half of "natural + synthetic" typos (Belinkov & Bisk 2018).

The shipped table (data/misspellings.tsv) maps a correct word to misspellings people type. A user's own corpus
loads with `load_misspellings`, in either of two common layouts: tab-separated lines `correct<TAB>wrong[<TAB>wrong...]`
or Birkbeck-style lists (`$correct` followed by one misspelling per line).
"""
from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..errors import DataError


def parse_misspellings(text: str, source: str) -> dict[str, tuple[str, ...]]:
    table: dict[str, list[str]] = {}
    current = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("$"):
            current = line[1:].strip().lower()
            if not current:
                raise DataError(f"{source}, line {number}: '$' must be followed by the correct word")
            table.setdefault(current, [])
            continue
        fields = [f.strip() for f in line.split("\t") if f.strip()]
        if len(fields) >= 2:
            table.setdefault(fields[0].lower(), []).extend(f for f in fields[1:] if f.lower() != fields[0].lower())
        elif current is not None:
            if fields[0].lower() != current:
                table[current].append(fields[0])
        else:
            raise DataError(f"{source}, line {number}: expected 'correct<TAB>misspelling' or a '$correct' header, "
                            f"got {raw!r}")
    return {word: tuple(dict.fromkeys(wrong)) for word, wrong in table.items() if wrong}


def load_misspellings(path: str | Path) -> dict[str, tuple[str, ...]]:
    """A user's misspelling corpus, validated with errors that name the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read misspelling corpus {path}: {exc}") from None
    table = parse_misspellings(text, str(path))
    if not table:
        raise DataError(f"misspelling corpus {path} holds no (correct, misspelling) pair")
    return table


@lru_cache(maxsize=1)
def shipped_misspellings() -> dict[str, tuple[str, ...]]:
    text = resources.files("pytest_memerobust.perturb").joinpath("data/misspellings.tsv").read_text("utf-8")
    return parse_misspellings(text, "misspellings.tsv")


def with_case_of(model: str, word: str) -> str:
    """`word` capitalised like `model` (all caps, Title, or as is)."""
    if model.isupper() and len(model) > 1:
        return word.upper()
    if model[:1].isupper():
        return word[:1].upper() + word[1:]
    return word
