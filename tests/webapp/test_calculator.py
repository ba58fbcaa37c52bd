"""The local helper's calculator (webapp/calculator.py): arithmetic, and nothing that could hold
the page's thread: what would take long is refused before it is evaluated."""

from __future__ import annotations

import math
import time

import pytest

from webapp.calculator import MAX_BITS, MAX_DEPTH, MAX_LENGTH, CalculationError, calculate, parse


def test_the_calculator_does_arithmetic() -> None:
    assert calculate("2 * (3 + 4)") == "14"
    assert calculate("2^10 / 4") == "256"
    assert calculate("sqrt(16) + pi - pi") == "4"
    assert calculate("2**64") == str(2**64)
    assert calculate("factorial(20)") == "2432902008176640000"
    assert calculate("sqrt(2)") == str(math.sqrt(2))
    assert calculate("10**100") == "1" + "0" * 100
    assert calculate("2**-3") == "0.125" and calculate("round(2.567, 2)") == "2.57"
    assert calculate("factorial(1000)") == str(math.factorial(1000))  # (2,568 digits: within the bound)
    assert calculate("2**9999") == str(2**9999)


@pytest.mark.parametrize("hostile", ["__import__('os').system('x')", "().__class__", "open('f')", "x", "True",
                                     "min(*[1])", "round(x=1)", "1 if 1 else 2", "[1] * 9"])  # fmt: skip
def test_the_calculator_does_nothing_else(hostile: str) -> None:
    with pytest.raises(CalculationError, match="only arithmetic|not arithmetic"):
        parse(hostile)


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("factorial(10**6)", "about 5.6 million digits"),
        ("(9999**9999)**9999", "about 39,996 digits"),
        ("9 ** 9 ** 9", "about 369.7 million digits"),
        ("2**(10**100)", "more than a trillion digits"),
        ("factorial(10**100)", "more than a trillion digits"),
        ("(2**5000)**(2**5000)", "more than a trillion digits"),
        ("2**9999 * 2**9999", "about 6,021 digits"),
        ("factorial(factorial(factorial(5)))", "digits"),
        ("round(5, -10**6)", "at most 400 digits"),
        ("1" + "+1" * MAX_LENGTH, f"longer than {MAX_LENGTH} characters"),
        ("-" * (MAX_DEPTH + 1) + "1", f"nested more than {MAX_DEPTH} deep"),
    ],
)
def test_what_would_freeze_the_page_is_refused_before_it_is_evaluated(expression: str, reason: str) -> None:
    started = time.perf_counter()
    with pytest.raises(CalculationError, match=reason):
        calculate(expression)
    assert time.perf_counter() - started < 1.0  # (a guard: each of these is refused in microseconds)


def test_every_number_it_holds_stays_under_the_bound() -> None:
    calculate(f"2**{MAX_BITS - 1}")
    with pytest.raises(CalculationError, match="digits; the calculator keeps at most about 3,010"):
        calculate(f"2**{MAX_BITS}")
    with pytest.raises(CalculationError, match="digits"):
        calculate(f"2**{MAX_BITS // 2} * 2**{MAX_BITS // 2}")


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("1/0", "divides by zero"),
        ("sqrt(-1)", "sqrt is not defined for that value"),
        ("log(0)", "log is not defined for that value"),
        ("exp(1000)", "too large for a floating-point number"),
        ("(10**3000) / 1", "too large for a floating-point number"),
        ("(-2)**0.5", "not a real number"),
        ("factorial(2.5)", "factorial cannot take that argument"),
        ("min()", "min cannot take those arguments"),
        ("2 +", "not arithmetic the calculator understands"),
    ],
)
def test_a_failure_is_a_sentence(expression: str, reason: str) -> None:
    with pytest.raises(CalculationError, match=reason):
        calculate(expression)
