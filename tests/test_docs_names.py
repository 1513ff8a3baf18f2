"""Names the docs give a user to look for on disk are the ones the code writes."""
import re
from pathlib import Path

from pytest_memerobust.run.replay import picture_store

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_docs_name_the_counterexample_pictures_folder_the_code_writes():
    """docs/gate.md said `counterexamples.json.pictures/`; the pictures are in `counterexamples.pictures/`."""
    folder = picture_store(Path("counterexamples.json")).name
    named = re.findall(r"`(counterexamples[\w.]*pictures)/DIGEST\.png`", (DOCS / "gate.md").read_text())
    assert named and set(named) == {folder}


def test_docs_options_names_every_option_pytest_registers():
    """docs/options.md is the options' reference: each --memerobust-* option of option_table.py is in its table."""
    from pytest_memerobust.option_table import _OPTIONS

    table = (DOCS / "options.md").read_text()
    named = set(re.findall(r"`(--memerobust-[a-z-]+)", table))
    registered = {f"--memerobust-{name}" for name, *_ in _OPTIONS}
    assert not registered - named, f"options docs/options.md does not name: {sorted(registered - named)}"
    assert not named - registered, f"docs/options.md names options that do not exist: {sorted(named - registered)}"
