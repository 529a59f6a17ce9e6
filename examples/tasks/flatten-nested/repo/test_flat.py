from flat import flatten


def test_deep():
    assert flatten([1, [2, [3]]]) == [1, 2, 3]


def test_one_level():
    assert flatten([1, [2, 3]]) == [1, 2, 3]
