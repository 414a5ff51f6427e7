"""Public ids and tokens are unguessable: every character of the alphabet equally likely, at full length."""

import re
import string
from collections import Counter

from mailservice.ids import public_id, random_token


def test_a_public_id_is_its_prefix_and_24_characters_of_the_alphabet():
    assert re.fullmatch(r"msg_[a-z0-9]{24}", public_id("msg"))
    assert len({public_id("msg") for _ in range(1000)}) == 1000


def test_every_character_is_equally_likely():
    drawn = Counter("".join(random_token(36) for _ in range(10_000)))  # 10 000 of each expected
    assert set(drawn) == set(string.ascii_lowercase + string.digits)
    # Six standard deviations (about 98 here) either way; a plain byte modulo 36 would make the first four
    # characters 8/7 as likely as the rest (about 11 250 of each against 9 840).
    assert all(abs(count - 10_000) < 600 for count in drawn.values()), drawn
