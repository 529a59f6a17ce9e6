from leap import is_leap


def test_four_hundred():
    assert is_leap(2000)


def test_common():
    assert is_leap(2024) and not is_leap(1900) and not is_leap(2023)
