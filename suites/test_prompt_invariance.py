"""Does the verdict depend on the wording of the instruction? For a prompted detector (a vision-language model or a
hosted endpoint), the clean memes are asked again under paraphrases of the card's prompt, with the answer options in
the other order and with the system message changed (run/analyses.py). The share of variants that change a
meme's verdict, averaged over the memes, goes into the report's "prompt invariance" table with its interval, next to
the memes most sensitive to wording. Detectors with a trained head have no prompt: the test skips for them.
"""
import pytest

MAX_MEAN_FLIP_SHARE = 0.25  # a verdict that changes with a quarter of harmless rewordings is not a verdict


def test_verdicts_do_not_depend_on_the_wording_of_the_prompt(memerobust):
    from pytest_memerobust.run.analyses import prompt_invariance

    result = prompt_invariance(memerobust.session, memerobust.model)
    if result is None:
        pytest.skip(f"{memerobust.model} is not prompted: it has no instruction to reword")
    lo, hi = result["mean_flip_share_ci"]
    assert result["mean_flip_share"] <= MAX_MEAN_FLIP_SHARE, (
        f"{memerobust.model}: a rewording of its prompt changes {result['mean_flip_share']:.1%} of verdicts on "
        f"average (CI {lo:.1%}..{hi:.1%}, limit {MAX_MEAN_FLIP_SHARE:.0%}); {result['any_flip_share']:.1%} of "
        f"{result['n']} memes change under at least one wording")


def test_rewordings_of_the_prompt_keep_confident_verdicts(memerobust):
    """Hypothesis draws instructions from a small grammar (fuzz.rewordings) and asks the memes the model
    classifies correctly and confidently with its own prompt; a rewording that changes one of their verdicts fails,
    shrunk to the plainest wording that still does. Budget: --memerobust-fuzz-examples; confidence:
    --memerobust-fuzz-confidence; seeded by --memerobust-seed."""
    from hypothesis import HealthCheck, Phase, given, seed, settings

    from pytest_memerobust.fuzz import rewordings
    from pytest_memerobust.run.analyses import prompt_fuzzer

    fuzzer = prompt_fuzzer(memerobust.session, memerobust.model, memerobust.data)
    if fuzzer is None:
        pytest.skip(f"{memerobust.model} is not prompted: it has no instruction to reword")
    options = memerobust.session.options
    probes = options.probes
    if not fuzzer.confident:
        pytest.skip(f"{memerobust.model} classifies no meme correctly with probability >= {probes.fuzz_confidence}")

    @settings(database=None, max_examples=probes.fuzz_examples, deadline=probes.fuzz_deadline_ms,
              phases=[Phase.explicit, Phase.generate, Phase.shrink],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @seed(options.seed)
    @given(instruction=rewordings())
    def fuzz(instruction):
        flipped = fuzzer.flipped(instruction)
        assert not flipped, (f"{memerobust.model}: the instruction {instruction!r} changes the verdict of "
                             f"{len(flipped)} of {len(fuzzer.confident)} confidently right memes (e.g. {flipped[:3]})")

    fuzz()
