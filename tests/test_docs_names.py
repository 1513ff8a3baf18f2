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
