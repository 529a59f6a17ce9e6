from chunks import chunks


def test_tail_kept():
    assert chunks([1, 2, 3], 2) == [[1, 2], [3]]


def test_exact():
    assert chunks([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]
