from dedupe import dedupe


def test_keeps_order():
    assert dedupe([3, 1, 3, 2]) == [3, 1, 2]


def test_empty():
    assert dedupe([]) == []
