"""Does the verdict depend on the wording of the instruction? For a prompted detector (a vision-language model or a
hosted endpoint), the clean memes are asked again under paraphrases of the card's prompt, with the answer options in
the other order and with the system message changed (prompt_invariance.py). The share of variants that change a
meme's verdict, averaged over the memes, goes into the report's "prompt invariance" table with its interval, next to
the memes most sensitive to wording. Detectors with a trained head have no prompt: the test skips for them.
"""
import pytest

MAX_MEAN_FLIP_SHARE = 0.25  # a verdict that changes with a quarter of harmless rewordings is not a verdict


def test_verdicts_do_not_depend_on_the_wording_of_the_prompt(memerobust):
    result = memerobust.session.prompt_invariance(memerobust.model)
    if result is None:
        pytest.skip(f"{memerobust.model} is not prompted: it has no instruction to reword")
    lo, hi = result["mean_flip_share_ci"]
    assert result["mean_flip_share"] <= MAX_MEAN_FLIP_SHARE, (
        f"{memerobust.model}: a rewording of its prompt changes {result['mean_flip_share']:.1%} of verdicts on "
        f"average (CI {lo:.1%}..{hi:.1%}, limit {MAX_MEAN_FLIP_SHARE:.0%}); {result['any_flip_share']:.1%} of "
        f"{result['n']} memes change under at least one wording")
