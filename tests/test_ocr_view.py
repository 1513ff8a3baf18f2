"""The OCR-robustness view: how much of the caption OCR still reads off each image condition's pictures, next to
the detector's drop, in the tables and the HTML report."""
import math

import numpy as np
import pytest

from pytest_memerobust.judge.ocr_view import character_error_rate, ocr_view_rows, reading_scores, word_recall


def test_character_error_rate_counts_edits_over_the_reference_ignoring_case_and_spacing():
    assert character_error_rate("NOBODY  wants", "nobody wants") == 0
    assert character_error_rate("n0body wants", "nobody wants") == pytest.approx(1 / 12)
    assert character_error_rate("", "nobody") == 1
    assert math.isnan(character_error_rate("anything", "  "))


def test_word_recall_keeps_added_text_apart_from_lost_text():
    assert word_recall("just a joke NOBODY WANTS THEM", "nobody wants them") == 1  # counter-text added
    assert word_recall("nobody", "nobody wants them") == pytest.approx(1 / 3)  # words lost
    assert word_recall("them them", "them them them") == pytest.approx(2 / 3)  # repeats count


def test_reading_scores_skip_memes_whose_clean_picture_reads_as_nothing():
    clean = ["nobody wants them", "", "love is love"]
    read = ["nobody wants them", "stray marks", ""]
    scores = reading_scores(clean, read, n_resamples=200)
    assert scores["memes"] == 2
    assert scores["cer"] == pytest.approx(0.5)  # 0 and 1 (nothing read)
    assert scores["unread"] == pytest.approx(0.5) and scores["words_kept"] == pytest.approx(0.5)
    low, high = scores["cer_ci"]
    assert 0 <= low <= scores["cer"] <= high <= 1
    assert reading_scores(["", ""], ["a", "b"])["memes"] == 0
    with pytest.raises(ValueError, match="2 clean readings but 1"):
        reading_scores(["a", "b"], ["a"])


def test_rows_pair_each_image_condition_with_the_detector_drop():
    results = [{"condition": "image=contrast@5", "metrics": {"accuracy": 0.7}, "clean_metrics": {"accuracy": 0.9},
                "flip_rate": 0.25},
               {"condition": "text=typos@1", "metrics": {"accuracy": 0.8}, "clean_metrics": {"accuracy": 0.9}}]
    rows = ocr_view_rows({"image=contrast@5": ["nobody"]}, ["nobody wants"], results, n_resamples=50)
    assert len(rows) == 1 and rows[0]["condition"] == "image=contrast@5"
    assert rows[0]["accuracy_drop"] == pytest.approx(0.2) and rows[0]["flip_rate"] == 0.25
    assert rows[0]["cer"] == pytest.approx(6 / 12)


class LevelReader:
    """Reads a picture as the first words of "nobody wants them": one per 60 levels of its mean brightness, so a
    darker picture reads fewer."""

    name = "level-reader"

    def __init__(self):
        self.calls = 0

    def read(self, picture):
        self.calls += 1
        words = ["nobody", "wants", "them"]
        level = float(np.asarray(picture.cpu() if hasattr(picture, "cpu") else picture, dtype=float).mean())
        return " ".join(words[: max(0, min(3, round(level / 60)))])


def test_the_view_is_in_the_tables_and_the_html_report(tmp_path):
    from pytest_memerobust.report import write_report
    from pytest_memerobust.report.tables import render
    from pytest_memerobust.run.options import DataOptions, Options, ProbeOptions
    from pytest_memerobust.run.session import RobustnessSession

    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=16), probes=ProbeOptions(ocr_view=4)))
    session.loaded.ocr = reader = LevelReader()
    for condition in ("image=brightness@5", "image=contrast@5", "text=typos@1"):
        session.evaluate("demo", condition)
    report = session.report()
    view = report["groups"][0]["ocr_view"]
    assert view["backend"] == "level-reader" and view["memes"] == 4
    assert [r["condition"] for r in view["rows"]] == ["image=brightness@5", "image=contrast@5"]
    assert all(r["memes"] == 4 for r in view["rows"])
    assert reader.calls == 3 * 4  # the clean pictures and each image condition's, once each
    table = render(report)
    assert "what OCR (level-reader) still reads of the caption" in table and "contrast@5" in table
    write_report(tmp_path / "r.html", report)
    html = (tmp_path / "r.html").read_text()
    assert "still reads of the caption" in html and "Words kept" in html
    off = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=16)))
    off.evaluate("demo", "image=contrast@5")
    assert "ocr_view" not in off.report()["groups"][0]


class DigestReader:
    """Reads a picture as the digest of its pixels, and keeps what it read."""

    name = "digest-reader"

    def __init__(self):
        self.read_pictures: list[str] = []

    def read(self, picture):
        import hashlib

        pixels = np.ascontiguousarray(np.asarray(picture.cpu() if hasattr(picture, "cpu") else picture))
        self.read_pictures.append(hashlib.sha256(pixels.tobytes()).hexdigest()[:12])
        return self.read_pictures[-1]


def test_a_transferred_attack_is_read_off_the_pictures_crafted_on_its_source():
    """Attacked on the model itself and transferred from another, the same attack makes other pictures: each is
    read off its own (the readings were once keyed without the source, and the transferred row reused the
    white-box one's)."""
    from pytest_memerobust.perturb.conditions import Condition
    from pytest_memerobust.run.analyses import ocr_view
    from pytest_memerobust.run.options import DataOptions, Options, ProbeOptions
    from pytest_memerobust.run.session import RobustnessSession

    session = RobustnessSession(Options(models=("memeblip2-tda", "demo"), data=DataOptions(limit=4),
                                        probes=ProbeOptions(ocr_view=4)))
    session.loaded.ocr = reader = DigestReader()
    white_box, transferred = "image=pgd_linf@4", "image=pgd_linf@4+from=demo"
    for condition in (white_box, transferred):
        session.evaluate("memeblip2-tda", condition)
    rows = {r["condition"]: r for r in ocr_view(session, "memeblip2-tda", "demo")}
    assert set(rows) == {white_box, transferred}
    assert len(reader.read_pictures) == 3 * 4  # each condition's own pictures, then the clean ones
    own, crafted_on_demo = reader.read_pictures[:4], reader.read_pictures[4:8]
    assert own != crafted_on_demo
    source = session.engine("memeblip2-tda", "demo", source="demo")
    condition = Condition.parse(transferred)
    assert crafted_on_demo == [DigestReader().read(source.picture(condition, i)) for i in range(4)]


rapidocr = pytest.importorskip("rapidocr_onnxruntime", reason="the OCR backend is in the dev and ocr extras")


def test_rapidocr_reads_through_light_edits_and_not_through_a_covered_caption(tmp_path):
    from pytest_memerobust.run.analyses import ocr_view
    from pytest_memerobust.run.options import CacheOptions, ComputeOptions, DataOptions, Options, ProbeOptions
    from pytest_memerobust.run.session import RobustnessSession

    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=8, ocr="rapidocr"),
                                        probes=ProbeOptions(ocr_view=3),
                                        compute=ComputeOptions(cache=CacheOptions(folder=tmp_path))))
    for condition in ("image=sticker@1", "image=caption_cover@5"):
        session.evaluate("demo", condition)
    rows = {r["condition"]: r for r in ocr_view(session, "demo", "demo")}
    assert rows["image=sticker@1"]["cer"] < 0.2 and rows["image=sticker@1"]["words_kept"] > 0.7
    assert rows["image=caption_cover@5"]["words_kept"] < 0.2
