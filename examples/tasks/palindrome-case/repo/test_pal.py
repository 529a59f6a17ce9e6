from pal import is_palindrome


def test_ignores_case():
    assert is_palindrome("Racecar")


def test_simple():
    assert is_palindrome("abba") and not is_palindrome("abc")
