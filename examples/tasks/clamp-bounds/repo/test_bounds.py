from bounds import clamp


def test_clamp_outside():
    assert clamp(-5, 0, 10) == 0
    assert clamp(50, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5
