"""`anatomy.words`: the one key=value parser; values take their field's type, bad words name key and value."""

from __future__ import annotations

import dataclasses

import pytest

from anatomy.words import parse_words


@dataclasses.dataclass
class Fields:
    steps: int = 1
    lr: float = 1e-3
    bias: bool = True
    window: int | None = None
    name: str = "x"
    tag: str | None = None
    derived: int = 0


FIELDS = {f.name: f for f in dataclasses.fields(Fields)}


def test_values_take_the_type_of_their_field():
    got = parse_words(["steps=10", "lr=3e-4", "bias=false", "window=none", "name=none", "tag=null", "lr=2"], FIELDS)
    assert got == {"steps": 10, "lr": 2.0, "bias": False, "window": None, "name": "none", "tag": None}
    assert type(got["lr"]) is float and type(got["steps"]) is int
    assert parse_words(["bias=ON", "window=7", "name= a b "], FIELDS) == {"bias": True, "window": 7, "name": "a b"}
    assert parse_words(["lr-x=1"], {"lr_x": FIELDS["lr"]}) == {"lr_x": 1.0}  # - spelt for _


@pytest.mark.parametrize(
    "word, message",
    [
        ("steps", "expected key=value"),
        ("=3", "expected key=value"),
        ("steps=1.5", "steps must be an integer"),
        ("lr=fast", "lr must be a number, got 'fast'"),
        ("bias=maybe", "bias must be a boolean"),
        ("window=none1", "window must be an integer"),
        ("epochs=3", "unknown key 'epochs'"),
        ("derived=1", "derived is set elsewhere"),
    ],
)
def test_bad_words_name_the_key_and_list_the_valid_ones(word, message):
    with pytest.raises(ValueError, match=message) as err:
        parse_words([word], FIELDS, refused={"derived": "is set elsewhere"})
    listed = str(err.value).endswith("; valid keys: bias, lr, name, steps, tag, window")
    assert listed == ("must be" not in message)  # a bad key lists the keys; a bad value names the type
