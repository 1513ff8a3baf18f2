"""The contract every registered adaptation method keeps (detectors/training/adaptation_methods.py): a frozen spec
whose `to_dict()` reads back into an equal spec, whose unknown options are refused by name, and which applies
itself to a tiny encoder and reloads from its checkpoint; the built-ins' serialised specs are byte for byte those
the dict specs wrote before, and a third party's method joins through the entry-point group."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from pytest_memerobust.detectors import ModelCard, Network, load_detector
from pytest_memerobust.detectors.checkpoints import load_state_dict, save_state_dict
from pytest_memerobust.detectors.training import adaptation_methods
from pytest_memerobust.detectors.training.adaptation import adapt
from pytest_memerobust.detectors.training.adaptation_methods import (
    AdaptationSpec, HeadSpec, option, parse_adaptation, positive, register, registered)
from pytest_memerobust.errors import ConfigError
from tiny_backbones import save_tiny_bert

METHODS = list(registered())
CAPTIONS = ["a cat sitting on a mat", "they are all the same, send them back", "happy pride month friends"]
# the tiny BERT is 32 wide: Compacter's 4 Kronecker factors need a bottleneck they divide (32 // 4 = 8)
TINY_SPECS = {"compacter": "compacter:reduction=4,phm=4"}
# What the dict specs wrote into checkpoint metadata before they were classes (json.dumps of parse_adaptation's).
WRITTEN_BEFORE = {
    "head": '{"method": "head"}',
    "linear": '{"method": "linear"}',
    "adapter": '{"method": "adapter", "reduction": 16}',
    "compacter": '{"method": "compacter", "reduction": 16, "phm": 4}',
    "lora": '{"method": "lora", "rank": 8, "alpha": 16, "dropout": 0.0, "targets": ["query", "key", "value", '
            '"attention_output", "mlp_in", "mlp_out"]}',
    "prompt": '{"method": "prompt", "tokens": 16}',
    "full": '{"method": "full"}',
}


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("bert") / "bert", seed=0)


def test_the_built_ins_are_registered_first_in_their_documented_order():
    assert METHODS[:7] == ["head", "linear", "adapter", "compacter", "lora", "prompt", "full"]


@pytest.mark.parametrize("name", METHODS)
def test_each_method_round_trips_through_its_dict_and_json(name):
    spec = parse_adaptation(name)
    assert isinstance(spec, AdaptationSpec) and spec.name == name and type(spec) is registered()[name]
    recorded = spec.to_dict()
    assert next(iter(recorded)) == "method" and recorded["method"] == name
    assert parse_adaptation(recorded) == spec
    assert parse_adaptation(json.loads(json.dumps(recorded))) == spec
    assert parse_adaptation(spec) is spec
    assert spec.describe().startswith(name)
    first = dataclasses.fields(spec)[0].name if dataclasses.fields(spec) else None
    if first is not None:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(spec, first, getattr(spec, first))


@pytest.mark.parametrize("name", METHODS)
def test_each_method_refuses_an_unknown_option_naming_it(name):
    keys = ", ".join(f.name for f in dataclasses.fields(registered()[name])) or "none"
    for value in ({"method": name, "bogus": 1}, f"{name}:bogus=1"):
        with pytest.raises(ConfigError) as info:
            parse_adaptation(value)
        assert str(info.value) == f"adaptation {name!r}: unknown key(s) bogus; its keys: {keys}"


@pytest.mark.parametrize("name", METHODS)
def test_each_method_applies_to_a_tiny_encoder_and_reloads_from_its_checkpoint(name, tiny_bert, tmp_path):
    card = ModelCard(name="tiny", architecture="memeblip2", classes=("non-hateful", "hateful"),
                     network=Network(params={"map_dim": 32}, backbone={"kind": "minilm", "name": str(tiny_bert)}))
    detector = load_detector(card)
    spec = parse_adaptation(TINY_SPECS.get(name, name))
    adaptation = adapt(detector, spec, seed=0)
    assert adaptation.spec is spec and adaptation.method == name and detector.adaptation is adaptation
    assert adaptation.encoders_trainable == spec.trains_encoders
    assert adaptation.trainable_parameters == sum(p.numel() for p in adaptation.parameters()) > 0
    assert adaptation.describe().startswith(f"adaptation {spec.describe()}, ")
    before = detector.predict_proba([None] * len(CAPTIONS), CAPTIONS)
    path = tmp_path / f"{name}.safetensors"
    save_state_dict(detector.shipped_state(), path, detector.checkpoint_metadata())
    assert json.loads(load_state_dict(path)[1]["adaptation"]) == spec.to_dict()
    reloaded = load_detector(card, checkpoint=path)
    assert reloaded.adaptation.spec == spec
    assert torch.equal(torch.as_tensor(reloaded.predict_proba([None] * len(CAPTIONS), CAPTIONS)),
                       torch.as_tensor(before))


@pytest.mark.parametrize("name", list(WRITTEN_BEFORE))
def test_a_built_in_spec_is_written_as_the_dict_specs_were_and_reads_their_metadata_back(name):
    spec = parse_adaptation(json.loads(WRITTEN_BEFORE[name]))
    assert spec == parse_adaptation(name)
    assert json.dumps(spec.to_dict()) == WRITTEN_BEFORE[name]


def test_lora_options_keep_their_types_as_the_dict_specs_did():
    spec = parse_adaptation({"method": "lora", "rank": 4, "alpha": 8, "dropout": 0, "targets": "query"})
    assert spec.to_dict() == {"method": "lora", "rank": 4, "alpha": 8, "dropout": 0.0, "targets": ["query"]}
    assert isinstance(spec.to_dict()["dropout"], float) and isinstance(spec.to_dict()["alpha"], int)
    assert parse_adaptation("lora:targets=value+query").targets == ("value", "query")


def test_a_third_partys_method_joins_through_the_entry_point_group(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class TemperedHeadSpec(HeadSpec):
        """The head with its logits tempered (a third party's method, for this test)."""

        name = "tempered"
        temperature: float = option(1.0, positive)

    class EntryPoint:
        def load(self):
            return TemperedHeadSpec

    monkeypatch.setattr(adaptation_methods, "_REGISTRY", dict(adaptation_methods._REGISTRY))
    monkeypatch.setattr(adaptation_methods, "_entry_points_loaded", False)
    monkeypatch.setattr(adaptation_methods, "entry_points",
                        lambda group: [EntryPoint()] if group == "pytest_memerobust.adaptations" else [])
    assert list(registered())[-1] == "tempered"
    spec = parse_adaptation("tempered:temperature=2.5")
    assert spec == TemperedHeadSpec(2.5) and spec.to_dict() == {"method": "tempered", "temperature": 2.5}
    with pytest.raises(ConfigError, match=r"adaptation 'tempered' temperature = 0: expected a positive number"):
        parse_adaptation("tempered:temperature=0")
    with pytest.raises(ConfigError, match="valid: head, linear, adapter, compacter, lora, prompt, full, tempered"):
        parse_adaptation("tempred")

    @dataclasses.dataclass(frozen=True)
    class Impostor(HeadSpec):
        name = "lora"

    with pytest.raises(ValueError, match="'lora' is already registered"):
        register(Impostor)
