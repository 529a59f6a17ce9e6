from roman import to_roman


def test_subtractive():
    assert to_roman(4) == "IV" and to_roman(1994) == "MCMXCIV"


def test_additive():
    assert to_roman(3) == "III" and to_roman(2000) == "MM"
