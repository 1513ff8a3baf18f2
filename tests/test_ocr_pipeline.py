"""The OCR path as one pipeline (issue 49): a caption-only detector behind OCR reads every picture edit through the
OCR, the caption re-typed into the picture is read back rather than refused, and universal attacks fit, through the
same reading of memes as the run, on memes they are never judged on, keyed by those memes."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from pytest_memerobust.data.fit_memes import FitMemes
from pytest_memerobust.data.meme import Meme
from pytest_memerobust.engine import Condition, Engine, Readers
from pytest_memerobust.errors import DataError
from pytest_memerobust.run.accounting import run_notes
from pytest_memerobust.run.options import ComputeOptions, DataOptions, Options, training_spec
from pytest_memerobust.run.session import RobustnessSession

from test_engine import CountingSplit
from test_ocr import FakeOcr, _dataset


class CaptionOnly(CountingSplit):
    """A split detector that reads captions only (as the MiniLM card)."""

    modalities = ("text",)

    def head(self, image_features, text_features):
        assert image_features.shape[1] == 0  # it is handed no picture features
        return super().head(np.full((len(text_features), 1), 0.5), text_features)


def test_a_caption_only_detector_behind_ocr_reads_picture_edits_through_the_ocr():
    data = _dataset(["one", "two", "three", "four"], [250, 120, 40, 70])
    detector = CaptionOnly()
    engine = Engine(detector, data, readers=Readers(ocr=FakeOcr()))
    clean = engine.predict(Condition())
    darker = Condition(image="brightness", image_severity=5)
    brighter = engine.predict(darker)
    assert detector.image_batches == []  # it never encodes a picture itself
    read = engine.inputs(*engine.text_side(darker))
    assert read != engine.inputs(*engine.text_side(Condition()))
    assert set(read) <= {t for batch in detector.text_batches for t in batch}  # what OCR read is what it scored
    assert not np.allclose(clean, brighter)
    without_ocr = Engine(CaptionOnly(), data)
    with pytest.raises(ValueError, match="does not read"):
        without_ocr.predict(darker)


def test_typos_drawn_into_the_picture_are_read_back_by_ocr_not_typed_twice():
    data = _dataset(["one", "two", "three", "four"], [250, 120, 40, 70])
    engine = Engine(CaptionOnly(), data, readers=Readers(ocr=FakeOcr()))
    case = Condition(text="typos", text_severity=1, image="rendered_caption")
    assert engine.text_side(case) == ("text", None, None, "ocr", "rendered_caption", None, "typos", 1)
    engine.predict(case)  # refused before: "the two cannot be combined"
    pictures = engine.inputs(*engine.image_side(case))
    assert engine.inputs(*engine.text_side(case)) == [FakeOcr().read(p) for p in pictures]


def _options(workers: int | None = None, **data) -> Options:
    """Options of a demo run: `data` the DataOptions' fields."""
    return Options(models=("demo",), data=DataOptions(**data), compute=ComputeOptions(workers=workers))


def test_caption_only_cases_under_ocr_skip_only_what_cannot_reach_the_detector(monkeypatch):
    session = RobustnessSession(_options())
    monkeypatch.setattr(session, "detector", lambda model: CaptionOnly())
    scribble = Condition(image="scribble", image_severity=1)
    assert session.unread_modalities("demo", scribble) == ["image"]  # no OCR: it really does not read the picture
    assert session.unread_modalities("demo", scribble, captions="ocr") == []
    rendered = Condition(text="typos", text_severity=1, image="rendered_caption")
    assert session.unread_modalities("demo", rendered, captions="ocr") == []
    attacked = session.unread_modalities("demo", Condition(image="uap", image_severity=1), captions="ocr")
    assert len(attacked) == 1 and "'uap' attacks the detector's view of the picture" in attacked[0]
    joint = session.unread_modalities("demo", Condition(image="co_attack", image_severity=1), captions="ocr")
    assert len(joint) == 1 and "read off the picture by OCR" in joint[0]


def test_training_spec_finds_the_train_rows_of_a_generic_file_and_never_the_evaluated_split():
    assert training_spec("demo") == "demo:train"
    assert training_spec("pridemm:/x:test") == "pridemm:/x:train"
    assert training_spec("csv:/x.csv:test") == "csv:/x.csv:train"
    assert training_spec("csv:/x.csv") is None
    assert training_spec("demo:train") is None and training_spec("csv:/x.csv:train") is None


def _csv(path: Path, n: int, split: bool = False, empty: tuple = (), pictures: bool = False) -> Path:
    from PIL import Image

    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text", "label"] + (["split"] if split else []) + (["image"] if pictures else []))
        for i in range(n):
            row = [f"m{i}", "" if i in empty else f"caption number {i}", i % 2]
            row += ["train" if i >= n // 2 else "test"] if split else []
            if pictures:
                Image.new("RGB", (16, 16), (9 * i, 80, 160)).save(path.parent / f"m{i}.png")
                row.append(f"m{i}.png")
            writer.writerow(row)
    return path


def _ids(fit: FitMemes) -> set[str]:
    return {m.id for m in fit.memes}


def test_universal_attacks_fit_outside_the_evaluated_memes(tmp_path, monkeypatch):
    monkeypatch.setattr(RobustnessSession, "reads_pictures", lambda self: False)  # caption-only data
    flat = _csv(tmp_path / "flat.csv", 24)
    session = RobustnessSession(_options(limit=8))
    evaluated = {m.id for m in session.dataset(f"csv:{flat}").memes}
    fit = session.training_memes(f"csv:{flat}", "label")
    assert len(evaluated) == 8 and len(fit) == 16 and not evaluated & _ids(fit)  # before: all 24, evaluated included
    assert "fitted on the 16 memes of" in fit.note("x") and "outside the 8 evaluated" in fit.note("x")
    with pytest.raises(DataError, match="no memes to fit universal attacks on outside the 24 evaluated"):
        RobustnessSession(_options()).training_memes(f"csv:{flat}", "label")

    split = _csv(tmp_path / "split.csv", 24, split=True)
    session = RobustnessSession(_options())
    fit = session.training_memes(f"csv:{split}:test", "label")
    assert fit.source == f"the train split csv:{split}:train" and len(fit) == 12
    assert not {m.id for m in session.dataset(f"csv:{split}:test").memes} & _ids(fit)


def test_fit_memes_are_read_as_the_run_reads_memes_ocr_included(monkeypatch):
    """Before: the fit memes were loaded again without OCR, and a missing caption stopped the trigger
    ("empty caption in column 'text' ... --memerobust-ocr=rapidocr", with that option given)."""
    from pytest_memerobust.data import reading

    data = _dataset(["one", "", "three", "", "five", ""], [250, 120, 40, 70, 200, 90])
    monkeypatch.setattr(reading, "load_dataset", lambda spec, **options: data)
    session = RobustnessSession(_options(limit=2, ocr="rapidocr"))
    session.loaded.ocr = FakeOcr()
    fit = session.training_memes("csv:/memes.csv", "hate")
    assert [m.id for m in fit.memes] == ["m2", "m3", "m4", "m5"]
    assert [m.text for m in fit.memes] == ["three", "bright bright meme caption", "five",
                                           "bright bright meme caption"]
    assert [m.meta.get("caption_source") for m in fit.memes] == [None, "fake", None, "fake"]


def test_the_fit_s_memes_are_part_of_its_key():
    one = FitMemes("a", (Meme("m0", "x", {"hate": 0}), Meme("m1", "y", {"hate": 1})), "hate")
    other = FitMemes("b", (Meme("m0", "x", {"hate": 0}), Meme("m2", "z", {"hate": 1})), "hate")
    assert one.digest != other.digest and one.digest == FitMemes("c", one.memes, "hate").digest
    captions, labels, memes = one
    assert captions == ["x", "y"] and labels.tolist() == [0, 1] and len(memes) == 2


def test_a_trigger_fitted_on_one_dataset_is_never_reused_for_another(tmp_path, monkeypatch):
    from pytest_memerobust.perturb import attacks

    fits = []
    monkeypatch.setattr(attacks, "find_trigger", lambda context, length, seed: fits.append(context) or "alpha beta")
    one = FitMemes("a", (Meme("m0", "x", {"hate": 1}),), "hate")
    other = FitMemes("b", (Meme("q0", "x", {"hate": 1}),), "hate")

    def context(fit):
        return attacks.AttackContext(CountingSplit(), np.array([1]), training=lambda: fit, cache_dir=tmp_path)

    assert attacks.trigger_for(context(one), 2, 0) == "alpha beta"
    assert attacks.trigger_for(context(one), 2, 0) == "alpha beta" and len(fits) == 1  # from the cache folder
    attacks.trigger_for(context(other), 2, 0)
    assert len(fits) == 2  # before: the first dataset's trigger, read back from the cache
    files = sorted((tmp_path / "triggers").iterdir())
    assert len(files) == 2 and {json.loads(f.read_text())["fit_memes"] for f in files} == {
        one.digest[:16], other.digest[:16]}


def test_a_task_the_data_lacks_is_refused_before_ocr_reads_a_picture(tmp_path):
    """Before: OCR read every picture (34 s on 300 memes), then 'has no task', without the fix."""
    from PIL import Image

    from pytest_memerobust.errors import ConfigError

    with (tmp_path / "memes.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "image", "text", "label"])
        for i in range(4):
            Image.new("RGB", (16, 16), (40 * i, 90, 200)).save(tmp_path / f"m{i}.png")
            writer.writerow([f"m{i}", f"m{i}.png", "", i % 2])
    session = RobustnessSession(_options(ocr="rapidocr"))
    session.loaded.ocr = FakeOcr()
    with pytest.raises(ConfigError, match=r"its one task is 'label'.*pass --memerobust-task=label"):
        session.check_case("demo", data=f"csv:{tmp_path / 'memes.csv'}")
    assert session.loaded.ocr.calls == 0
    session = RobustnessSession(_options(ocr="rapidocr", task="label"))
    session.loaded.ocr = FakeOcr()
    session.check_case("demo", data=f"csv:{tmp_path / 'memes.csv'}")
    assert session.loaded.ocr.calls == 4  # the fix named works, and reads the captions


def test_train_reads_the_captions_memes_lack_with_ocr_as_the_run_does(tmp_path, monkeypatch, capsys):
    """Before: `memerobust train` loaded memes its own way, and a meme without a caption stopped it."""
    from PIL import Image

    from pytest_memerobust import cli
    from pytest_memerobust.cli import train as train_command
    from test_caption_only import write_card

    with (tmp_path / "memes.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "image", "text", "label", "split"])
        for i in range(24):
            Image.new("RGB", (16, 16), (10 * i, 90, 200)).save(tmp_path / f"m{i}.png")
            writer.writerow([f"m{i}", f"m{i}.png", "" if i % 4 == 0 else f"caption {i}", i % 2,
                             "val" if i >= 16 else "train"])
    card, out = write_card(tmp_path), tmp_path / "m.safetensors"
    argv = ["train", str(card), "--no-cache", "--data", f"csv:{tmp_path / 'memes.csv'}", "--out", str(out),
            "--epochs", "1", "--quiet"]
    assert cli.main(argv) != 0
    err = capsys.readouterr().err
    assert "4 memes of" in err and "--ocr rapidocr" in err  # the train split's 4 without a caption, and the fix
    readers = []
    monkeypatch.setattr(train_command, "ocr_reader",
                        lambda args: readers.append(FakeOcr()) or readers[-1] if args.ocr else None)
    assert cli.main(argv + ["--ocr", "rapidocr"]) == 0 and out.is_file()
    assert readers[0].calls == 6  # the 6 memes without a caption, train and val


def test_a_universal_case_with_nothing_to_fit_on_skips_naming_the_fixes(tmp_path, monkeypatch):
    monkeypatch.setattr(RobustnessSession, "reads_pictures", lambda self: False)  # caption-only data
    flat = _csv(tmp_path / "flat.csv", 12)
    session = RobustnessSession(_options(spec=f"csv:{flat}"))
    trigger = Condition(text="universal_trigger", text_severity=1)
    why = session.unfittable("demo", trigger, task="label")
    assert "no memes to fit universal attacks on outside the 12 evaluated" in why and "--memerobust-limit" in why
    assert session.unfittable("demo", Condition(text="typos", text_severity=1), task="label") is None
    assert RobustnessSession(_options(spec=f"csv:{flat}", limit=6)).unfittable("demo", trigger, task="label") is None


def test_a_run_that_re_rendered_captions_names_the_fonts_it_drew_them_in():
    session = RobustnessSession(_options(limit=4))
    session.evaluate("demo", "image=rendered_clean_caption")
    assert any(n.startswith("re-rendered captions: bold captions in ") for n in run_notes(session))
    assert not any("re-rendered" in n for n in run_notes(RobustnessSession(_options())))


def test_a_caption_ocr_read_as_nothing_stays_empty_under_a_caption_attack():
    """Before: 'caption is empty (or only whitespace): nothing to perturb' failed the whole case (hotflip@3 +
    imagenet_c@3 under --memerobust-captions=ocr, where the corrupted picture read as nothing)."""
    from pytest_memerobust.perturb import attacks, get

    texts = ["they should not exist", "", "go back to the closet", "   "]
    features = np.full((4, 3), 0.5)
    context = attacks.AttackContext(CountingSplit(), np.array([1, 1, 0, 1]), attacks.CleanInputs(features))
    out = get("hotflip").apply(texts, ["a", "b", "c", "d"], 3, 0, context)
    assert out[1] == "" and out[3] == "   "
    alone = get("hotflip").apply([texts[0]], ["a"], 3, 0, context)
    assert out[0] == alone[0]  # the others attacked as they are alone (rows keep indexing their labels)


def test_the_report_names_the_memes_a_universal_attack_was_fitted_on(monkeypatch):
    from pytest_memerobust.perturb import attacks
    from pytest_memerobust.run.report import build_report
    from pytest_memerobust.report.outline import run_details

    monkeypatch.setattr(attacks, "find_trigger", lambda context, length, seed: "alpha")
    session = RobustnessSession(_options(limit=8))
    session.evaluate("demo", "text=universal_trigger@1")
    assert any(n.startswith("demo: universal attacks (triggers, patterns) fitted on the train split demo:train: 480 "
                            "memes") for n in run_notes(session))
    fits = build_report(session)["datasets"]["demo"]["fit_memes"]
    assert [(f["task"], f["source"], f["n"]) for f in fits] == [("hate", "the train split demo:train", 480)]
    assert not set(fits[0]["ids"]) & {m.id for m in session.dataset("demo").memes}
    table = {title: rows for title, rows, _ in run_details(build_report(session))}
    rows = table["memes the universal attacks were fitted on (none of them evaluated)"]
    assert rows[0][:3] == ["demo", "the train split demo:train", "480"] and "(475 more)" in rows[0][3]
    plain = RobustnessSession(_options(limit=8))
    plain.evaluate("demo", "text=typos@1")
    assert "fit_memes" not in build_report(plain)["datasets"]["demo"]


def test_a_counterexample_says_its_caption_was_read_by_ocr(monkeypatch):
    from pytest_memerobust.run import replay

    session = RobustnessSession(_options(limit=4, captions="ocr"))
    session.loaded.ocr = FakeOcr()
    result = session.evaluate("demo", "image=brightness@5")
    monkeypatch.setattr(replay, "worst_flips", lambda result, limit=5: [0, 1])
    entries = replay.counterexamples(result, session.engine("demo", session.data_spec(None)))
    assert [e["caption_source"] for e in entries] == ["fake", "fake"]
    assert entries[0]["caption"] == FakeOcr().read(session.engine("demo", session.data_spec(None)).picture(
        result.condition, 0))
    plain = RobustnessSession(_options(limit=4))
    result = plain.evaluate("demo", "text=typos@1")
    assert {e["caption_source"] for e in replay.counterexamples(result, plain.engine("demo", "demo"))} == {"dataset"}


def test_the_trigger_search_itself_never_sees_an_evaluated_meme(tmp_path, monkeypatch):
    from pytest_memerobust.perturb import attacks

    seen = []

    def search(context, length, seed):
        captions, labels, memes = context.training()
        seen.extend(m.id for m in memes)
        return "alpha"

    monkeypatch.setattr(attacks, "find_trigger", search)
    flat = _csv(tmp_path / "flat.csv", 24, pictures=True)
    session = RobustnessSession(_options(spec=f"csv:{flat}", limit=8, task="label", workers=1))
    session.evaluate("demo", "text=universal_trigger@1")
    evaluated = {m.id for m in session.dataset(f"csv:{flat}").memes}
    assert len(seen) == 16 and not evaluated & set(seen)  # before: all 24, the 8 evaluated among them
