from kv import parse_kv


def test_value_with_equals():
    assert parse_kv("a=b=c") == ("a", "b=c")


def test_simple():
    assert parse_kv(" x = 1 ") == ("x", "1")
