"""The lab's shared input checks (normlab.lab.errors)."""

import pytest

from normlab.lab.errors import checked_code


def test_checked_code_passes_a_string_up_to_the_limit() -> None:
    assert checked_code("", 3) == ""
    assert checked_code("abc", 3) == "abc"


@pytest.mark.parametrize("value", [None, 3, b"print(1)", ["print(1)"]])
def test_checked_code_refuses_anything_but_a_string(value: object) -> None:
    with pytest.raises(TypeError, match=f"code must be a string, got {type(value).__name__}"):
        checked_code(value, 100)


def test_checked_code_refuses_one_character_too_many() -> None:
    with pytest.raises(ValueError, match="code is 1,001 characters long, the limit is 1,000"):
        checked_code("x" * 1001, 1000)
