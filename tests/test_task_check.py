"""Issue 49: a generic csv file's task (`label`) not matching the card's (`hate`) was an error only after OCR had
read every picture, and it did not name the fix. `check_task` tells it from the spec alone, before any picture is
read, naming --memerobust-task=label."""
import pytest

from pytest_memerobust.data import load_dataset
from pytest_memerobust.data.loaders import check_task
from pytest_memerobust.errors import ConfigError


@pytest.mark.parametrize("spec", ["csv:/nowhere/memes.csv:test", "/nowhere/memes.csv", "jsonl:/nowhere/m.jsonl"])
def test_a_generic_file_without_the_cards_task_is_refused_from_its_spec_naming_the_fix(spec):
    """The file need not even be there: nothing is read."""
    with pytest.raises(ConfigError) as refused:
        check_task("hate", spec)
    message = str(refused.value)
    assert f"dataset {spec!r} is a generic" in message and "its one task is 'label'" in message
    assert "the model card's task 'hate'" in message and message.count("--memerobust-task=label") == 1


def test_an_explicit_task_is_named_as_the_option_given():
    with pytest.raises(ConfigError, match=r"not --memerobust-task=hate; pass --memerobust-task=label"):
        check_task("hate", "csv:/nowhere/m.csv", explicit=True)


def test_what_fits_passes_and_what_cannot_be_told_yet_is_left_to_the_loaded_dataset():
    check_task("label", "csv:/nowhere/m.csv:test")  # the generic task
    check_task("hate", "pridemm:/nowhere/PrideMM:test")  # a named loader: its tasks are known once it loads
    check_task("hate", "nosuchloader:/x")  # an unknown loader: loading it names the valid ones
    check_task("hate", "demo", load_dataset("demo").classes)
    with pytest.raises(ConfigError, match=r"has no task 'humour' .*its tasks: 'hate'.*--memerobust-task=TASK"):
        check_task("humour", "demo", load_dataset("demo").classes)


def test_a_loaded_generic_file_is_refused_the_same_way(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("id,image,text,label\na,,one,0\nb,,two,1\n")
    dataset = load_dataset(f"csv:{path}", require_images=False)
    with pytest.raises(ConfigError, match="pass --memerobust-task=label"):
        check_task("hate", f"csv:{path}", dataset.classes)
