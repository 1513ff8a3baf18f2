"""The numpy Levenshtein distance agrees with the textbook dynamic programme."""
import numpy as np

from pytest_memerobust.perturb.distance import levenshtein


def _reference(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def test_known_values():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == levenshtein("abc", "") == 3
    assert levenshtein("hate", "hate") == 0
    assert levenshtein("belong", "beolng") == 2  # a transposition is two edits here


def test_matches_the_reference_on_random_strings_with_emoji():
    rng = np.random.default_rng(0)
    alphabet = list("abc d😀")
    for _ in range(300):
        a = "".join(rng.choice(alphabet, rng.integers(0, 12)))
        b = "".join(rng.choice(alphabet, rng.integers(0, 12)))
        assert levenshtein(a, b) == _reference(a, b), (a, b)
