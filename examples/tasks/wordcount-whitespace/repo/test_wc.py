from wc import word_count


def test_runs_of_whitespace():
    assert word_count("one  two\tthree") == 3 and word_count("a  b c") == 3


def test_single_spaces():
    assert word_count("one two") == 2
