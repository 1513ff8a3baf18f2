"""The `memerobust` fixture's object: evaluate a condition by keyword in a hand-written test."""
from __future__ import annotations

from .perturb.conditions import Condition
from .judge.results import ConditionResult


class Probe:
    def __init__(self, session, model: str, data: str | None = None):
        self.session, self.model, self.data = session, model, data

    @property
    def detector(self):
        return self.session.detector(self.model)

    @property
    def dataset(self):
        return self.session.dataset(self.session.data_spec(self.data))

    @property
    def task(self) -> str:
        return self.session.task(self.model)

    def using(self, model: str | None = None, data: str | None = None) -> "Probe":
        """The same probe on another model or dataset (both stay in the shared session and its report)."""
        return Probe(self.session, model or self.model, data or self.data)

    def evaluate(self, text: str | None = None, image: str | None = None, severity: int | None = None, *,
                 text_severity: int | None = None, image_severity: int | None = None) -> ConditionResult:
        """`severity` applies to both sides unless a side's own severity is given."""
        condition = Condition(
            text=text, text_severity=(text_severity or severity) if text else None,
            image=image, image_severity=(image_severity or severity) if image else None,
        )
        return self.session.evaluate(self.model, condition, data=self.data)

    def clean(self) -> ConditionResult:
        return self.session.evaluate(self.model, Condition(), data=self.data)
