"""Caption fuzzing: a label-preserving edit must not flip a confident prediction.

Hypothesis draws a confidently and correctly classified meme and a few character edits a reader looks past
(swaps, look-alike letters, zero-width characters, leetspeak...), and shrinks any failure to the smallest edit that
still flips the prediction; its example database replays that failure on the next run, and the search itself is
seeded by --memerobust-seed. Budget and deadline:
--memerobust-fuzz-examples, --memerobust-fuzz-deadline; confidence: --memerobust-fuzz-confidence.
"""
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from pytest_memerobust.fuzz import CaptionFuzzer, caption_edits


def test_label_preserving_edits_do_not_flip_confident_predictions(memerobust):
    options = memerobust.session.options
    probes = options.probes
    fuzzer = CaptionFuzzer(memerobust.detector, memerobust.dataset, memerobust.task, probes.fuzz_confidence)
    if not fuzzer.confident:  # said in the run's notes too: the default summary counts a skip, without its reason
        reason = (f"{memerobust.session.model_label(memerobust.model)} classifies no meme correctly with probability "
                  f">= {probes.fuzz_confidence} (--memerobust-fuzz-confidence), so no confident prediction is left "
                  f"to fuzz; a lower confidence fuzzes its less confident ones")
        note = f"caption fuzzing skipped: {reason}"
        memerobust.session.notes.add(note)
        pytest.skip(reason)

    # Seeded by --memerobust-seed, so with a fresh database a gate passes or fails the same way on every run and every
    # pytest-xdist worker. @seed alone also sets database=None (Hypothesis would never save a failure), so @settings
    # goes outside it and puts back the active profile's database (.hypothesis/examples unless a profile says
    # otherwise): a failure is saved, and the reuse phase replays it first on the next run.
    # No "explain" phase: it traces every line executed, which makes each model call many times slower.
    @settings(database=settings.default.database, max_examples=probes.fuzz_examples,
              deadline=probes.fuzz_deadline_ms,
              phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @seed(options.seed)
    @given(index=st.sampled_from(fuzzer.confident), edits=caption_edits(max_edits=3))
    def fuzz(index, edits):
        check = fuzzer.check(index, edits)
        if check.flipped:
            raise AssertionError(str(check))

    # One database key per model, dataset and task: replay deletes saved examples that no longer fail, so a shared
    # key would let a passing model's run erase another model's saved failure. Hypothesis' own pytest plugin keys
    # parametrized tests the same way.
    key = f"{memerobust.model}\0{memerobust.session.data_spec(memerobust.data)}\0{memerobust.task}"
    fuzz.hypothesis.inner_test._hypothesis_internal_add_digest = key.encode()
    fuzz()
