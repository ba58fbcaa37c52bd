"""The local helper's calculator: arithmetic only, and bounded. It runs on the page's own thread
(no worker to stop it), so nothing it is given may take long: ``factorial(10**6)`` or
``(9999**9999)**9999`` would freeze the tab for minutes. So the expression is checked before
anything is evaluated (its length, its depth, which operations and names it uses), and every
operation that can grow a number (a power, a factorial, a multiplication, ``round`` to many
places) is refused before it runs when its result would be over ``MAX_BITS``, estimated from its
operands. Every number the calculator ever holds is then under ``MAX_BITS``, and each step
on such numbers takes microseconds: a whole evaluation stays within a few milliseconds.

A refusal or a failure is a ``CalculationError`` whose message is a sentence for the person.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

MAX_LENGTH = 500  # characters of an expression
MAX_DEPTH = 40  # nesting of its operations
# The largest integer: about 3,000 digits (and within Python's 4,300 digits for str()).
MAX_BITS = 10_000
MAX_ROUND_DIGITS = 400  # round(x, n): |n| at most this (10**n is computed for an int x)

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}  # fmt: skip
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    name: getattr(math, name) for name in ("sqrt", "sin", "cos", "tan", "log", "log10", "exp", "floor", "ceil", "factorial")
} | {"abs": abs, "round": round, "min": min, "max": max}


class CalculationError(ValueError):
    """What the calculator cannot or will not do, said for a person."""


def parse(expression: str) -> ast.expr:
    """The expression's tree, once it is known to be arithmetic the calculator does and small
    enough to look at; nothing is evaluated. Raises CalculationError."""
    if len(expression) > MAX_LENGTH:
        raise CalculationError(f"the expression is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.replace("^", "**"), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CalculationError("that is not arithmetic the calculator understands") from None
    # (iterative: a deep tree must not be a deep recursion here)
    pending: list[tuple[ast.AST, int]] = [(tree.body, 1)]
    while pending:
        node, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise CalculationError(f"the expression is nested more than {MAX_DEPTH} deep")
        children: list[ast.AST]
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            children = []
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            children = [node.left, node.right]
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            children = [node.operand]
        elif isinstance(node, ast.Name) and node.id in _CONSTANTS:
            children = []
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS and not node.keywords:
            children = list(node.args)
            if any(isinstance(a, ast.Starred) for a in children):
                raise CalculationError("only arithmetic is allowed")
        else:
            raise CalculationError("only arithmetic is allowed")
        pending.extend((child, depth + 1) for child in children)
    return tree.body


def calculate(expression: str) -> str:
    """Arithmetic only: numbers, + - * / // % ** (or ^), parentheses, a few math functions; the
    result as text. Raises CalculationError."""
    try:
        result = _value(parse(expression))
    except CalculationError:
        raise
    except ZeroDivisionError:
        raise CalculationError("that divides by zero") from None
    except OverflowError:
        raise CalculationError("the result is too large for a floating-point number") from None
    except (ValueError, TypeError) as e:  # (what the checks above did not name)
        raise CalculationError(str(e)) from None
    if isinstance(result, float) and result.is_integer() and abs(result) < 1e15:
        result = int(result)
    return str(result)


def _value(node: ast.expr) -> Any:
    """(Recursion is bounded by ``parse``'s depth.)"""
    if isinstance(node, ast.Constant):
        return _bounded(node.value)
    if isinstance(node, ast.Name):
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        elif isinstance(node.op, ast.Mult):
            _check_bits(_bits(left) + _bits(right))
        return _bounded(_BINARY[type(node.op)](left, right))
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)  # (parse allows nothing else)
    name, args = node.func.id, [_value(a) for a in node.args]
    if name == "factorial" and len(args) == 1 and isinstance(args[0], int) and args[0] > 1:
        n = args[0]
        _check_bits(math.lgamma(n + 1) / math.log(2) if n < 2**53 else math.inf)
    if name == "round" and len(args) == 2 and isinstance(args[1], int) and abs(args[1]) > MAX_ROUND_DIGITS:
        raise CalculationError(f"round can keep at most {MAX_ROUND_DIGITS} digits")
    try:
        found = _FUNCTIONS[name](*args)
    except ValueError:  # ("math domain error"; Python 3.14 words it per function)
        raise CalculationError(f"{name} is not defined for that value") from None
    except TypeError:
        raise CalculationError(f"{name} cannot take {'that argument' if len(args) == 1 else 'those arguments'}") from None
    return _bounded(found)


def _bits(value: Any) -> int:
    """The bits of an integer (a float: none that matter, its size is fixed)."""
    return abs(value).bit_length() if isinstance(value, int) else 0


def _check_power(base: Any, exponent: Any) -> None:
    """A power of integers is computed exactly: refused when it would have more than MAX_BITS."""
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        _check_bits(exponent * math.log2(abs(base)) if exponent < 2**53 else math.inf)


def _check_bits(bits: float) -> None:
    if bits > MAX_BITS:
        raise CalculationError(
            f"the result would have {_digits(bits)} digits; the calculator keeps at most {_digits(MAX_BITS)}"
        )


def _bounded(value: Any) -> Any:
    """The value, if the calculator may hold it (what the checks before an operation did not
    foresee, such as a long literal, is caught here, just after)."""
    if isinstance(value, complex):
        raise CalculationError("the result is not a real number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CalculationError("only numbers are allowed")
    _check_bits(_bits(value))
    return value


def _digits(bits: float) -> str:
    """The decimal digits of a number of ``bits``, as a person reads a count: about 3,010; about
    5.6 million; more than a trillion."""
    digits = bits * math.log10(2)
    if digits < 10**6:
        return f"about {round(digits):,}"
    for size, name in ((10**9, "million"), (10**12, "billion")):
        if digits < size:
            return f"about {digits / (size // 1000):,.1f} {name}"
    return "more than a trillion"
