"""The one error the cost model raises for input it cannot use."""


class CostModelError(ValueError):
    """A saved model that cannot be loaded, or a model asked to save before it has
    learned anything: bad input, reported to the user on one line."""
