"""Does the detector read both channels? Each meme's picture is shown with another meme's caption (and the
reverse); where the two memes were predicted differently, the swapped prediction follows one of them. A detector
that follows the caption (or the picture) in nearly every such swap ignores the other channel, which is how the
Hateful Memes paper's benign confounders fool unimodal models. The shares, the confounder pairs the data holds
(same caption or same picture, different labels) and the per-meme text-only / image-only predictions go into the
report's "modality reliance" table and JSON.
"""
import pytest

MAX_ONE_CHANNEL_SHARE = 0.95  # following one channel in more informative swaps than this means ignoring the other


def test_both_channels_decide(memerobust):
    from pytest_memerobust.run.analyses import reliance
    from pytest_memerobust.run.options import split_model

    if split_model(memerobust.model)[1]:
        pytest.skip(f"{memerobust.model} is a channel-ablation view: it reads one channel by design")
    read = getattr(memerobust.detector, "modalities", ("image", "text"))
    if "image" not in read or "text" not in read:
        pytest.skip(f"{memerobust.model} reads only its {' and '.join(read)}: a modality swap needs a detector of both")
    if not any(meme.has_picture for meme in memerobust.dataset.memes):
        pytest.skip(f"{memerobust.session.data_spec(memerobust.data)} has no pictures (caption-only data): a modality "
                    f"swap needs both channels")
    swap = reliance(memerobust.session, memerobust.model)["swap"]
    if swap["n_informative"] == 0:
        pytest.skip(f"{memerobust.model} predicts every swapped pair's two memes alike: nothing to tell")
    for channel, share in (("caption", swap["follows_text"]), ("picture", swap["follows_image"])):
        assert share <= MAX_ONE_CHANNEL_SHARE, (
            f"{memerobust.model} follows the {channel} in {share:.1%} of {swap['n_informative']} informative modality "
            f"swaps (limit {MAX_ONE_CHANNEL_SHARE:.0%}): it ignores the other channel")
