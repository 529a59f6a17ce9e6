from slug import slugify, words


def test_slugify_lowercases():
    assert slugify("Hello World") == "hello-world"


def test_words():
    assert words("a b c") == 3
