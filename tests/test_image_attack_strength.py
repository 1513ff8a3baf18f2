"""The image attacks at full strength: APGD judged on the rounded picture, PGD-L2 rounding that keeps its budget,
restarts and query budgets as parameters of an attack's name, APGD in L2, APGD-T on a task of three classes, and
AutoAttack's sequence (less FAB-T) as `autoattack`."""
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from pytest_memerobust.data import demo_dataset
from pytest_memerobust.detectors import load_detector
from pytest_memerobust.detectors.demo import DemoDetector
from pytest_memerobust.errors import ConfigError, SuiteError, UnknownNameError
from pytest_memerobust.perturb import get, image_attacks
from pytest_memerobust.perturb.attacks import AttackContext, CleanInputs
from pytest_memerobust.perturb.conditions import Condition
from pytest_memerobust.perturb.image_attacks import L2_RMS_LEVELS, LINF_LEVELS, to_picture

from test_image_attacks import short_attacks  # noqa: F401  (autouse: test-sized APGD and Square budgets)


@pytest.fixture(scope="module")
def world():
    return load_detector("memeblip2-tda"), demo_dataset("test").head(8).memes


@pytest.fixture(scope="module")
def three_classes():
    """An untrained demo head of three classes (weights from torch's seed 0); a meme's true class is its own clean
    prediction, so every meme starts right and each one fooled is the attack's."""
    torch.manual_seed(0)
    detector = DemoDetector(["a", "b", "c"])
    memes = demo_dataset("test").head(8).memes
    labels = np.asarray(detector.predict_proba([m.picture() for m in memes], [m.text for m in memes])).argmax(1)
    return detector, memes, labels


def _context(detector, memes, labels=None):
    labels = np.asarray([m.labels["hate"] for m in memes]) if labels is None else labels
    clean = CleanInputs(None, [m.picture() for m in memes], captions=[m.text for m in memes])
    return AttackContext(detector, labels, clean, ids=[m.id for m in memes], seed=0)


def _attack(name, detector, memes, severity, labels=None):
    """(pictures, records by row) of attack `name` on the memes, all in one batch."""
    context = _context(detector, memes, labels)
    out = get(name).apply([m.picture() for m in memes], [m.id for m in memes], severity, 0, context)
    return out, context.outcomes[("image", name, severity)]


# --- PGD-L2 keeps its budget through rounding ---------------------------------------------------------------------

def test_l2_rounding_gives_back_only_the_smallest_changes_and_keeps_nearly_all_the_budget():
    rng = np.random.default_rng(0)
    x0 = torch.from_numpy(rng.integers(0, 256, size=(1, 3, 32, 32)).astype(np.float32))
    eps = 0.5 * np.sqrt(3 * 32 * 32)
    direction = torch.from_numpy(rng.standard_normal(size=(1, 3, 32, 32)).astype(np.float32))
    x = (x0 + direction / direction.norm() * eps).clamp(0, 255)
    picture = to_picture(x, x0, eps, "l2").float()[None]
    delta = picture - x0
    assert float(torch.round(x).sub(x0).norm()) > eps  # rounding alone leaves the ball: the case the fix is for
    assert 0.99 * eps <= float(delta.norm()) <= eps
    kept = picture == torch.round(x).clamp(0, 255)
    assert bool((kept | (picture == x0)).all())  # each value is rounded or given back, nothing else
    given_back = ~kept
    # what was given back moved less (as a float change) than anything kept that moved more than half a level
    assert float((x - x0).abs()[given_back].max()) <= float((x - x0).abs()[kept & (delta != 0)].min()) + 1e-5


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_pgd_l2_pictures_keep_at_least_95_percent_of_the_budget_their_float_point_used(world, severity, monkeypatch):
    """Rounding costs at most 5% of the budget; where the float point itself stops short (the projection's clamp to
    0..255 on a picture with saturated values), the picture keeps what the float point used."""
    detector, memes = world
    floats = []
    real = image_attacks.to_picture

    def spy(x, x0, eps, norm):
        floats.append(float((x - x0).norm()))
        return real(x, x0, eps, norm)

    monkeypatch.setattr(image_attacks, "to_picture", spy)
    pictures, _ = _attack("pgd_l2", detector, memes[:4], severity)
    binding = 0
    for meme, attacked, reached in zip(memes, pictures, floats):
        clean = meme.picture()
        eps = L2_RMS_LEVELS[severity - 1] * np.sqrt(clean.numel())
        norm = float((attacked.float() - clean.float()).norm())
        assert min(reached, 0.95 * eps) <= norm <= eps + 1e-6, (norm / eps, reached / eps)
        binding += reached >= 0.999 * eps
    assert binding >= 1  # where the budget binds, rounding kept 95% of it


# --- APGD judged on the rounded picture ----------------------------------------------------------------------------

def test_apgd_returns_the_best_rounded_picture_it_judged_and_stops_only_when_one_fools(world, monkeypatch):
    detector, memes = world
    context = _context(detector, memes)
    judged = []
    real = image_attacks.picture_margin

    def recording(target, picture):
        value = real(target, picture)
        judged.append((picture.clone(), value))
        return value

    monkeypatch.setattr(image_attacks, "picture_margin", recording)
    ran_on = 0
    for target, meme in zip(image_attacks.targets(context, range(len(memes))), memes):
        judged.clear()
        attacked, record = image_attacks.apgd(target, meme.picture(), 1.0, "ce", np.random.default_rng(0), steps=20)
        values = [v for _, v in judged]
        best = int(np.argmin(values))
        assert record["margin"] == values[best] == real(target, attacked)
        assert torch.equal(attacked, judged[best][0])
        assert attacked.dtype == torch.uint8
        if values[best] < 0:  # the first rounded success ends the run
            assert best == len(values) - 1 and all(v >= 0 for v in values[:-1])
        else:
            assert len(values) == 21  # the start and every step
        ran_on += len(values) > 1
    assert ran_on >= 2


def test_apgd_in_l2_stays_in_its_ball_and_moves_the_margin_down(world):
    detector, memes = world
    severity = 2
    pictures, records = _attack("apgd_l2", detector, memes[:4], severity)
    context = _context(detector, memes[:4])
    for row, (meme, attacked) in enumerate(zip(memes, pictures)):
        clean = meme.picture()
        eps = L2_RMS_LEVELS[severity - 1] * np.sqrt(clean.numel())
        assert float((attacked.float() - clean.float()).norm()) <= eps + 1e-6
        target = image_attacks.targets(context, [row])[0]
        assert image_attacks.picture_margin(target, attacked) < image_attacks.picture_margin(target, clean)


# --- parameters: restarts and query budgets ------------------------------------------------------------------------

def test_a_condition_carries_an_attack_s_parameters_after_its_severity():
    condition = Condition.parse("image=apgd_ce@4:restarts=5")
    assert (condition.image, condition.image_severity) == ("apgd_ce:restarts=5", 4)
    assert condition.id == "image=apgd_ce@4:restarts=5" and Condition.parse(condition.id) == condition
    assert condition.test_name == "apgd_ce-4-restarts5"
    both = Condition.parse("text=textattack:pwws@2+image=square@3:queries=5000")
    assert (both.text, both.image) == ("textattack:pwws", "square:queries=5000")
    assert both.id == "text=textattack:pwws@2+image=square@3:queries=5000"


def test_parameters_name_one_attack_each_and_bad_ones_are_refused_naming_the_culprit():
    assert get("pgd_linf:restarts=1") is get("pgd_linf")  # the default is the plain attack
    five = get("square:restarts=5,queries=5000")
    assert five is get("square:queries=5000,restarts=5")
    assert five.name == "square:queries=5000,restarts=5" and five.family == "square"
    assert five.rng(0, "m1", 3).integers(1 << 30) == get("square").rng(0, "m1", 3).integers(1 << 30)
    with pytest.raises(UnknownNameError, match="unknown parameter of 'apgd_ce' 'steps'.*known: restarts"):
        get("apgd_ce:steps=5")
    with pytest.raises(UnknownNameError, match="restarts is a whole number from 1 to 100"):
        get("apgd_ce:restarts=0")
    with pytest.raises(UnknownNameError, match="'gaussian_noise'.*it takes none"):
        get("gaussian_noise:restarts=2")


def test_a_suite_sets_restarts_and_query_budgets_in_its_image_table_and_grid():
    from pytest_memerobust.run.suite import parse_suite

    text = ('[suite]\nname = "strong"\n[image]\n"square:queries=5000" = [1]\n"apgd_ce:restarts=5" = [4]\n'
            '[grid]\ntext = ["typos@1"]\nimage = ["pgd_linf@2:restarts=3"]\n')
    suite = parse_suite(tomllib.loads(text), Path("strong.toml"))
    ids = {c.id for c in suite.conditions}
    assert {"image=square@1:queries=5000", "image=apgd_ce@4:restarts=5",
            "text=typos@1+image=pgd_linf@2:restarts=3"} <= ids
    with pytest.raises(SuiteError, match="restarts is a whole number"):
        parse_suite(tomllib.loads(text.replace("restarts=5", "restarts=500")), Path("strong.toml"))


def test_one_restart_is_the_plain_attack_and_more_restarts_never_fool_fewer(world):
    detector, memes = world
    plain, plain_records = _attack("pgd_linf", detector, memes, 1)
    more, records = _attack("pgd_linf:restarts=3", detector, memes, 1)
    halves = (_attack("pgd_linf:restarts=3", detector, memes[:3], 1)[0]
              + _attack("pgd_linf:restarts=3", detector, memes[3:], 1)[0])
    for row, (a, b, again) in enumerate(zip(plain, more, halves)):
        assert torch.equal(b, again)  # the same bytes in any batch
        assert int((b.int() - memes[row].picture().int()).abs().max()) <= LINF_LEVELS[0]
        if plain_records[row]["success"]:
            assert records[row]["success"] and records[row]["restarts_run"] == 1 and torch.equal(a, b)
        elif not records[row]["success"]:
            assert records[row]["restarts_run"] == 3
    assert sum(r["success"] for r in records.values()) >= sum(r["success"] for r in plain_records.values())


def test_square_stops_at_its_query_budget(world):
    detector, memes = world
    _, records = _attack("square:queries=30", detector, memes[:4], 1)
    assert all(1 <= r["queries"] <= 30 for r in records.values())
    assert any(r["queries"] == 30 and not r["success"] for r in records.values())


# --- APGD-T and autoattack ------------------------------------------------------------------------------------------

def test_the_targeted_dlr_loss_is_croce_and_hein_s():
    logits = torch.tensor([[4.0, 1.0, 3.0, 0.0]])
    # -(z_y - z_t) / (z_pi1 - (z_pi3 + z_pi4) / 2), y = 0, t = 2: -(4 - 3) / (4 - (1 + 0) / 2)
    assert float(image_attacks._loss("dlr_t", logits, 0, 2)) == pytest.approx(-1 / 3.5)
    three = torch.tensor([[4.0, 1.0, 3.0]])  # three classes: DLR's own denominator z_pi1 - z_pi3
    assert float(image_attacks._loss("dlr_t", three, 0, 2)) == pytest.approx(-1 / 3.0)


def test_apgd_t_fools_a_three_class_task_and_refuses_a_two_class_one(three_classes, world):
    detector, memes, labels = three_classes
    pictures, records = _attack("apgd_t", detector, memes, 2, labels)
    assert sum(r["success"] for r in records.values()) >= 2
    context = _context(detector, memes, labels)
    for target, meme, attacked in zip(image_attacks.targets(context, range(len(memes))), memes, pictures):
        assert int((attacked.int() - meme.picture().int()).abs().max()) <= LINF_LEVELS[1]
        assert image_attacks.picture_margin(target, attacked) < image_attacks.picture_margin(target, meme.picture())
    two_class, two_memes = world
    with pytest.raises(ConfigError, match="three classes or more; this one has 2"):
        _attack("apgd_t", two_class, two_memes[:1], 2)


def test_autoattack_runs_apgd_t_on_three_classes_and_is_never_weaker_than_its_members(three_classes):
    detector, memes, labels = three_classes
    fooled = {}
    for name in ("apgd_ce", "apgd_t", "square", "autoattack:queries=60"):
        _, records = _attack(name, detector, memes, 1, labels)
        fooled[name] = {row for row, record in records.items() if record["success"]}
        if name.startswith("autoattack"):
            tried = [r["tried"] for r in records.values()]
    assert fooled["apgd_ce"] | fooled["apgd_t"] | fooled["square"] <= fooled["autoattack:queries=60"]
    assert all(t[:1] == ["apgd_ce"] for t in tried)
    assert any(t[:2] == ["apgd_ce", "apgd_t"] for t in tried) or all(len(t) == 1 for t in tried)


def test_autoattack_on_two_classes_runs_apgd_ce_then_square(world):
    detector, memes = world
    _, records = _attack("autoattack:queries=60", detector, memes[:4], 1)
    assert all(r["tried"] in (["apgd_ce"], ["apgd_ce", "square"]) for r in records.values())


def test_a_hosted_run_s_request_estimate_reads_the_query_budget_an_attack_s_name_sets(monkeypatch):
    from pytest_memerobust.detectors.hosted_cost import attack_queries

    monkeypatch.setattr(image_attacks, "SQUARE_QUERIES", 500)  # (the shipped default, whatever the fixture set)
    assert attack_queries("square", 1, "a caption") == 501
    assert attack_queries("square:queries=5000,restarts=2", 1, "a caption") == 2 * 5000 + 1
    assert attack_queries("strongest_image:queries=40", 1, "a caption") == 42
    assert attack_queries("autoattack", 1, "a caption") == 5002
    assert attack_queries("autoattack:queries=60", 1, "a caption") == 62
