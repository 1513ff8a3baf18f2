"""Vision-language models as detectors (detectors/vlm.py): tiny random models of three families, saved with a tokenizer
built here and loaded by path through the code a hub id takes; their answers read from the label words' next-token
logits, abstentions counted apart, and the built-in suites run on them end to end."""
from __future__ import annotations

import inspect
import json
import re
from dataclasses import replace

import numpy as np
import pytest
import torch
import transformers

from pytest_memerobust.detectors import ModelCard, Network, load_card, load_detector
from pytest_memerobust.detectors.cards import WeightsNotHere
from pytest_memerobust.detectors.vlm import Prompt, card_prompt, label_token_ids
from pytest_memerobust.engine import Condition
from pytest_memerobust.errors import ConfigError

from small_fits import patch_small_fits
from tiny_vlms import FAMILIES, save_tiny_vlm

CLASSES = ("non-hateful", "hateful")


def vlm_card(folder, **params) -> ModelCard:
    return ModelCard(name="tiny-vlm", architecture="vlm", classes=CLASSES,
                     network=Network(params={"abstain_below": 0.0, **params},
                                     backbone={"kind": "vlm", "name": str(folder)}))


@pytest.fixture(scope="module", params=FAMILIES)
def tiny_vlm(request, tmp_path_factory):
    """(family, folder) of a tiny random model saved with its processor."""
    return request.param, save_tiny_vlm(request.param, tmp_path_factory.mktemp(request.param))


def pictures(n: int, size: int = 512) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=g) for _ in range(n)]


CAPTIONS = ["nobody wants those people here", "love is love", "when the wifi finally works", "go back home"]


# --- the card -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("params, culprit", [
    ({"prompt": "Is this meme hateful?"}, "prompt must be a string with {caption}"),
    ({"prompt": 3}, "prompt must be a string"),
    ({"label_words": ["Yes"]}, "label_words must be 2 distinct words"),
    ({"label_words": ["Yes", "Yes"]}, "label_words must be 2 distinct words"),
    ({"label_words": "Yes No"}, "label_words must be 2 distinct words"),
    ({"abstain_below": 1.5}, "abstain_below must be a number in [0, 1)"),
    ({"abstain_below": True}, "abstain_below must be a number in [0, 1)"),
    ({"system": ["a"]}, "system must be a string"),
    ({"adapter": "/nowhere/lora"}, "adapter '/nowhere/lora': no such folder"),
    ({"temperature": 0.2}, "unknown key(s) ['temperature']"),
    ({"picture_cache_mib": -1}, "picture_cache_mib must be a number of MiB >= 0"),
    ({"readout": "hidden"}, "readout must be one of label_words, probe"),
])
def test_a_bad_prompt_in_a_card_is_one_error_naming_the_key(params, culprit):
    with pytest.raises(ConfigError) as err:
        card_prompt(vlm_card("unused", **params))
    assert culprit in str(err.value) and "[params]" in str(err.value)


def test_the_prompt_puts_the_caption_and_the_options_in_place():
    prompt = Prompt('Caption: "{caption}". Hateful? Answer {options}.', "Be brief.", ("No", "Yes"))
    assert prompt.text("love wins") == 'Caption: "love wins". Hateful? Answer No or Yes.'
    system, user = prompt.conversation("love wins")
    assert system["role"] == "system" and user["content"][0] == {"type": "image"}
    assert [m["role"] for m in Prompt().conversation("x")] == ["user"]  # no system message unless one is given


def test_a_hub_id_that_is_not_here_is_said_before_anything_loads(monkeypatch):
    monkeypatch.delenv("MEMEROBUST_DOWNLOAD", raising=False)
    card = vlm_card("")
    card = replace(card, network=replace(card.network, backbone={"kind": "vlm", "name": "no-such-org/no-such-vlm"}))
    with pytest.raises(WeightsNotHere, match="no-such-org/no-such-vlm' is not on this machine"):
        load_detector(card)


def test_the_shipped_vlm_cards_load_and_name_their_models():
    from pytest_memerobust.detectors.cards import available_cards

    for name in ("smolvlm-prompted", "qwen2-vl-7b-lmm-rgcl"):
        card = load_card(available_cards()[name])
        prompt, params = card_prompt(card)
        backbone = card.network.backbone
        assert card.architecture == "vlm" and backbone["kind"] == "vlm" and "/" in backbone["name"]
        assert prompt.label_words == ("No", "Yes") and "{caption}" in prompt.instruction


# --- tiny models ------------------------------------------------------------------------------------------------------


def test_label_words_that_share_a_first_token_are_refused(tiny_vlm):
    from transformers import AutoProcessor

    tokenizer = AutoProcessor.from_pretrained(tiny_vlm[1]).tokenizer
    assert len(label_token_ids(tokenizer, ["No", "Yes"])) == 2
    with pytest.raises(ConfigError, match="start with the same token"):
        label_token_ids(tokenizer, ["Yes", "Yes please"])


def test_a_tiny_model_gives_probabilities_from_its_label_words_at_512_px(tiny_vlm):
    family, folder = tiny_vlm
    detector = load_detector(vlm_card(folder))
    images = pictures(4)
    proba, abstained = detector.predict_with_abstentions(images, CAPTIONS)
    assert proba.shape == (4, 2) and np.allclose(proba.sum(1), 1, atol=1e-5) and not abstained.any()
    # the same answer alone as in a batch (left padding), and the same on a second call
    alone = np.concatenate([detector.predict_proba(images[i : i + 1], CAPTIONS[i : i + 1]) for i in range(4)])
    np.testing.assert_allclose(alone, proba, atol=1e-4)
    np.testing.assert_array_equal(detector.predict_proba(images, CAPTIONS), proba)
    # the picture and the caption both reach the model
    assert not np.allclose(detector.predict_proba(images[::-1], CAPTIONS), proba, atol=1e-6)
    assert not np.allclose(detector.predict_proba(images, CAPTIONS[::-1]), proba, atol=1e-6)
    # the probabilities are the label words' next-token probabilities, renormalised
    logits = detector.next_token_logits(images, CAPTIONS)
    p = torch.softmax(logits, -1)
    per_class = torch.stack([p[:, ids].sum(1) for ids in detector.label_ids], 1)
    np.testing.assert_allclose(proba, (per_class / per_class.sum(1, keepdim=True)).numpy(), atol=1e-6)


def test_each_distinct_picture_goes_through_the_vision_tower_once_across_captions_and_prompts(tiny_vlm):
    family, folder = tiny_vlm
    detector = load_detector(vlm_card(folder))
    unshared = load_detector(vlm_card(folder, picture_cache_mib=0))
    if "mm_encoder_outputs" not in inspect.signature(detector.model.forward).parameters:
        # transformers before the forward took precomputed vision features (5.17 had none, 5.24 has them): every
        # batch is encoded in full there, as detectors/vlm.py PictureFeatures says
        assert not detector.pictures.supported
        pytest.skip(f"transformers {transformers.__version__}: {family}'s forward takes no mm_encoder_outputs")
    assert detector.pictures.supported and not unshared.pictures.supported
    images, edited = pictures(4), [c.upper() for c in CAPTIONS]
    first = detector.predict_proba(images, CAPTIONS)
    assert detector.pictures.pictures_encoded == 4
    # a caption edit, then another prompt: the same four pictures, no vision forward, the same answers as encoding
    # every batch in full
    again = detector.predict_proba(images, edited)
    reworded = detector.with_prompt(Prompt("Is this meme hateful? {caption} Answer {options}."))
    other_prompt = reworded.predict_proba(images, CAPTIONS)
    assert detector.pictures.pictures_encoded == 4 and reworded.pictures is detector.pictures
    np.testing.assert_allclose(first, unshared.predict_proba(images, CAPTIONS), atol=1e-5)
    np.testing.assert_allclose(again, unshared.predict_proba(images, edited), atol=1e-5)
    unshared_reworded = unshared.with_prompt(reworded.prompt)
    np.testing.assert_allclose(other_prompt, unshared_reworded.predict_proba(images, CAPTIONS), atol=1e-5)
    assert unshared.pictures.pictures_encoded == 12
    # new pictures are encoded; held ones in a batch with them are too (the batch goes through whole)
    detector.predict_proba(pictures(2, size=256), CAPTIONS[:2])
    assert detector.pictures.pictures_encoded == 6
    detector.predict_proba(images[:2], CAPTIONS[:2])
    assert detector.pictures.pictures_encoded == 6


def test_a_picture_budget_too_small_for_one_picture_holds_none_and_answers_the_same(tiny_vlm):
    family, folder = tiny_vlm
    tight = load_detector(vlm_card(folder, picture_cache_mib=1e-6))
    images = pictures(3)
    first = tight.predict_proba(images, CAPTIONS[:3])
    np.testing.assert_array_equal(tight.predict_proba(images, CAPTIONS[:3]), first)
    assert tight.pictures.held_bytes == 0 and tight.pictures.pictures_encoded == 6


def test_an_answer_whose_mass_is_elsewhere_is_an_abstention(tiny_vlm):
    """A random model puts almost no mass on two words of its vocabulary: with a bound above that, it declines
    every meme; the session counts the abstentions apart and reports their rate and change from clean."""
    from pytest_memerobust.data.demo import demo_dataset
    from pytest_memerobust.engine import EncodingSettings, Engine

    detector = load_detector(vlm_card(tiny_vlm[1], abstain_below=0.9))
    engine = Engine(detector, demo_dataset("test").head(6), asking=EncodingSettings(batch_size=4))
    engine.predict(Condition())
    engine.predict(Condition(text="typos", text_severity=3))
    assert engine.abstentions["clean"].all() and engine.abstentions["text=typos@3"].all()


def _card_file(tmp_path, family: str, folder) -> str:
    card = tmp_path / f"tiny-{family}.toml"
    card.write_text(f'name = "tiny-{family}"\narchitecture = "vlm"\nclasses = ["non-hateful", "hateful"]\n'
                    f'[backbone]\nkind = "vlm"\nname = "{folder}"\n[params]\nabstain_below = 0.0\n')
    return str(card)


QUICK = ["--memerobust-tables=full", "--memerobust-limit=8", "--memerobust-bootstrap=20", "--memerobust-batch-size=8",
         "-p", "no:cacheprovider"]


def test_rainbow_noise_cases_run_on_each_tiny_family_with_abstention_rates(pytester, tiny_vlm, tmp_path):
    family, folder = tiny_vlm
    report = tmp_path / "r.json"
    result = pytester.runpytest(f"--memerobust-model={_card_file(tmp_path, family, folder)}", *QUICK,
                                f"--memerobust-report={report}", "-k", "rainbow and (typos-3 or imagenet_c-3)")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) >= 3 and "errors" not in outcomes, outcomes
    out = result.stdout.str()
    assert "Traceback" not in out and "abstentions: memes the detector declined" in out
    (group,) = [g for g in json.loads(report.read_text())["groups"] if g.get("suite") == "rainbow-noise"]
    rows = {r["condition"]: r for r in group["results"]}
    assert {"text=typos@3", "image=imagenet_c@3", "text=typos@3+image=imagenet_c@3"} <= set(rows)
    assert group["clean"]["abstention_rate"] == 0.0 and rows["text=typos@3"]["n_declined"] == 0
    typos = rows["text=typos@3"]
    assert typos["abstention_increase"] == 0.0 and len(typos["abstention_increase_ci"]) == 2


def test_a_model_that_declines_every_meme_still_gets_its_reports(pytester, tmp_path):
    """Label words with almost no mass: every case fails with AbstainedTooOften, and that is the verdict, not a
    report that cannot be built. JSON, Markdown and HTML are written: the declined share per condition (all of them,
    clean too), each case's error, the prompt and label words asked with, and `no answers` where a metric has none."""
    from tiny_vlms import save_tiny_decliner

    folder = save_tiny_decliner(tmp_path / "decliner")
    card = tmp_path / "decliner.toml"  # the default abstain_below (0.5): the label words get ~1e-38 of the mass
    card.write_text(f'name = "decliner"\narchitecture = "vlm"\nclasses = ["non-hateful", "hateful"]\n'
                    f'[backbone]\nkind = "vlm"\nname = "{folder}"\n')
    reports = [tmp_path / f"r.{suffix}" for suffix in ("json", "md", "html")]
    result = pytester.runpytest(f"--memerobust-model={card}", *QUICK, "-k", "rainbow and (clean or typos-3+uap-3)",
                                *(f"--memerobust-report={r}" for r in reports))
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "could not be built" not in out and "Traceback" not in out, out[-3000:]
    assert "2 raised an error instead of a measurement: AbstainedTooOften ×2" in out
    report = json.loads(reports[0].read_text())
    assert "every case (2) raised an error instead of a measurement (AbstainedTooOften ×2)" in report["verdict"][
        "summary"]
    assert [(c["condition"], c["error"]) for c in report["cases"]] == [("clean", "AbstainedTooOften"),
                                                                      ("text=typos@3+image=uap@3", "AbstainedTooOften")]
    assert all("declined 8 of 8 memes" in c["message"] and c["gated_by"] == ["error"] for c in report["cases"])
    (group,) = report["groups"]
    assert group["clean"]["abstention_rate"] == 1.0 and group["clean"]["n"] == 0
    assert group["results"][0]["abstention_rate"] == 1.0
    prompt = report["models"][str(card)]["prompt"]
    assert prompt["label_words"] == ["No", "Yes"] and "{caption}" in prompt["instruction"]
    assert prompt["abstain_below"] == 0.5
    markdown, page = reports[1].read_text(), reports[2].read_text()
    for text in (out, markdown, page):
        assert "no answers" in text and not re.search(r"\bnan\b", text)
    for text in (markdown, page):
        assert "AbstainedTooOften" in text and "label words (one per class)" in text
    assert "| clean " in markdown.split("abstentions: memes the detector declined")[1]


SKIP_REASONS = ("has no channel-ablation modes", "back-translation needs MarianMT", "classifies no meme correctly",
                "predicts every swapped pair's two memes alike", "flags none of the harmful memes clean")


def test_every_built_in_case_runs_on_a_tiny_qwen2_vl_with_a_verdict(pytester, tmp_path, monkeypatch):
    """The main job (every case of every built-in suite) on a tiny Qwen2-VL: each case passes, fails its thresholds or
    skips for a reason said in one line (a prompted model has no fusion head to ablate); none errors."""
    # the universal attacks fitted on 8 training memes, not 64: their black-box searches (three trigger lengths of
    # 16 candidates a word, 8 random patterns) made about 13,000 meme queries, most of this test's time; what is
    # checked here is that their cases get a verdict, not their strength. One process, as in a pytest-xdist worker:
    # the fits run here, where they are made small, and not on spawned pool workers
    patch_small_fits(monkeypatch, 8)
    folder = save_tiny_vlm("qwen2_vl", tmp_path / "qwen2_vl")
    page, report = tmp_path / "r.html", tmp_path / "r.json"
    result = pytester.runpytest(f"--memerobust-model={_card_file(tmp_path, 'qwen2_vl', folder)}", *QUICK, "-rs",
                                "--memerobust-workers=1", f"--memerobust-report={page}",
                                f"--memerobust-report={report}")
    outcomes = result.parseoutcomes()
    out = result.stdout.str()
    assert "errors" not in outcomes and "Traceback" not in out and outcomes.get("passed", 0) > 100, outcomes
    skips = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert all(any(reason in line for reason in SKIP_REASONS) for line in skips), skips
    assert "per meme, share of variants that change its verdict" in out
    (entry,) = json.loads(report.read_text())["prompt_invariance"]
    assert entry["n"] == 8 and len(entry["variants"]) == 8 and len(entry["mean_flip_share_ci"]) == 2
    html = page.read_text()
    assert html.count("<h2>Prompt invariance: ") == 1 and "abstentions: memes the detector declined" in html


def test_prompt_variants_reword_the_instruction_reorder_the_options_and_change_the_system_message():
    from pytest_memerobust.perturb.prompts import PARAPHRASES, prompt_variants

    variants = prompt_variants(Prompt(system="Be brief."))
    assert len(variants) == len(PARAPHRASES) + 2
    assert variants["options reversed"].text("x").endswith("Answer Yes or No.")
    assert variants["system left out"].system is None
    assert all("{caption}" in v.instruction for v in variants.values())
    assert "system added" in prompt_variants(Prompt())


def test_prompt_invariance_on_a_tiny_model_counts_the_verdicts_each_wording_changes(tiny_vlm):
    from pytest_memerobust.run.analyses import evaluate_prompt_invariance

    detector = load_detector(vlm_card(tiny_vlm[1]))
    result = evaluate_prompt_invariance(detector, pictures(4, 64), CAPTIONS, [1, 0, 0, 1], ["a", "b", "c", "d"],
                                        batch_size=4, n_resamples=50)
    by_name = {r["variant"]: r for r in result["variants"]}
    assert len(by_name) == 8 and result["n"] == 4
    # the flip rate of a variant is the share of memes whose verdict differs from the card's prompt's
    base = detector.predict_proba(pictures(4, 64), CAPTIONS).argmax(1)
    variant = detector.with_prompt(prompt_variants_of(detector)["paraphrase 2"])
    changed = variant.predict_proba(pictures(4, 64), CAPTIONS).argmax(1) != base
    assert by_name["paraphrase 2"]["flip_rate"] == changed.mean()
    assert 0 <= result["mean_flip_share"] <= result["any_flip_share"] <= 1
    lo, hi = result["mean_flip_share_ci"]
    assert lo <= result["mean_flip_share"] <= hi
    assert detector.prompt.instruction != variant.prompt.instruction  # the view did not change the detector


def prompt_variants_of(detector):
    from pytest_memerobust.perturb.prompts import prompt_variants

    return prompt_variants(detector.prompt)


def test_the_grammar_gives_whole_instructions_and_the_fuzzer_finds_no_flip_under_the_cards_own_prompt(tiny_vlm):
    from hypothesis import given, settings

    from pytest_memerobust.fuzz import rewordings
    from pytest_memerobust.run.analyses import PromptFuzzer

    @settings(max_examples=20, database=None)
    @given(rewordings())
    def whole(instruction):
        assert "{caption}" in instruction and "{options}" in instruction and instruction.strip() == instruction

    whole()
    detector = load_detector(vlm_card(tiny_vlm[1]))
    labels = detector.predict_proba(pictures(4, 64), CAPTIONS).argmax(1)  # "right" = what it says: all confident
    fuzzer = PromptFuzzer(detector, pictures(4, 64), CAPTIONS, labels, ["a", "b", "c", "d"], confidence=0.0)
    assert fuzzer.ids == ["a", "b", "c", "d"] and fuzzer.flipped(detector.prompt.instruction) == []
    flipped = fuzzer.flipped('Caption: "{caption}". Is this meme hateful? Answer {options}.')
    assert set(flipped) <= {"a", "b", "c", "d"}


PROMPT_SUITE = """
[suite]
name = "prompt-grid"
[thresholds]
max_flip_rate = 1.0
[prompt]
paraphrase = [1, 2]
options_reversed = true
[grid]
text = ["typos@3"]
image = ["jpeg_compression@3"]
prompt = ["paraphrase@2"]
"""


def test_prompt_edits_are_conditions_alone_and_with_text_or_image_sides(pytester, tmp_path):
    from pytest_memerobust.run.suite import load_suite

    pytester.makefile(".toml", **{"memerobust-prompts": PROMPT_SUITE})
    suite = load_suite(pytester.path / "memerobust-prompts.toml")
    ids = [c.id for c in suite.conditions]
    assert ids == ["clean", "prompt=paraphrase@1", "prompt=paraphrase@2", "prompt=options_reversed",
                   "text=typos@3+image=jpeg_compression@3", "text=typos@3+prompt=paraphrase@2",
                   "image=jpeg_compression@3+prompt=paraphrase@2"]
    assert Condition.parse("prompt=paraphrase@2+image=jpeg_compression@3").id == ids[-1]
    folder = save_tiny_vlm("qwen2_vl", tmp_path / "qwen2_vl")
    report = tmp_path / "r.json"
    result = pytester.runpytest(f"--memerobust-model={_card_file(tmp_path, 'qwen2_vl', folder)}", *QUICK,
                                f"--memerobust-report={report}", "memerobust-prompts.toml")
    result.assert_outcomes(passed=7)
    assert "prompt edits, alone and with text or image perturbations" in result.stdout.str()
    (group,) = json.loads(report.read_text())["groups"]
    rows = {r["condition"]: r for r in group["results"]}
    assert rows["image=jpeg_compression@3+prompt=paraphrase@2"]["kind"] == "prompt"
    # the engine asks the reworded prompt: the same as the detector asked with it directly
    detector = load_detector(vlm_card(folder))
    from pytest_memerobust.data.demo import demo_dataset
    from pytest_memerobust.engine import EncodingSettings, Engine
    from pytest_memerobust.perturb.prompts import prompt_edit

    memes = demo_dataset("test").head(4)
    engine = Engine(detector, memes, asking=EncodingSettings(batch_size=4))
    view = detector.with_prompt(prompt_edit(detector.prompt, "paraphrase", 2))
    asked = view.predict_proba(engine.inputs("image", None, None), engine.inputs("text", None, None))
    np.testing.assert_allclose(engine.predict(Condition(prompt="paraphrase", prompt_severity=2)), asked, atol=1e-6)
    # a detector with a trained head has no prompt: those cases skip, saying so
    skipped = pytester.runpytest("--memerobust-model=demo", *QUICK, "memerobust-prompts.toml", "-rs")
    skipped.assert_outcomes(passed=2, skipped=5)
    assert "demo does not read the prompt (it is not prompted)" in skipped.stdout.str()


# --- a linear probe on the last hidden state (readout = "probe") ------------------------------------------------------


def test_memerobust_train_fits_a_probe_on_a_tiny_qwen2_vl_and_the_card_it_writes_runs(tmp_path):
    """LMM-RGCL's readout: a linear head on the hidden state at the answer's position, fitted on frozen features by
    `memerobust train`; the checkpoint and the card written beside it load and answer through the probe."""
    from pytest_memerobust.cli import main
    from pytest_memerobust.detectors.checkpoints import load_state_dict, save_state_dict
    from pytest_memerobust.errors import CheckpointError

    folder = save_tiny_vlm("qwen2_vl", tmp_path / "qwen2_vl")
    card = tmp_path / "probe.toml"
    card.write_text('name = "tiny-probe"\narchitecture = "vlm"\ntask = "hate"\nclasses = ["non-hateful", "hateful"]\n'
                    f'[backbone]\nkind = "vlm"\nname = "{folder}"\n[params]\nreadout = "probe"\n'
                    '[training]\nlr = 0.01\n')
    out = tmp_path / "probe.safetensors"
    assert main(["train", str(card), "--data", "demo", "--out", str(out), "--epochs", "3", "--quiet"]) == 0
    history = json.loads(out.with_suffix(".metrics.json").read_text())["history"]
    assert [row["epoch"] for row in history] == [1, 2, 3] and history[-1]["loss"] < history[0]["loss"]
    state, metadata = load_state_dict(out)
    assert set(state) == {"head.weight", "head.bias"} and metadata["format"] == "pytest-memerobust-vlm-probe/1"

    trained = load_detector(str(out.with_suffix(".card.toml")))
    untrained = load_detector(str(card))
    images = pictures(4)
    proba, abstained = trained.predict_with_abstentions(images, CAPTIONS)
    with torch.no_grad():
        hidden = trained.encode_pairs(images, CAPTIONS)
        expected = torch.softmax(hidden @ state["head.weight"].T + state["head.bias"], -1).numpy()
    np.testing.assert_allclose(proba, expected, atol=1e-5)
    assert not abstained.any() and not np.allclose(proba, untrained.predict_proba(images, CAPTIONS), atol=1e-4)
    # a probe of another width is refused, naming the file
    save_state_dict({"head.weight": torch.zeros(2, 7), "head.bias": torch.zeros(2)}, tmp_path / "narrow.safetensors")
    with pytest.raises(CheckpointError, match="narrow.safetensors does not fit this model's probe"):
        load_detector(str(card), checkpoint=tmp_path / "narrow.safetensors")
    # a checkpoint for a prompted (label-word) card is refused at once
    with pytest.raises(ConfigError, match="only a probe"):
        load_detector(vlm_card(folder), checkpoint=out)
