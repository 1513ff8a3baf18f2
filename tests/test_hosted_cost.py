"""A hosted model's requests known before the first (issue 50): Square, the ensemble and the joint attack sent 14,288
requests for 16 memes with no estimate before the run. The estimate bounds what each attack really sends (counted
at a 127.0.0.1 server), and a card's `max_requests` refuses a run beyond it before any request."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_memerobust.engine import Condition
from test_hosted import FakeEndpoint, card, endpoint  # noqa: F401  (the fixture)
from test_hosted_edges import Scripted, _card_file, scripted  # noqa: F401  (the fixture)


def test_a_case_costs_its_attack_queries_and_its_samples():
    from pytest_memerobust.detectors.hosted_cost import case_requests, estimate, fit_queries
    from pytest_memerobust.perturb.attacks import HOTFLIP_STEPS
    from pytest_memerobust.perturb.image_attacks import SQUARE_QUERIES

    captions = ["one two three", "a b"]  # 3 words and none (words are 2+ letters)
    assert case_requests(Condition.parse("text=typos@3"), captions, samples=5) == 10
    steps = HOTFLIP_STEPS[1]
    assert case_requests(Condition.parse("text=hotflip@2"), captions) == \
        (1 + steps * (1 + 3 + 24)) + (1 + steps * (1 + 0 + 24)) + 2
    assert case_requests(Condition.parse("image=square@1"), captions) == 2 * (SQUARE_QUERIES + 1) + 2
    assert case_requests(Condition.parse("image=pgd_linf@1"), captions) == 2  # white box: it asks nothing
    assert fit_queries("universal_trigger", 2) == 64 * (1 + 2 * 2 * 16)  # find_trigger's defaults
    cases = [("c1", "m", "demo", Condition.parse("text=typos@3"), captions, 1),
             ("c2", "m", "demo", Condition(), captions, 1),
             ("c3", "m", "demo", Condition.parse("text=universal_trigger@1"), captions, 1),
             ("c4", "m", "demo", Condition.parse("text=universal_trigger@1+image=zoom_blur@1"), captions, 1)]
    rows, total = estimate(cases)
    trigger = fit_queries("universal_trigger", 1)
    assert rows == [("c1", 2 + 2), ("c2", 0), ("c3", 2 + trigger), ("c4", 2)] and total == 8 + trigger


def test_the_estimate_bounds_what_each_attack_sends(endpoint, monkeypatch):  # noqa: F811
    """Counted at the server: Square's estimate is what it sends (12 queries and one judgement a meme), HotFlip's and
    the joint attack's (which stop early once a meme is fooled or no edit helps) at least what they send."""
    import torch

    from pytest_memerobust.detectors import load_detector
    from pytest_memerobust.detectors.hosted_cost import attack_queries
    from pytest_memerobust.perturb import get, image_attacks
    from pytest_memerobust.perturb.attacks import AttackContext, CleanInputs

    monkeypatch.setattr(image_attacks, "SQUARE_QUERIES", 12)
    detector = load_detector(card(endpoint))
    pictures = [torch.full((3, 16, 16), 100, dtype=torch.uint8), torch.full((3, 16, 16), 30, dtype=torch.uint8)]
    captions, ids = ["yes they are", "yes those people"], ["a", "b"]
    for name, severity in (("square", 2), ("strongest_image", 1), ("hotflip", 2), ("co_attack", 1)):
        FakeEndpoint.requests.clear()
        FakeEndpoint.seen = set()
        context = AttackContext(detector, np.array([1, 1]), CleanInputs(None, pictures, captions), ids=ids)
        items = captions if get(name).modality == "text" else pictures
        get(name).apply(items, ids, severity, 0, context)
        bound = sum(attack_queries(name, severity, c) for c in captions)
        assert 0 < len(FakeEndpoint.requests) <= bound, (name, len(FakeEndpoint.requests), bound)
        if name == "square":  # this server reads the caption alone: Square finds nothing and spends it all
            assert len(FakeEndpoint.requests) == bound == 2 * (12 + 1)


SELECTION = ["--memerobust-limit=8", "-p", "no:cacheprovider", "--memerobust-bootstrap=20",
             "-k", "rainbow and (typos-3 or imagenet_c-3) and not hotflip and not universal and not uap"]


def test_a_run_beyond_its_cards_max_requests_is_refused_before_any_request(pytester, scripted):
    model = _card_file(pytester.path / "capped.toml", scripted, requests_per_second=0, max_requests=30)
    result = pytester.runpytest(f"--memerobust-model={model}", *SELECTION)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*model card 'fake-hosted': the 5 selected cases would send up to 48 requests to "
                                 "http://127.0.0.1:*/v1, more than its max_requests = 30; the largest: "
                                 "rainbow-noise::fake-hosted::typos-3 (16), *Select fewer cases*"])
    assert Scripted.log == []


def test_the_estimate_is_said_before_the_first_case_and_bounds_the_run(pytester, scripted):
    model = _card_file(pytester.path / "said.toml", scripted, requests_per_second=0, max_requests=48)
    result = pytester.runpytest(f"--memerobust-model={model}", *SELECTION)
    assert result.ret == 0, result.stdout.str()
    lines = result.stdout.lines
    said = next(k for k, line in enumerate(lines) if "fake-hosted: its 5 cases send at most 48 requests" in line)
    assert said < next(k for k, line in enumerate(lines) if line.startswith("rainbow-noise "))  # before any case
    assert 0 < len(Scripted.log) <= 48
