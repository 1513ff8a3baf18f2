"""An augmented training set as a Hugging Face `datasets` set: what `memerobust augment` writes.

Each meme of the data gives N augmented copies. Copy k holds the meme as epoch k of `memerobust train --augment ...
--seed S` sees it: the augmentations are drawn and applied by the training loop's own function
(detectors/training/augmentation.augment_memes), whose draws are keyed by (seed, epoch, meme id, perturbation), so
copy k is epoch k's edit whatever else the data holds. Copy 0 is the clean meme (written unless asked not to).

The set is written with the export writer (track/export.py): one parquet file of datasets' schema with the pictures
as PNG bytes (or an imagefolder), a dataset card, and recipe.json saying how to make it again (the augment specs,
copies, seed, the data spec and its fingerprint, the tool's version). Everything the command can check is checked
before any meme is augmented, and the folder appears only once the set is whole.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ..errors import ConfigError
from .export import (LAYOUTS, ExportError, ImageFolderRows, ParquetRows, Staged, check_out, front_matter,
                     perturbation_info, require_datasets, write_texts)

FORMAT = "pytest-memerobust-augment/1"
RECIPE_FILE = "recipe.json"
CHUNK = 64  # memes augmented at a time: the pictures in memory stay bounded (each meme's draws are its own)

COLUMNS = {
    "image": "the picture as this copy shows it (PNG bytes; only where the data has pictures)",
    "id": "the row: <meme id>#<copy>",
    "meme_id": "the meme's id in the source data",
    "copy": "0: the clean meme; k >= 1: the augmentations as epoch k of `memerobust train --augment` draws them",
    "caption": "the caption as this copy shows it",
    "labels": "the meme's labels, one field per task of the data (a list of the labels on for a multi-label task; "
              "none where the data gives the meme no label for the task)",
    "split": "the meme's split in the source data (none where it names none)",
    "applied": "the augmentations applied to this copy, in order, as name@severity (empty: this copy is the clean "
               "meme)",
    "picture_digest": "the digest the feature store keys this picture by (only where the data has pictures)",
}


def features(dataset, pictures: bool):
    """The set's `datasets.Features`: each task's label a ClassLabel of its class names (a list of them for a
    multi-label task), the picture an Image stored as bytes (no image column for caption-only data)."""
    from datasets import ClassLabel, Features, Image, List, Value

    text = Value("string")
    labels = {task: List(ClassLabel(names=list(names))) if task in dataset.multilabel
              else ClassLabel(names=list(names)) for task, names in dataset.classes.items()}
    columns = {"id": text, "meme_id": text, "copy": Value("int32"), "caption": text, "labels": labels,
               "split": text, "applied": List(text)}
    return Features({"image": Image(), **columns, "picture_digest": text} if pictures else columns)


def label_values(dataset, meme) -> dict:
    """The meme's label of every task of the data: a class index, the indices of the labels on (multi-label), or
    None where it has none."""
    out = {}
    for task in dataset.classes:
        value = meme.labels.get(task)
        if value is not None and task in dataset.multilabel:
            value = [k for k, on in enumerate(value) if on]
        out[task] = None if value is None else (value if isinstance(value, list) else int(value))
    return out


MAX_COPIES = 1000  # copies of each meme: copy k is training's epoch k, and no recipe trains a thousand epochs
DEFAULT_SPLIT = "train"  # what a fine-tuning set is made of, where the data has splits and its spec names none


def with_split(spec: str, split: str) -> str:
    """`spec` with `split` appended where the loader has splits and the spec names none (`demo` -> `demo:train`);
    `all`: the spec as given (the loader's own default: every split of PrideMM, the demo's test split)."""
    from ..data.loaders import LOADER_SPLITS, parse_spec

    if split == "all":
        return spec
    loader, path, named = parse_spec(spec)
    splits = LOADER_SPLITS.get(loader, ())
    if named is not None or not splits or str(path) in splits:  # `demo:val` names its split where a path would go
        return spec
    if split not in splits:
        raise ConfigError(f"--split {split}: {loader} has the splits {', '.join(splits)} (or all)")
    return f"{spec}:{split}"


def check_recipe(copies: int, augment: Sequence[str], layout: str) -> tuple:
    """The recipe parsed, before the data loads: the augmentations (augmentation.parse_augmentations refuses an
    unknown perturbation, a severity it lacks, a probability outside 0..1, a model-aware attack), the copies and
    the layout."""
    from ..detectors.training.augmentation import parse_augmentations

    if isinstance(copies, bool) or not isinstance(copies, int) or not 1 <= copies <= MAX_COPIES:
        raise ConfigError(f"--copies {copies}: give the number of augmented copies of each meme, 1 to {MAX_COPIES} "
                          f"(copy k is what training's epoch k sees)")
    if not augment:
        raise ConfigError("--augment: name at least one augmentation, e.g. --augment typos@1-5:0.5")
    if layout not in LAYOUTS:
        raise ExportError(f"--format {layout!r}: expected one of {', '.join(LAYOUTS)}")
    return parse_augmentations(list(augment))


def check_data(dataset, spec: str, augmentations, layout: str, device) -> bool:
    """Whether the rows get pictures, after the checks that need the data: an augmentation of pictures needs a
    picture for every meme, an imagefolder needs pictures, and each augmentation is tried once on the first meme
    (a missing backend, such as back-translation without its MarianMT models, said now)."""
    from ..detectors.training.augmentation import check_backends, reads_pictures

    if not len(dataset):
        raise ConfigError(f"--data {spec}: no memes to augment")
    lacking = [m.id for m in dataset.memes if not m.has_picture]
    if lacking and reads_pictures(augmentations):
        edits = ", ".join(a.spec for a in augmentations if a.modality == "image")
        raise ConfigError(f"--augment {edits} edits pictures, and {len(lacking)} of the {len(dataset)} memes of "
                          f"{spec} have none (the first: {lacking[0]!r}): augment their captions only, or give the "
                          f"data with its pictures")
    pictures = len(lacking) < len(dataset)
    if layout == "imagefolder" and not pictures:
        raise ExportError(f"--format imagefolder writes each picture as a file, and {spec} has no pictures "
                          f"(caption-only data): use --format parquet")
    first = dataset.memes[0]
    check_backends(augmentations, first.text, first.picture(device) if reads_pictures(augmentations) else None)
    return pictures


def copy_rows(dataset, augmentations, seed: int, copy: int, device) -> Iterator[tuple[dict, object]]:
    """Copy `copy` of every meme, CHUNK memes at a time, in the data's order: (row without the image, the picture
    as H x W x 3 uint8 or None). Copy 0 is the clean meme; copy k the draws of epoch k."""
    from ..data.digests import input_digest
    from ..data.pictures import to_array
    from ..detectors.training.augmentation import augment_memes

    memes = list(dataset.memes)
    for start in range(0, len(memes), CHUNK):
        chunk = memes[start:start + CHUNK]
        if copy == 0:
            captions, shown, applied = [m.text for m in chunk], None, [[] for _ in chunk]
        else:
            captions, shown, applied = augment_memes(chunk, augmentations, seed, copy, device)
        for i, meme in enumerate(chunk):
            picture = shown[i] if shown is not None else meme.picture(device) if meme.has_picture else None
            picture = None if picture is None else to_array(picture)
            row = {"id": f"{meme.id}#{copy}", "meme_id": meme.id, "copy": copy, "caption": captions[i],
                   "labels": label_values(dataset, meme), "split": meme.meta.get("split"), "applied": applied[i],
                   "picture_digest": None if picture is None else input_digest(picture)}
            yield row, picture


def augment_dataset(spec: str, out: Path, augment: Sequence[str], copies: int, *, seed: int = 0,
                    layout: str = "parquet", with_clean: bool = True, device: str = "cpu",
                    allow_outside_paths: bool = False, progress: Callable[[int, int], None] | None = None,
                    split: str = DEFAULT_SPLIT, say: Callable[[str], None] | None = None) -> dict:
    """`memerobust augment`: write `copies` augmented copies of every meme of the data `spec` (and, `with_clean`,
    the clean memes) to the new or empty folder `out`; returns recipe.json's content. Every check comes before the
    first meme is augmented; `progress(rows done, rows in all)` follows the writing. `split`: the split read where
    the spec names none (`with_split`); `say(line)` hears the estimate of rows and bytes before any is written."""
    from ..data.loaders import load_dataset

    augmentations = check_recipe(copies, augment, layout)
    spec = with_split(spec, split)
    require_datasets()
    out = check_out(out)
    dataset = load_dataset(spec, require_images=False, allow_outside_paths=allow_outside_paths)
    pictures = check_data(dataset, spec, augmentations, layout, device)
    fingerprint = dataset.fingerprint()
    schema = features(dataset, pictures)
    numbers = range(0 if with_clean else 1, copies + 1)
    total, done = len(dataset) * len(numbers), 0
    if say is not None:
        say(estimate_line(dataset, spec, total, pictures))
    edited = {a.spec: 0 for a in augmentations}
    with Staged(out) as folder:
        with (ParquetRows if layout == "parquet" else ImageFolderRows)(folder, schema) as writer:
            for copy in numbers:
                for row, picture in copy_rows(dataset, augmentations, seed, copy, device):
                    writer.add(row, picture)
                    for aug in augmentations:
                        edited[aug.spec] += any(a.split("@")[0] == aug.name for a in row["applied"])
                    done += 1
                    if progress is not None:
                        progress(done, total)
        files = writer.files
        info = recipe(spec, dataset, fingerprint, augmentations, copies, seed, with_clean, device, layout,
                      files + ["README.md", RECIPE_FILE], total, edited, pictures)
        write_texts(folder, {"README.md": card(info), RECIPE_FILE: json.dumps(info, indent=2) + "\n"})
    return info


def estimate_line(dataset, spec: str, rows: int, pictures: bool) -> str:
    """`writing 960 rows of demo:train (480 memes), about 12 MB`: said before the first row, from the first meme's
    picture as PNG and the captions' mean length."""
    import io

    from PIL import Image

    from ..data.pictures import to_array

    per_row = 64 + sum(len(m.text.encode("utf-8")) for m in dataset.memes) / max(len(dataset), 1)
    if pictures:
        buffer = io.BytesIO()
        Image.fromarray(to_array(dataset.memes[0].picture("cpu"))).save(buffer, format="PNG")
        per_row += buffer.tell()
    size = rows * per_row
    shown = f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"
    return f"writing {rows:,} rows of {spec} ({len(dataset):,} memes), about {shown}"


def training_command(info: dict) -> str:
    """The `memerobust train` flags whose epoch k sees copy k of the set."""
    flags = " ".join(f"--augment {spec}" for spec in info["augment"])
    return f"memerobust train CARD --train {info['data']['spec']} --val VAL {flags} --seed {info['seed']}"


def recipe(spec, dataset, fingerprint, augmentations, copies, seed, with_clean, device, layout, files, rows,
           edited, pictures) -> dict:
    """recipe.json: how the set was made, enough to make it again, and what each augmentation edited."""
    from .. import __version__

    info = {
        "format": FORMAT, "tool": "pytest-memerobust", "version": __version__, "layout": layout, "files": files,
        "data": {"spec": spec, "name": dataset.name, "memes": len(dataset), "fingerprint": fingerprint,
                 "pictures": pictures, "tasks": {t: list(c) for t, c in dataset.classes.items()},
                 "multilabel": sorted(dataset.multilabel)},
        "augment": [a.spec for a in augmentations], "copies": copies, "seed": seed, "with_clean": with_clean,
        "device": str(device), "rows": rows, "rows_edited": edited,
        "perturbations": {a.name: perturbation_info(a.name) for a in augmentations},
        "columns": {k: v for k, v in COLUMNS.items() if pictures or k not in ("image", "picture_digest")},
    }
    info["training"] = (f"epoch k (1..{copies}) of `{training_command(info)} --epochs {copies}` trains on copy k "
                        f"of each meme: the same draws, keyed by seed, epoch, meme id and perturbation")
    return info


def card(info: dict) -> str:
    """README.md: the dataset card, with the recipe."""
    data = info["data"]
    lines = [
        *front_matter("augmented memes (pytest-memerobust)", info["layout"]), "",
        f"# Augmented memes: {data['spec']}", "",
        f"{info['rows']} rows: {data['memes']} memes x {info['copies']} augmented "
        f"cop{'y' if info['copies'] == 1 else 'ies'}{' + the clean memes (copy 0)' if info['with_clean'] else ''}, "
        f"written by pytest-memerobust {info['version']} with seed {info['seed']}"
        f"{'' if data['pictures'] else ' (caption-only data: no image column)'}.", "",
        "```python", "import datasets", "",
        f'rows = datasets.load_dataset("{info["layout"]}", data_dir="THIS_FOLDER")["train"]', "```", "",
        "## Recipe", "",
        "```", f"memerobust augment --data {data['spec']} "
        + " ".join(f"--augment {s}" for s in info["augment"])
        + f" --copies {info['copies']} --seed {info['seed']}{'' if info['with_clean'] else ' --no-with-clean'}"
        + f" --format {info['layout']}", "```", "",
        f"{info['training'][0].upper()}{info['training'][1:]}.", "",
        "| augmentation | rows it edited |", "|---|---|",
        *(f"| `{spec}` | {n} |" for spec, n in info["rows_edited"].items()), "",
        "## Columns", "", "| column | holds |", "|---|---|",
        *(f"| `{name}` | {text} |" for name, text in info["columns"].items()), "",
        "## Provenance", "",
        f"- data `{data['spec']}` ({data['name']}): {data['memes']} memes, fingerprint `{data['fingerprint']}`",
        *(f"- `{name}` ({p['modality']}, family {p['family']}, code sha `{p['code_sha']}`): {p['description']}"
          for name, p in info["perturbations"].items()), "",
        f"{RECIPE_FILE} holds all of it.", ""]
    return "\n".join(lines)


def summary_line(info: dict, out: Path) -> str:
    """What `memerobust augment` wrote, in one line."""
    clean = " + the clean memes" if info["with_clean"] else ""
    copies = info["data"]["memes"] * info["copies"]
    edited = ", ".join(f"{spec} edited {n} of the {copies}" for spec, n in info["rows_edited"].items())
    load = f"datasets.load_dataset({info['layout']!r}, data_dir={str(out)!r})"
    copied = f"{info['data']['memes']} memes x {info['copies']} cop{'y' if info['copies'] == 1 else 'ies'}{clean}"
    return (f"wrote {info['rows']} rows ({copied}; {edited}) "
            f"to {out} as {info['layout']}: {', '.join(info['files'])}; load it with {load}")
