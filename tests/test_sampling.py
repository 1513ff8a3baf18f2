"""Repeat sampling (detectors/sampling.py, judge/sampling.py): lmms-eval's four figures on hand-made score matrices,
keyed draws that are the same whatever the batch or shard, a tiny prompted model at temperature > 0 and a fake
OpenAI-compatible server of this file's own (answers drawn from each request's seed and temperature) run end to end
with the figures and their intervals, the server's cached answers reused on a re-run, and a suite bound on the
inconsistency."""
from __future__ import annotations

import hashlib
import json
import math
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest

from pytest_memerobust.detectors import ModelCard, Network, Scoring, load_detector
from pytest_memerobust.detectors.cards import builtin_card_dir
from pytest_memerobust.detectors.sampling import (Sampling, draw_answers, request_seed, sample_keys, tempered,
                                                  vote_shares)
from pytest_memerobust.engine import Condition
from pytest_memerobust.errors import ConfigError
from pytest_memerobust.judge import sampling
from pytest_memerobust.data.meme import DECLINED
from pytest_memerobust.judge.results import Answers, ConditionResult, Memes, StatsConfig

from test_hosted import _reply, _serve
from tiny_vlms import save_tiny_vlm

NAN = float("nan")
FIGURES = ("expected_accuracy", "consensus_accuracy", "internal_variance", "consistency_rate")

# --- the four figures on hand-made matrices --------------------------------------------------------------------------

# four memes, k = 4: 3 of 4 right; 2 of 4 (a tie); all right; all wrong
SCORES = np.array([[1, 1, 0, 1], [1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]], float)


def test_the_four_figures_are_lmms_evals_on_a_matrix_without_declines():
    assert sampling.expected_accuracy(SCORES) == pytest.approx(9 / 16)  # the mean of all 16 scores
    assert sampling.consensus_accuracy(SCORES) == pytest.approx(2 / 4)  # the tie counts as wrong
    # per meme, the sample variance with ddof = 1: 3/4 right -> (3 - 9/4) / 3 = 1/4; a tie -> (2 - 1) / 3 = 1/3
    assert sampling.internal_variance(SCORES) == pytest.approx((1 / 4 + 1 / 3 + 0 + 0) / 4)
    assert sampling.consistency_rate(SCORES) == pytest.approx(2 / 4)  # all right, all wrong
    for name in FIGURES:  # the same as numpy's own reading of the definitions
        expected = {"expected_accuracy": SCORES.mean(), "consensus_accuracy": np.mean(SCORES.sum(1) > 2),
                    "internal_variance": SCORES.var(axis=1, ddof=1).mean(),
                    "consistency_rate": np.mean(SCORES.min(1) == SCORES.max(1))}[name]
        assert getattr(sampling, name)(SCORES) == pytest.approx(expected), name


def test_a_declined_sample_is_neither_right_nor_wrong_and_is_counted_apart():
    answers = np.array([[1, 1, DECLINED], [0, DECLINED, DECLINED], [DECLINED] * 3, [1, 0, 1]])
    scores = sampling.score_matrix(answers, np.array([1, 1, 0, 1]))
    assert np.array_equal(np.isnan(scores), answers == DECLINED)
    assert sampling.expected_accuracy(scores) == pytest.approx(4 / 6)  # 6 answered samples, 4 right
    assert sampling.consensus_accuracy(scores) == pytest.approx(2 / 3)  # meme 3 has no answer: left out
    # meme 2 has one answer (no variance); [1, 1] -> 0, [1, 0, 1] -> 1/3
    assert sampling.internal_variance(scores) == pytest.approx((0 + 1 / 3) / 2)
    assert sampling.consistency_rate(scores) == pytest.approx(2 / 3)
    assert sampling.declined_rate(answers) == pytest.approx(6 / 12)
    everything_declined = sampling.score_matrix(np.full((2, 3), DECLINED), np.array([0, 1]))
    assert all(math.isnan(getattr(sampling, name)(everything_declined)) for name in FIGURES)


def test_flip_rates_count_pairs_of_askings():
    clean = np.array([[1, 1, 0], [0, 0, 0], [1, DECLINED, 1]])
    now = np.array([[0, 0, 0], [0, 0, 0], [1, 1, DECLINED]])
    # self: pairs of clean askings: meme 1 has 3 pairs, 2 disagree; meme 2 3 pairs, none; meme 3 one pair, agreeing
    assert sampling.self_flip_rate(clean, 2) == pytest.approx(2 / 7)
    # clean x perturbed pairs: meme 1: 9 pairs, the 6 with a clean 1 disagree; meme 2: 9, none; meme 3: 4, none
    assert sampling.sampled_flip_rate(clean, now, 2) == pytest.approx(6 / 22)
    assert sampling.excess_flip_rate(clean, now, 2) == pytest.approx(6 / 22 - 2 / 7)


def test_the_figures_take_a_stack_of_resamples_at_once_and_get_intervals_over_memes():
    stack = np.stack([SCORES, SCORES[[0, 0, 1, 1]], SCORES[[2, 2, 2, 3]]])
    for name in FIGURES:
        figure = getattr(sampling, name)
        assert np.allclose(figure(stack), [figure(m) for m in stack]), name
    answers = (SCORES == 1).astype(np.int8)  # class 1 where right, against truth 1
    out = sampling.summary(answers, np.ones(4, int), 2, n_resamples=200, seed=3)
    assert out["k"] == 4 and out["declined_rate"] == 0.0 and "flip_rate" not in out
    for name in (*FIGURES, "self_flip_rate"):
        lo, hi = out[f"{name}_ci"]
        assert lo <= out[name] <= hi, name
    assert out == sampling.summary(answers, np.ones(4, int), 2, n_resamples=200, seed=3)


# --- the card and the keyed draws ------------------------------------------------------------------------------------


def demo_card(**keys) -> ModelCard:
    return ModelCard(name="s", architecture="demo", classes=("non-hateful", "hateful"), scoring=Scoring(**keys))


@pytest.mark.parametrize("keys, sampling_", [
    ({}, None), ({"samples": 1}, None), ({"temperature": 0}, None), ({"samples": 1, "temperature": 0.0}, None),
    ({"temperature": 0.7}, Sampling(5, 0.7)), ({"samples": 3}, Sampling(3, 1.0)),
    ({"samples": 4, "temperature": 0}, Sampling(4, 0.0)),
])
def test_a_card_samples_when_it_says_so(keys, sampling_):
    assert Sampling.from_card(demo_card(**keys)) == sampling_


@pytest.mark.parametrize("keys, culprit", [
    ({"samples": 0}, "samples must be a whole number >= 1"), ({"samples": 2.5}, "samples must be a whole number"),
    ({"samples": True}, "samples must be a whole number"), ({"temperature": -1}, "temperature must be a number >= 0"),
    ({"temperature": "hot"}, "temperature must be a number >= 0"),
    ({"samples": 1, "temperature": 0.7}, "cannot show the model's noise: set samples >= 2"),
    ({"samples": 3, "multilabel": True}, "for single-label tasks"),
])
def test_a_bad_sampling_key_is_one_error_naming_it_before_the_model_loads(keys, culprit):
    with pytest.raises(ConfigError, match=re.escape(culprit)):
        load_detector(demo_card(**keys))  # (no checkpoint: it would fail on the weights if it got that far)


def test_sampling_keys_under_params_are_pointed_to_the_top_level():
    card = ModelCard(name="v", architecture="hosted", classes=("no", "yes"),
                     network=Network(params={"base_url": "http://127.0.0.1:1/v1", "model": "m", "temperature": 0.7}))
    with pytest.raises(ConfigError, match=r"\['temperature'\] \(temperature go at the card's top level"):
        load_detector(card)


def test_the_card_reads_as_before_without_the_keys_and_shows_them_when_set():
    assert "samples" not in demo_card().as_dict() and "temperature" not in demo_card().as_dict()
    assert demo_card(samples=3).as_dict()["samples"] == 3


def test_the_draws_follow_the_tempered_probabilities_and_depend_on_the_key_alone():
    proba = np.tile([0.3, 0.7], (4000, 1))
    keys = sample_keys(0, [f"m{i}" for i in range(4000)], "clean")
    answers = draw_answers(proba, None, keys, Sampling(3, 1.0))
    assert answers.shape == (4000, 3) and abs(answers.mean() - 0.7) < 0.02
    colder = draw_answers(proba, None, keys, Sampling(3, 0.5))  # p^2 renormalised: 0.49 / 0.58
    assert abs(colder.mean() - 0.49 / 0.58) < 0.02
    assert (draw_answers(proba, None, keys, Sampling(3, 0.0)) == 1).all()  # T = 0: the most probable class
    np.testing.assert_allclose(tempered([[0.3, 0.7]], 0.5), [[0.09 / 0.58, 0.49 / 0.58]])
    # any subset, in any order, with more samples: the same answers for the same (seed, meme, condition, index)
    rows = [17, 3, 999]
    again = draw_answers(proba[rows], None, [keys[i] for i in rows], Sampling(5, 1.0))
    assert np.array_equal(again[:, :3], answers[rows])
    other = draw_answers(proba, None, sample_keys(0, [f"m{i}" for i in range(4000)], "text=typos@3"), Sampling(3, 1.0))
    assert not np.array_equal(other, answers)  # another condition asks again
    declined = draw_answers(proba[:3], np.array([False, True, False]), keys[:3], Sampling(3, 1.0))
    assert (declined[1] == DECLINED).all() and (declined[[0, 2]] != DECLINED).all()


def test_vote_shares_are_the_consensus_and_no_answer_is_a_declined_meme():
    shares, declined = vote_shares(np.array([[1, 1, 0], [0, DECLINED, DECLINED], [DECLINED] * 3]), 2)
    np.testing.assert_allclose(shares, [[1 / 3, 2 / 3], [1, 0], [0.5, 0.5]])
    assert declined.tolist() == [False, False, True]


# --- results, the suite bound, the tables ---------------------------------------------------------------------------

Y = np.array([0, 1, 0, 1, 0, 1])
CLEAN_ANSWERS = np.array([[0, 0, 0], [1, 1, 1], [0, 1, 0], [1, 1, 1], [0, 0, 0], [1, 0, 1]], np.int8)
NOW_ANSWERS = np.array([[0, 1, 0], [1, 0, 1], [1, 1, 1], [1, 1, 1], [0, 0, 0], [0, 1, 0]], np.int8)


def sampled_result(condition: Condition) -> ConditionResult:
    clean = vote_shares(CLEAN_ANSWERS, 2)[0]
    now = clean if condition.kind == "clean" else vote_shares(NOW_ANSWERS, 2)[0]
    answers = CLEAN_ANSWERS if condition.kind == "clean" else NOW_ANSWERS
    return ConditionResult("m", "d", condition, Memes(Y),
                           Answers(clean, now, sampled_clean=CLEAN_ANSWERS, sampled=answers),
                           StatsConfig(n_resamples=100))


def test_a_result_reports_its_samples_and_they_travel_between_workers():
    typos = sampled_result(Condition(text="typos", text_severity=3))
    block = typos.as_dict()["sampling"]
    assert block["k"] == 3 and block["consistency_rate"] == pytest.approx(3 / 6)
    assert block["consensus_accuracy"] == pytest.approx(4 / 6) and block["self_flip_rate"] == pytest.approx(4 / 18)
    assert {"flip_rate", "flip_rate_ci", "excess_flip_rate", "excess_flip_rate_ci"} <= set(block)
    assert "flip_rate" not in sampled_result(Condition()).as_dict()["sampling"]
    back = ConditionResult.from_wire(typos.to_wire(), typos.stats)
    assert np.array_equal(back.answers.sampled, NOW_ANSWERS) and back.as_dict() == typos.as_dict()
    plain = ConditionResult("m", "d", Condition(), Memes(Y), Answers(np.eye(2)[Y], np.eye(2)[Y]),
                            StatsConfig(n_resamples=20))
    assert "sampling" not in plain.as_dict()


def test_a_suite_bounds_the_inconsistency_and_says_so():
    from pytest_memerobust.judge.thresholds import Thresholds, assess, check

    bound = Thresholds.from_mapping({"max_inconsistency": 0.1}, "suite")
    (violation,) = check(sampled_result(Condition(text="typos", text_severity=3)), bound)
    assert violation.what == "inconsistency (memes whose 3 answers disagree)" and violation.value == pytest.approx(0.5)
    assert violation.short().startswith("inconsistency (memes whose 3 answers disagree) 0.500 > 0.100 (CI ")
    assert assess(sampled_result(Condition()), Thresholds.from_mapping({"max_inconsistency": 0.5}, "s")) == []
    plain = ConditionResult("m", "d", Condition(), Memes(Y), Answers(np.eye(2)[Y], np.eye(2)[Y]),
                            StatsConfig(n_resamples=20))
    assert assess(plain, bound) == []  # a detector asked once has nothing to bound
    assert "max_inconsistency" not in Thresholds().as_dict()
    with pytest.raises(ValueError, match=r"suite.max_inconsistency: expected a number in \[0, 1\], got 2"):
        Thresholds.from_mapping({"max_inconsistency": 2}, "suite")


def test_the_tables_show_the_sampling_only_for_a_sampled_detector():
    from pytest_memerobust.report.tables import render

    rows = [sampled_result(Condition()).as_dict(), sampled_result(Condition(text="typos", text_severity=3)).as_dict()]
    group = {"model": "m", "dataset": "d", "task": "hate", "results": rows[1:], "clean": rows[0]}
    text = render({"groups": [group]})
    assert "repeat sampling: each meme asked k times" in text
    clean, typos = (row.split() for row in text.splitlines() if row.startswith(("clean ", "text=typos@3 ")))
    # expected accuracy 11/18; clean x perturbed pairs that disagree 17/54; clean pairs that disagree 4/18
    assert typos[:3] == ["text=typos@3", "3", "0.611"] and typos[10] == "0.315" and typos[12] == "0.222"
    assert clean[:3] == ["clean", "3", "0.889"] and clean[10] == "–" and clean[11] == "0.222"
    for r in rows:
        r.pop("sampling")
    assert "repeat sampling" not in render({"groups": [group]})


# --- end to end ---------------------------------------------------------------------------------------------------

SUITE = """
[suite]
name = "sampled"
[thresholds]
max_flip_rate = 1.0
[text]
typos = [3]
"""
QUICK = ["--memerobust-limit=8", "--memerobust-bootstrap=50", "--memerobust-batch-size=8", "-p", "no:cacheprovider"]


def _sampling_blocks(report: Path) -> dict:
    (group,) = json.loads(report.read_text())["groups"]
    return {r["condition"]: r["sampling"] for r in [group["clean"], *group["results"]]}


def _sane(block: dict) -> None:
    for name in (*FIGURES, "self_flip_rate"):
        lo, hi = block[f"{name}_ci"]
        assert 0 <= lo <= block[name] <= hi <= 1, (name, block)
    assert block["internal_variance"] <= 0.5


def _demo_card_file(tmp_path, **keys) -> str:
    text = (builtin_card_dir() / "demo.toml").read_text()
    text = text.replace('checkpoint = "demo.safetensors"', f'checkpoint = "{builtin_card_dir() / "demo.safetensors"}"')
    top = "".join(f"{k} = {v}\n" for k, v in keys.items())
    path = tmp_path / "demo-sampled.toml"
    path.write_text(top + text.replace('name = "demo"', 'name = "demo-sampled"'))
    return str(path)


def test_a_sampled_classifier_gives_the_same_samples_whatever_the_shards_and_batches(pytester, tmp_path):
    pytester.makefile(".toml", **{"memerobust-sampled": SUITE})
    card = _demo_card_file(tmp_path, samples=4, temperature=1.5)
    blocks = []
    for extra in ([], ["--memerobust-shard-size=4", "--memerobust-batch-size=2"]):
        report = tmp_path / f"r{len(blocks)}.json"
        result = pytester.runpytest(f"--memerobust-model={card}", *QUICK, *extra, f"--memerobust-report={report}",
                                    "memerobust-sampled.toml")
        assert result.ret == 0, result.stdout.str()
        blocks.append(_sampling_blocks(report))
    assert blocks[0] == blocks[1] and set(blocks[0]) == {"clean", "text=typos@3"}
    _sane(blocks[0]["clean"])


def test_the_suite_bound_fails_a_case_whose_answers_disagree_too_often(pytester, tmp_path):
    bounded = SUITE.replace("max_flip_rate = 1.0", "max_flip_rate = 1.0\nmax_inconsistency = 0.1")
    (pytester.path / "memerobust-sampled.toml").write_text(bounded + '[[override]]\nmatch = "clean"\n'
                                                                     'max_inconsistency = 1.0\n')
    result = pytester.runpytest(f"--memerobust-model={_demo_card_file(tmp_path, temperature=5.0)}", *QUICK, "-v",
                                "memerobust-sampled.toml")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "typos-3" in out and "inconsistency (memes whose 5 answers disagree)" in out and "> 0.100" in out, out


def test_a_tiny_prompted_model_at_temperature_above_zero_reports_the_figures_the_same_on_a_rerun(pytester, tmp_path):
    folder = save_tiny_vlm("qwen2_vl", tmp_path / "qwen2_vl")
    card = tmp_path / "tiny-sampled.toml"
    card.write_text('name = "tiny-sampled"\narchitecture = "vlm"\nclasses = ["non-hateful", "hateful"]\n'
                    'samples = 4\ntemperature = 3.0\n'
                    f'[backbone]\nkind = "vlm"\nname = "{folder}"\n[params]\nabstain_below = 0.0\n')
    pytester.makefile(".toml", **{"memerobust-sampled": SUITE})
    reports = []
    for run in range(2):
        report = tmp_path / f"r{run}.json"
        result = pytester.runpytest(f"--memerobust-model={card}", *QUICK, f"--memerobust-report={report}",
                                    "memerobust-sampled.toml")
        assert result.ret == 0 and "Traceback" not in result.stdout.str(), result.stdout.str()
        reports.append(report)
    blocks = _sampling_blocks(reports[0])
    assert blocks == _sampling_blocks(reports[1])
    assert json.loads(reports[0].read_text())["groups"] == json.loads(reports[1].read_text())["groups"]
    for block in blocks.values():
        assert block["k"] == 4 and block["declined_rate"] == 0.0
        _sane(block)
    typos = blocks["text=typos@3"]
    assert {"flip_rate", "excess_flip_rate"} <= set(typos)
    assert typos["self_flip_rate"] == blocks["clean"]["self_flip_rate"]  # the clean memes' noise, beside each condition
    assert blocks["clean"]["consistency_rate"] < 1  # at temperature 3 the model's answers vary


# --- a fake OpenAI-compatible server that samples ------------------------------------------------------------------


def _unit(*parts) -> float:
    return int.from_bytes(hashlib.blake2b("\0".join(map(str, parts)).encode(), digest_size=8).digest(), "big") / 2**64


class SamplingEndpoint(BaseHTTPRequestHandler):
    """A sampled model: each caption's probability of "Yes" comes from a hash of the caption, the request's
    temperature tempers it and its seed draws the answer (one seed, one answer); one seed in 7 gets a refusal.
    Without a seed it answers as at temperature 0 would. Records (caption, temperature, seed, answer)."""

    requests: list[tuple] = []

    def log_message(self, *args):  # quiet
        pass

    @staticmethod
    def answer(caption: str, temperature: float, seed: int | None) -> str:
        p = 0.05 + 0.9 * _unit("caption", caption)
        if seed is not None and seed % 7 == 0:
            return "I'm sorry, but I can't help with that."
        if seed is None or temperature == 0:
            return "Yes" if p > 0.5 else "No"
        yes = p ** (1 / temperature) / (p ** (1 / temperature) + (1 - p) ** (1 / temperature))
        return "Yes" if _unit("seed", seed) < yes else "No"

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"][1]["text"]
        caption = prompt.split('reads: "', 1)[1].rsplit('". Is the meme', 1)[0]
        text = self.answer(caption, body["temperature"], body.get("seed"))
        self.requests.append((caption, body["temperature"], body.get("seed"), text))
        p = 0.05 + 0.9 * _unit("caption", caption)  # the logprobs say what it might have said, not what it said
        top = [{"token": "Yes", "logprob": math.log(p)}, {"token": "No", "logprob": math.log(1 - p)}]
        payload = json.dumps(_reply(text, top)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def sampling_endpoint():
    SamplingEndpoint.requests = []
    server = _serve(SamplingEndpoint)
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_a_hosted_sample_is_the_word_the_server_sampled_with_the_keyed_seed(sampling_endpoint):
    card = ModelCard(name="fake-sampled", architecture="hosted", classes=("non-hateful", "hateful"),
                     network=Network(params={"base_url": sampling_endpoint, "model": "fake-vlm",
                                             "requests_per_second": 0, "timeout_s": 5.0}),
                     scoring=Scoring(samples=6, temperature=0.8))
    detector = load_detector(card)
    keys = sample_keys(0, ["a", "b"], "clean")
    captions = ["love wins", "go back home"]
    answers = detector.sample_answers([np.zeros((8, 8, 3), np.uint8)] * 2, captions, keys, detector.sampling)
    assert [r[2] for r in SamplingEndpoint.requests] == [request_seed(k, j) for k in keys for j in range(6)]
    assert {r[1] for r in SamplingEndpoint.requests} == {0.8}
    words = {"Yes": 1, "No": 0}
    expected = [[words.get(SamplingEndpoint.answer(c, 0.8, request_seed(k, j)), DECLINED) for j in range(6)]
                for c, k in zip(captions, keys)]
    assert answers.tolist() == expected


def test_a_hosted_model_sampled_end_to_end_reports_the_figures_and_a_rerun_sends_nothing(pytester, sampling_endpoint,
                                                                                         tmp_path):
    card = tmp_path / "fake-sampled.toml"
    card.write_text(f'name = "fake-sampled"\narchitecture = "hosted"\nclasses = ["non-hateful", "hateful"]\n'
                    f'samples = 5\ntemperature = 0.8\n[params]\nbase_url = "{sampling_endpoint}"\n'
                    f'model = "fake-vlm"\nrequests_per_second = 0\n')
    pytester.makefile(".toml", **{"memerobust-sampled": SUITE})
    args = [f"--memerobust-model={card}", *QUICK, f"--memerobust-cache-dir={tmp_path / 'cache'}",
            "memerobust-sampled.toml"]
    first = pytester.runpytest(*args, f"--memerobust-report={tmp_path / 'a.json'}")
    assert first.ret == 0, first.stdout.str()
    sent = list(SamplingEndpoint.requests)
    assert len(sent) == 8 * 2 * 5  # memes x (clean, typos) x samples, each asked once
    assert len({seed for _, _, seed, _ in sent}) == len(sent) and {t for _, t, _, _ in sent} == {0.8}
    assert f"fake-sampled: {len(sent)} requests to {sampling_endpoint}" in first.stdout.str()
    second = pytester.runpytest(*args, f"--memerobust-report={tmp_path / 'b.json'}")
    assert len(SamplingEndpoint.requests) == len(sent), "the second run asked the endpoint again"
    assert "fake-sampled: 0 requests" in second.stdout.str() and f"{len(sent)} answers from the response cache" \
        in second.stdout.str()
    blocks = _sampling_blocks(tmp_path / "a.json")
    assert blocks == _sampling_blocks(tmp_path / "b.json")
    for block in blocks.values():
        assert block["k"] == 5
        _sane(block)
    refused = np.mean([text.startswith("I'm sorry") for *_, text in sent])  # the same number of requests each
    assert (blocks["clean"]["declined_rate"] + blocks["text=typos@3"]["declined_rate"]) / 2 == pytest.approx(refused)
    assert blocks["clean"]["consistency_rate"] < 1 and 0 < blocks["clean"]["self_flip_rate"]

