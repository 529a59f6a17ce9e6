from fizz import fizzbuzz


def test_fifteen():
    assert fizzbuzz(15) == "FizzBuzz"


def test_plain():
    assert [fizzbuzz(n) for n in (1, 3, 5)] == ["1", "Fizz", "Buzz"]
