"""A condition: what a case perturbs (clean, text-only, image-only, combined, a prompt edit, behind a defence)."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .registry import split_parameters

# `:` in a name: a namespace (textattack:pwws); `:key=value,...` after the severity: an attack's parameters
# (image=apgd_ce@4:restarts=5), kept in the side's name as the registry spells it (apgd_ce:restarts=5)
_SIDE = re.compile(r"^(text|image|prompt)=([A-Za-z0-9_.:\-]+)(?:@(\d+))?(?::([a-z_]+=\d+(?:,[a-z_]+=\d+)*))?$")
_DEFENCE_SIDE = re.compile(r"^defence=([A-Za-z0-9_.:\-]+(?:,[A-Za-z0-9_.:\-]+)*)$")
_SOURCE_SIDE = re.compile(r"^from=([A-Za-z0-9_.:\-]+)$")


@dataclass(frozen=True)
class Condition:
    """Clean, text-only, image-only or combined; `prompt` rewords a prompted detector's instruction (alone or with
    the other two). Its `id` reads like `text=typos@3+image=gaussian_noise@3` or `prompt=paraphrase@2+image=...`."""

    text: str | None = None
    text_severity: int | None = None
    image: str | None = None
    image_severity: int | None = None
    prompt: str | None = None  # a prompt edit (perturb/prompts.PROMPT_EDITS)
    prompt_severity: int | None = None
    defence: str | None = None  # a text defence's id ("nfkc+confusables", defences.Defence): captions normalised
    # the model the condition's attacks are crafted on, when not the detector evaluated (transfer between detectors)
    source: str | None = None

    @property
    def undefended(self) -> "Condition":
        """The same condition without its defence: what the defence is measured against."""
        return replace(self, defence=None)

    @property
    def kind(self) -> str:
        if self.prompt:
            return "prompt"
        if self.text and self.image:
            return "combined"
        return "text" if self.text else "image" if self.image else "clean"

    @staticmethod
    def _side(modality: str, name: str | None, severity: int | None) -> str | None:
        if name is None:
            return None
        base, parameters = _parameters(name)
        return f"{modality}={base}" + (f"@{severity}" if severity is not None else "") + parameters

    @property
    def id(self) -> str:
        sides = [s for s in (self._side("text", self.text, self.text_severity),
                             self._side("image", self.image, self.image_severity),
                             self._side("prompt", self.prompt, self.prompt_severity)) if s]
        if self.defence:  # `+` joins the sides, so the defence's normalisers are joined by `,` here
            sides.append(f"defence={self.defence.replace('+', ',')}")
        if self.source:
            sides.append(f"from={self.source}")
        return "+".join(sides) or "clean"

    @property
    def test_name(self) -> str:
        """The case's pytest name, e.g. `typos-3+uap-3`: a whole `-k` expression (pytest's `-k` grammar has no `@`
        or `=`), and unambiguous because a perturbation's name belongs to one modality."""
        sides = [_parameters(name)[0] + (f"-{severity}" if severity is not None else "")
                 + _parameters(name)[1].replace(":", "-").replace("=", "").replace(",", "-")
                 for name, severity in ((self.text, self.text_severity), (self.image, self.image_severity),
                                        (self.prompt, self.prompt_severity)) if name]
        return "+".join(sides + ["defended"] * bool(self.defence)
                        + [f"from-{self.source}"] * bool(self.source)) or "clean"

    @classmethod
    def parse(cls, condition_id: str) -> "Condition":
        if condition_id == "clean":
            return cls()
        values: dict = {}
        for part in condition_id.split("+"):
            defence = _DEFENCE_SIDE.match(part.strip())
            if defence and "defence" not in values:
                values["defence"] = defence.group(1).replace(",", "+")
                continue
            source = _SOURCE_SIDE.match(part.strip())
            if source and "source" not in values:
                values["source"] = source.group(1)
                continue
            match = _SIDE.match(part.strip())
            if not match or match.group(1) in values:
                raise ValueError(f"bad condition {condition_id!r}: expected e.g. 'text=typos@3+image=contrast@2' "
                             f"(and '+defence=nfkc,confusables' for a defended one)")
            modality, name, severity, parameters = match.groups()
            values[modality] = f"{name}:{parameters}" if parameters else name
            values[f"{modality}_severity"] = int(severity) if severity else None
        return cls(**values)



def _parameters(name: str) -> tuple[str, str]:
    """An attack's name and its parameters as a condition id writes them after the severity:
    `apgd_ce:restarts=5` -> ("apgd_ce", ":restarts=5"); a name without parameters -> (name, "")."""
    base, tail = split_parameters(name)
    return base, ":" + tail if tail else ""


def attack_conditions(conditions) -> frozenset:
    """The conditions with a white-box or score-based attack on a side (a registered perturbation that needs the
    model): their accuracy is compared as accuracy under attack."""
    from . import registry

    attacks = set()
    for condition in conditions:
        if condition == "clean":
            continue
        try:
            parsed = Condition.parse(condition)
        except ValueError:
            continue
        for name in (parsed.text, parsed.image, parsed.prompt):
            if not name:
                continue
            try:
                if registry.get(name).needs_model:
                    attacks.add(condition)
            except (KeyError, ValueError, LookupError):
                continue
    return frozenset(attacks)
