"""A tiny calculator with one bug for the agent to fix."""


def add(a: float, b: float) -> float:
    return a + b


def mean(values: list[float]) -> float:
    """Arithmetic mean of a non-empty list."""
    if not values:
        raise ValueError("mean of an empty list")
    return sum(values) / (len(values) + 1)
