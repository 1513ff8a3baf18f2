"""Apply a condition's perturbations and run the detector, encoding each distinct side of a condition once.

For a split detector, image features are keyed by the image side of a condition (clean, or one perturbation at one
severity) and text features by the text side, so a text-only condition reuses the clean image features and a
combined condition reuses both sides computed for the single-channel ones.

The engine is a façade over three parts, each in its own module: the sides' inputs and held features (sides.py,
shared by engines of the same encoders), asking the detector in batches (encoding.py) and what the attacks need and
leave (attack_state.py). It decides which side a condition asks for and how it is computed.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from ..data.meme import Dataset, unlabelled
from ..data.ocr import read_texts
from ..detectors.base import is_split
from ..determinism import fixed_threads
from ..perturb import get as get_perturbation
from .attack_state import AttackState
from ..perturb.conditions import Condition
from .encoding import Encoding, EncodingSettings
from .features import FeatureStore
from .shards import Evaluated
from .sides import PREFETCH_SIDES, Sides, side_stream


@dataclass(frozen=True)
class Readers:
    """The OCR backends an engine reads pictures with (data/ocr.py): `ocr` reads every condition's captions off its
    pictures, end to end; `text_reader` finds where a clean picture shows its text, for the typographic edits, when
    the dataset does not say (meta[TEXT_BOXES])."""

    ocr: object = None
    text_reader: object = None


@dataclass(frozen=True)
class RunPlace:
    """Where an engine sits in its run: `shards`, how the planned conditions are evaluated (shards.ShardRunner: the
    memes a shard at a time, by an executor; None evaluates each condition over the whole dataset when asked,
    case-major); `recipe`, a picklable callable that builds this engine again in another process (a local pool
    worker or a Ray actor) from the run's options; `label`, what it evaluates (model, data, task, defence), the same
    in every process of a run."""

    shards: object = None
    recipe: Callable | None = None
    label: str = ""


def engine_sides(detector, dataset_or_memes, features: FeatureStore | None = None,
                 memory_limit: int | None = None) -> Sides:
    """The sides of an engine of `detector` over a dataset (or its memes), on the detector's device: encoded inputs
    kept in `features` (default: in memory, for this engine only), condition sides' features held up to
    `memory_limit` bytes (None: no bound; a side dropped is found again in `features` by its inputs' digests)."""
    memes = getattr(dataset_or_memes, "memes", dataset_or_memes)
    return Sides(list(memes), str(getattr(detector, "device", "cpu")),
                 features or FeatureStore(namespace=f"memory:{id(detector)}"), memory_limit)


def channels_read(detector, by_ocr: bool) -> tuple[str, ...]:
    """The channels a perturbation reaches `detector` through: its own, and the picture too when it reads captions
    by OCR (the deployed pipeline: picture -> OCR -> caption classifier)."""
    modalities = tuple(getattr(detector, "modalities", ("image", "text")))
    if by_ocr and "text" in modalities and "image" not in modalities:
        return ("image", *modalities)
    return modalities


class Engine:
    """Evaluates conditions for one detector on one dataset; `encoder_calls` counts inputs actually encoded."""

    def __init__(self, detector, dataset: Dataset, seed: int = 0, *, sides: Sides | None = None,
                 asking: EncodingSettings = EncodingSettings(), attacks: AttackState | None = None,
                 readers: Readers = Readers(), place: RunPlace = RunPlace()):
        """An engine from its parts, each built by the caller or left to its default. `sides`: the condition sides'
        inputs and held features (sides.py): another engine's (`other.sides`, e.g. the base of a channel-ablation
        view, whose perturbed inputs and features this one reuses), or one over this dataset with a store shared by
        every engine of these encoders (`engine_sides`); default: this engine's own, in memory. `asking`: how it asks
        the detector (batch size, precision, defence; encoding.py). `attacks`: what its attacks need and leave
        (labels, training memes, cache folder, fitted memo, the detector they are crafted on; attack_state.py).
        `readers`: its OCR backends. `place`: where it sits in the run (shards, the recipe that builds it again in
        another process, its label). `seed` keys every perturbation."""
        self.detector, self.dataset, self.seed = detector, dataset, seed
        self.ocr, self.text_reader, self.defence = readers.ocr, readers.text_reader, asking.defence
        self.shards, self.recipe, self.label = place.shards, place.recipe, place.label
        self.ids = [m.id for m in dataset.memes]
        # pictures live where the detector computes, from decode to encoder
        self.device = str(getattr(detector, "device", "cpu"))
        self.sides = sides if sides is not None else engine_sides(detector, dataset)
        self.encoding = Encoding(detector, self.sides, asking)
        self.attacks = attacks if attacks is not None else AttackState()
        self._sharded = Evaluated()  # what the shard-major passes gave, per condition id
        self._example_shards: dict[int, "Engine"] = {}  # meme -> its one-meme shard (reports' attacked examples)
        self._plan: list[tuple] = []  # the model-free sides planned, in order: what is perturbed ahead
        self._conditions: list[Condition] = []  # the planned conditions, clean first
        self._caption_edits: dict[tuple, dict] = {}  # (text edit, severity) -> caption_edit, once per text side
        self.abstentions: dict[str, np.ndarray] = {}  # condition id -> the memes the detector declined to classify
        self._unread: np.ndarray | None = None  # see `unread`
        # condition id -> [memes, k] answers of a repeat-sampled detector (detectors/sampling.py)
        self.samples: dict[str, np.ndarray] = {}

    @property
    def batch_size(self) -> int:
        """Inputs asked at a time (halved for good once a GPU runs out of memory)."""
        return self.encoding.batch_size

    @property
    def encoder_calls(self) -> dict[str, int]:
        """Inputs actually encoded, by modality (shared with the engines that share these sides)."""
        return self.sides.encoder_calls

    @property
    def features(self) -> FeatureStore:
        """The store of encoded inputs."""
        return self.sides.features

    @property
    def boxless(self) -> dict[str, set[int]]:
        """Typographic edit -> the pictures it met without text boxes."""
        return self.sides.boxless

    def share_pictures(self, other: "Engine") -> None:
        """Use `other`'s decoded clean pictures (an engine of the same memes on the same device, e.g. the
        undefended one beside a defended one): they are decoded once for both."""
        if other.ids != self.ids or other.device != self.device:
            raise ValueError("share_pictures: the engines differ in memes or device")
        self.sides.clean_pictures = other.sides.clean_pictures

    def _key(self, modality: str, name: str | None, severity: int | None, *caption_side) -> tuple:
        """Cache key of one condition side. An attack's output depends on the detector it attacked, so engines that
        share caches (channel-ablation views) keep attacked inputs apart."""
        key = (modality, name, severity, *caption_side)
        if (name is not None and get_perturbation(name).needs_model) or caption_side[:1] == ("joint",):
            return (*key, id(self))
        return key

    def text_side(self, condition: Condition) -> tuple:
        """The text side of a condition; with OCR, the captions are read off the condition's pictures, so the image
        side becomes part of it."""
        side = ("text", condition.text, condition.text_severity)
        if condition.image and get_perturbation(condition.image).traits.rewrites_caption:
            if condition.text or self.ocr is not None:
                raise ValueError(f"{condition.image!r} is a joint attack: it chooses the caption itself, so the "
                                 f"condition can have no other caption side and no OCR reading")
            return ("text", None, None, "joint", condition.image, condition.image_severity)
        if self.ocr is not None:
            image_side = self.image_side(condition)
            if len(image_side) > 3:  # the picture shows the condition's caption (typos drawn in): OCR reads it back,
                return ("text", None, None, "ocr", *image_side[1:])  # and the caption edit is not applied twice
            side += ("ocr", *image_side[1:])
        return side

    def reads(self) -> tuple[str, ...]:
        """The channels a perturbation reaches this engine's detector through (`channels_read`)."""
        return channels_read(self.detector, self.ocr is not None)

    @staticmethod
    def image_side(condition: Condition) -> tuple:
        """The image side of a condition. A picture that shows the condition's caption also depends on the text
        side, which then becomes part of it."""
        side = ("image", condition.image, condition.image_severity)
        if condition.image and get_perturbation(condition.image).traits.caption_source == "condition":
            side += (condition.text, condition.text_severity)
        return side

    def inputs(self, modality: str, name: str | None, severity: int | None, *caption_side) -> list:
        """The dataset's captions or pictures under one perturbation (or clean), computed once. `caption_side`
        (text name, severity) names the captions a caption-drawing image edit draws."""
        key = self._key(modality, name, severity, *caption_side)
        computed = self.sides.inputs
        self.sides.take_pending(key)
        if key not in computed and caption_side[:1] == ("joint",):  # the captions a joint attack chose
            computed[key] = self._joint_captions(*caption_side[1:])
        if key not in computed:
            read = caption_side[:1] == ("ocr",)
            if read:  # captions read off this condition's pictures
                clean = read_texts(self.ocr, self.inputs("image", *caption_side[1:]))
                caption_side = ()
            else:
                clean = self.sides.clean(modality)
            if name is None:
                computed[key] = clean
            else:
                perturbation = get_perturbation(name)
                if perturbation.modality != modality:
                    raise ValueError(f"perturbation {name!r} is a {perturbation.modality} perturbation, not {modality}")
                computed[key] = self._perturbed(perturbation, clean, severity, caption_side)
        return computed[key]

    def _perturbed(self, perturbation, clean: list, severity: int | None, caption_side: tuple) -> list:
        """`clean` (every meme's caption or picture) under `perturbation`. OCR may read nothing off a picture (a blank
        one, or one badly corrupted): an empty caption has nothing to perturb and stays empty (attacks index their
        detector's labels by position, so they get every caption)."""
        rows = ([i for i, text in enumerate(clean) if text.strip()]
                if perturbation.modality == "text" and not perturbation.needs_model else range(len(clean)))
        out = list(clean)
        for i, value in zip(rows, self._apply(perturbation, [clean[i] for i in rows], rows, severity, caption_side)):
            out[i] = value
        return out

    def _joint_captions(self, name: str, severity: int) -> list:
        """The captions joint attack `name` chose with its pictures: kept by the attack when it ran (running it
        here if it has not)."""
        from ..perturb.joint import joint_captions

        rows = range(len(self.ids))
        captions = joint_captions(self.attack_context(), name, severity, rows)
        if captions is None:
            self.inputs("image", name, severity)
            captions = joint_captions(self.attack_context(), name, severity, rows)
        return captions

    @property
    def defence_id(self) -> str | None:
        return None if self.defence is None else self.defence.id

    def clean_picture(self, i: int):
        """Meme `i`'s clean picture on the detector's device: the held one, else decoded alone (nothing kept)."""
        return self.sides.clean_picture(i)

    def plan(self, conditions: Sequence[Condition]) -> None:
        """The conditions this engine will be asked for, in order. While the detector encodes one side, the next
        model-free sides are perturbed in a background thread (attacks wait: they need the detector)."""
        plan = []
        for condition in conditions:
            for modality, name, severity, *rest in (self.image_side(condition),
                                                    ("text", condition.text, condition.text_severity)):
                if name is None or rest:
                    continue
                perturbation = get_perturbation(name)
                key = self._key(modality, name, severity)
                # (an OCR reader, finding text boxes, runs in this thread only)
                reads = perturbation.traits.reads_text_boxes and self.text_reader is not None
                if not (perturbation.needs_model or perturbation.traits.caption_source or reads) and key not in plan:
                    plan.append(key)
        self._plan = plan
        self._conditions = list({c.id: c for c in [Condition(defence=self.defence_id)] + list(conditions)}.values())

    def _prefetch_after(self, key: tuple) -> None:
        if key not in self._plan:
            return
        at = self._plan.index(key)
        self.sides.prefetch(self._plan[at + 1 : at + 1 + PREFETCH_SIDES], self._perturb_in_background)

    def _perturb_in_background(self, key: tuple) -> list:
        modality, name, severity = key
        clean = self.sides.clean(modality)
        with side_stream() as stream:
            out = self._perturbed(get_perturbation(name), clean, severity, ())
            if stream is not None:
                stream.synchronize()  # the encoder's stream reads these pictures: they must be finished
        return out

    @fixed_threads()  # a perturbation's pictures and an attack's fit do not depend on the thread count (determinism.py)
    def _apply(self, perturbation, items: list, indices, severity: int | None, caption_side: tuple) -> list:
        context = self.attack_context() if perturbation.needs_model else None
        captions = None
        if perturbation.traits.caption_source:
            side = caption_side if perturbation.traits.caption_source == "condition" and caption_side else (None, None)
            texts = self.inputs("text", *side)
            captions = [texts[i] for i in indices]
        boxes = self.text_boxes(indices, perturbation.name) if perturbation.traits.reads_text_boxes else None
        if self.defence is not None and perturbation.modality == "text" and context is None and captions is None:
            from ..detectors.defences import adaptive_perturb

            return [adaptive_perturb(perturbation.name, text, severity, (self.seed, self.ids[i]), self.defence)
                    for text, i in zip(items, indices)]
        # a per-meme caption attack runs on blocks of `batch_size` memes: shards start at multiples of it, so a meme's
        # captions are the same whichever shard, executor or shard size attacked it (shards.py)
        block = self.batch_size if context is not None and perturbation.modality == "text" else None
        return perturbation.apply(items, [self.ids[i] for i in indices], severity, self.seed, context, captions, boxes,
                                  block=block)

    def text_boxes(self, indices, edit: str | None = None) -> list:
        """Where each clean picture shows its text: the dataset's boxes, else the text reader's (read once), else
        None; the pictures `edit` meets without boxes go into `boxless`, for the run's notes."""
        return self.sides.boxes(indices, edit, getattr(self.text_reader, "read_boxes", None))

    def picture(self, condition: Condition, i: int) -> np.ndarray:
        """Meme `i`'s picture under the condition's image side as an array, for the report's thumbnails (an edge),
        recomputed alone (perturbed pictures are dropped once encoded); an attack's in a one-meme shard of this
        engine, which sees the meme's own label and features and what the attack fitted."""
        from ..data.pictures import to_array

        side = self.image_side(condition)
        if condition.image is None:
            return to_array(self.clean_picture(i))
        perturbation = get_perturbation(condition.image)
        if perturbation.needs_model:
            return to_array(self._example_shard(i).inputs(*side)[0])
        return to_array(self._apply(perturbation, [self.clean_picture(i)], [i], condition.image_severity,
                                    side[3:])[0])

    def caption(self, condition: Condition, i: int) -> str:
        """Meme `i`'s caption as the detector read it under `condition` (for reports and counterexamples): a joint
        attack's own, computed with its picture in a one-meme shard, else the condition's text side."""
        if condition.image and get_perturbation(condition.image).traits.rewrites_caption:
            return self._example_shard(i).inputs(*self.text_side(condition))[0]
        if condition.text or self.ocr is not None:
            return self.inputs(*self.text_side(condition))[i]
        return self.dataset.memes[i].text

    def _example_shard(self, i: int) -> "Engine":
        """The one-meme shard of meme `i` in which its attacked picture (and a joint attack's caption) is computed
        once for a report or a counterexample: the meme's own label and features, the attacks' fitted memo."""
        if i not in self._example_shards:
            self._example_shards[i] = self.shard(range(i, i + 1))
        return self._example_shards[i]

    def shard(self, rows: range, attack_memo: dict | None = None) -> "Engine":
        """An engine over memes `rows` of this one: the same detector, seed, batch size, store of encoded inputs,
        defence and readers, and what its attacks fitted (`attack_memo`, default this engine's). Each meme's
        outputs are those it gets in the whole dataset: perturbations are keyed by meme, the encoders see batches
        of one shape, and a shard that starts at a multiple of the batch size batches its heads as the whole does."""
        memes = list(self.dataset.memes[rows.start : rows.stop])
        attacks = self.attacks
        sub = Engine(self.detector, replace(self.dataset, memes=memes), self.seed,
                     sides=engine_sides(self.detector, memes, self.features),
                     asking=EncodingSettings(self.batch_size, self.encoding.precision, self.defence),
                     attacks=AttackState(
                         None if attacks.labels is None else np.asarray(attacks.labels)[rows.start : rows.stop],
                         attacks.training, attacks.cache_dir, attacks.memo if attack_memo is None else attack_memo,
                         attacks.source),
                     readers=Readers(self.ocr, self.text_reader))
        sub.sides.text_boxes = self.sides.text_boxes[rows.start : rows.stop]
        return sub

    def caption_edit(self, condition: Condition) -> dict | None:
        """How much the condition's caption edit changed the captions (mean share of words changed, distance.py)
        and, for an attack that measures itself (TextAttack's recipes), its own measures; None without a caption
        edit or when OCR reads the captions."""
        if not condition.text or self.ocr is not None:
            return None
        side = (condition.text, condition.text_severity)
        if side not in self._caption_edits:  # a grid pairs one text side with many image sides
            rows = self._sharded.words_changed.get(side)
            if rows is None:
                rows = self.words_changed(condition)
            out = {"words_changed": float(np.mean(rows))}
            records = self.attacks.records_of(("text", *side))
            if records:  # an attack that measures itself (TextAttack's recipes), one record per meme
                from ..perturb.textattack_recipes import textattack_summary

                out["textattack"] = textattack_summary(records)
            self._caption_edits[side] = out
        return dict(self._caption_edits[side])

    def attack_records(self) -> dict[tuple, dict[int, dict]]:
        """Per-meme records of the attacks this engine ran that keep them (("image" or "text", name, severity) ->
        {meme row: record})."""
        return self.attacks.records()

    def picture_attack(self, condition: Condition) -> dict | None:
        """What a per-meme image attack measured of itself under `condition` (success, queries, sanity flags:
        image_attacks.summary), from the shards or this engine's own pass; None for any other condition."""
        if not condition.image:
            return None
        from ..perturb.image_attacks import summary

        table = self.attacks.records_of(("image", condition.image, condition.image_severity))
        if not table:
            return None
        out = summary(table)
        if self.attacks.source is not None:  # its records judge the detector it attacked, not this one
            out["on_source"] = True
        return out

    def attack_memo(self) -> dict:
        """What this engine's attacks fitted (a UAP's pattern, a universal trigger), by the attacks' own keys."""
        return self.attacks.memo

    def attacked_captions(self) -> dict[tuple, list[str]]:
        """(caption attack, severity) -> the captions each model-aware caption attack this engine ran (or its shards
        ran) gave its memes: what a process that reports without having run them (a pytest-xdist controller) needs
        for the worst examples and the counterexamples."""
        return {(key[1], key[2]): list(captions) for key, captions in self.sides.inputs.items()
                if key[0] == "text" and key[1] is not None and get_perturbation(key[1]).needs_model
                and key == self._key("text", key[1], key[2])}

    def adopt_attacks(self, memo: dict, captions: dict[tuple, list[str]]) -> None:
        """What an engine over the same memes fitted (`attack_memo`) and attacked (`attacked_captions`) in another
        process, kept as if this one had computed it; what this one computed itself stays."""
        self.attacks.adopt_memo(memo)
        for side, texts in captions.items():
            self.sides.inputs.setdefault(self._key("text", *side), texts)

    def words_changed(self, condition: Condition) -> np.ndarray | None:
        """Each meme's share of caption words the condition's caption edit changed (distance.py); None without a
        caption edit or when OCR reads the captions."""
        if not condition.text or self.ocr is not None:
            return None
        from ..perturb.distance import words_changed

        clean, edited = self.sides.clean("text"), self.inputs("text", condition.text, condition.text_severity)
        return np.array([words_changed(a, b) for a, b in zip(clean, edited)], dtype=np.float64)

    def held_against(self, labels) -> np.ndarray:
        """The classes an attack or an evasion search moves the detector away from: `labels`, or for unlabelled memes
        (meme.unlabelled: no truth to move away from) the detector's clean answers, behind this engine's defence."""
        labels = np.asarray(labels)
        return self.predict(Condition(defence=self.defence_id)).argmax(axis=1) if unlabelled(labels) else labels

    def attack_context(self):
        """Detector, true labels (an unlabelled dataset's: the detector's clean predictions) and clean image features
        for the attacks that query the detector (built once)."""
        from ..perturb.attacks import AttackContext, CleanInputs

        attacks = self.attacks
        if attacks.context is None:
            if attacks.labels is None:
                raise ValueError("this engine was built without labels, which attacks need")
            detector = self.detector if attacks.source is None else attacks.source
            modalities = getattr(detector, "modalities", ("image", "text"))
            split = is_split(detector)
            image_features = None
            if split and "image" not in modalities:
                image_features = np.zeros((len(self.ids), 0), dtype=np.float32)
            elif split:  # the source's own features of the clean pictures (this engine's, through its store)
                image_features = (self._encode("image", None, None) if detector is self.detector
                                  else np.asarray(detector.encode_images(self.inputs("image", None, None))))
            images = self.inputs("image", None, None) if not split and "image" in modalities else None
            if self.defence is not None:
                from ..detectors.defences import DefendedDetector

                detector = DefendedDetector(self.detector, self.defence)
            clean = CleanInputs(image_features, images, captions=self.sides.clean("text"))
            attacks.context = AttackContext(detector, self.held_against(attacks.labels), clean,
                                            training=attacks.training, cache_dir=attacks.cache_dir,
                                            memo=attacks.memo, ids=list(self.ids), seed=self.seed)
        return attacks.context

    @fixed_threads()
    def _encode(self, modality: str, name: str | None, severity: int | None, *caption_side) -> np.ndarray:
        """The features of one condition side: held, else in the store by its inputs' digests, else encoded."""
        key = self._key(modality, name, severity, *caption_side)
        sides = self.sides
        held = sides.held_features(key, modality)
        if held is None and self.shards is not None and key == ("image", None, None) and not sides.clean_pictures:
            # the clean pictures a shard at a time, none held: what attacks and modality swaps read
            chunks = [self.encoding.encode("image", [self.clean_picture(i) for i in rows])
                      for rows in self.shards.row_ranges(self)]
            held = np.concatenate([features for features, _ in chunks])
            sides.digests[key] = np.concatenate([digests for _, digests in chunks])
        if held is None:
            items = self.inputs(modality, name, severity, *caption_side)
            if modality == "text":
                items = self.encoding.defended(items)
            self._prefetch_after(key)  # the next sides are perturbed while the detector encodes this one
            held, sides.digests[key] = self.encoding.encode(modality, items)
            if modality == "image" and name is not None:
                del sides.inputs[key]  # perturbed pictures are large and no longer needed once encoded
        sides.held.put(key, held)
        return held

    def predict_pairs(self, image_of: Sequence[int], text_of: Sequence[int]) -> np.ndarray:
        """Class probabilities of clean pictures and captions re-paired: row k shows meme `image_of[k]`'s picture
        with meme `text_of[k]`'s caption (a modality swap). A split detector only runs its head: both sides are
        the clean features, encoded once."""
        image_of, text_of = np.asarray(image_of), np.asarray(text_of)
        modalities = getattr(self.detector, "modalities", ("image", "text"))
        if is_split(self.detector):
            image, text = (self._encode(modality, None, None)[rows] if modality in modalities
                           else np.zeros((len(rows), 0), dtype=np.float32)
                           for modality, rows in (("image", image_of), ("text", text_of)))
            return self.encoding.heads(image, text)
        images, texts = self.inputs("image", None, None), self.inputs("text", None, None)
        return self.probabilities([images[j] for j in image_of], [texts[j] for j in text_of])

    def probabilities(self, images: list, texts: list) -> np.ndarray:
        """Class probabilities of any pictures and captions (not only a condition's), in batches, as the detector
        takes them (through the engine's defence): what a search over edits (budgets.py) asks."""
        return self.encoding.answers(images, self.encoding.defended(texts))[0]

    def _asked(self, condition: Condition):
        """The detector as `condition` asks it: itself, or, under a prompt edit, a view with the reworded prompt."""
        if not condition.prompt:
            return self.detector
        from ..perturb.prompts import prompt_edit, supports_prompts

        if not supports_prompts(self.detector):
            raise ValueError(f"condition {condition.id!r} rewords the prompt of a detector that has none")
        return self.detector.with_prompt(prompt_edit(self.detector.prompt, condition.prompt, condition.prompt_severity))

    def planned(self) -> list[Condition]:
        """The conditions this engine was told it will be asked for (`plan`), clean first."""
        return list(self._conditions)

    def _take_shards(self, evaluated: Evaluated) -> None:
        """Keep what a shard-major pass (shards.ShardRunner.run) put together, in meme order."""
        self._sharded.add_conditions(evaluated)
        self.attacks.take_records(evaluated.attack_records)
        self.adopt_attacks({}, evaluated.attacked_captions)  # as this engine's own pass would give them
        self.sides.count(evaluated.boxless, evaluated.encoder_calls)

    def unread(self) -> np.ndarray:
        """[N] bool: the memes whose clean picture OCR read as nothing (the caption it filled in for the dataset, or
        under `ocr` the clean picture's reading) for a detector that reads captions. With no caption to judge, each is
        an abstention under every condition (`predict`): not a prediction on an empty caption, nor an error of
        every caption edit."""
        if self._unread is None:
            captions = (self.inputs(*self.text_side(Condition())) if self.ocr is not None
                        else self.sides.clean("text"))
            self._unread = np.array([not text.strip() for text in captions], dtype=bool) & ("text" in self.reads())
        return self._unread

    def predict(self, condition: Condition) -> np.ndarray:
        """Class probabilities [N, C] under `condition`; the memes `unread` are abstentions (`abstentions`)."""
        proba = self._predicted(condition)
        unread = self.unread()
        if unread.any():
            declined = self.abstentions.get(condition.id)
            self.abstentions[condition.id] = unread if declined is None else np.asarray(declined, bool) | unread
        return proba

    def _predicted(self, condition: Condition) -> np.ndarray:
        """Class probabilities [N, C] under `condition`, and the memes the detector itself declined."""
        if condition.defence != (None if self.defence is None else self.defence.id):
            raise ValueError(f"condition {condition.id!r} asks for another defence than this engine's "
                             f"({'none' if self.defence is None else self.defence.id})")
        if self.shards is not None and self.shards.takes(self, condition):
            sharded = self._sharded
            if condition.id not in sharded.outputs and condition.id not in sharded.errors:
                self._take_shards(self.shards.run(self))
            if condition.id in sharded.errors:
                raise sharded.errors[condition.id]
            proba, abstained = sharded.outputs[condition.id]
            if abstained is not None:
                self.abstentions[condition.id] = abstained
            if condition.id in sharded.samples:
                self.samples[condition.id] = sharded.samples[condition.id]
            return proba
        asked = self._asked(condition)
        image_side = self.image_side(condition)
        text_side = self.text_side(condition)
        modalities = getattr(self.detector, "modalities", ("image", "text"))
        for modality, name in (("image", condition.image), ("text", condition.text)):
            if name and modality not in self.reads():
                raise ValueError(f"condition {condition.id!r} perturbs the {modality}, which this detector "
                                 f"does not read (it reads: {', '.join(modalities)})")
        if is_split(self.detector) and asked is self.detector:
            # With OCR the captions are read off the pictures: the text side first, while they are at hand.
            features = {side[0]: self._encode(*side) if side[0] in modalities
                        else np.zeros((len(self.ids), 0), dtype=np.float32)
                        for side in ((text_side, image_side) if self.ocr else (image_side, text_side))}
            return self._sampled(condition, self.encoding.heads(features["image"], features["text"]), None)
        for side in (image_side, text_side):
            self._prefetch_after(self._key(*side))
        images, texts = (self.inputs(*side) if side[0] in modalities else [None] * len(self.ids)
                         for side in (image_side, text_side))
        texts = self.encoding.defended(texts)
        for modality in modalities:
            self.encoder_calls[modality] += len(self.ids)
        sampling = getattr(self.detector, "sampling", None)
        if sampling is not None and callable(getattr(asked, "sample_answers", None)):  # a hosted model: k requests
            from ..detectors.sampling import sample_keys

            keys = sample_keys(self.seed, self.ids, condition.id)
            answers = self.encoding.sampled_answers(images, texts, asked, keys, sampling)
            return self._voted(condition, answers, True)
        proba, abstained = self.encoding.answers(images, texts, asked)
        if abstained is not None:
            self.abstentions[condition.id] = abstained
        return self._sampled(condition, proba, abstained)

    def _sampled(self, condition: Condition, proba: np.ndarray, abstained: np.ndarray | None) -> np.ndarray:
        """`proba` as it is for a detector asked once; for a repeat-sampled one (detectors/sampling.py), k answers
        per meme drawn from it, kept in `samples`, and their vote shares in its place."""
        sampling = getattr(self.detector, "sampling", None)
        if sampling is None:
            return proba
        from ..detectors.sampling import draw_answers, sample_keys

        answers = draw_answers(proba, abstained, sample_keys(self.seed, self.ids, condition.id), sampling)
        return self._voted(condition, answers, abstained is not None)

    def _voted(self, condition: Condition, answers: np.ndarray, abstains: bool) -> np.ndarray:
        """The vote shares of a sampled condition's answers (kept in `samples`); a meme with no answered sample is
        declined, for a detector that can decline."""
        from ..detectors.sampling import vote_shares

        self.samples[condition.id] = answers
        proba, declined = vote_shares(answers, len(self.detector.classes))
        if abstains:
            self.abstentions[condition.id] = declined
        return proba
