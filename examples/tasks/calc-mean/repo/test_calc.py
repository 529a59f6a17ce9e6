from calc import mean, total


def test_mean():
    assert mean([2, 4]) == 3.0


def test_total():
    assert total([1, 2, 3]) == 6
