"""A small, safe evaluator for the arithmetic and comparisons written in workload manifests.

Manifests state constraints (``micro_batch * grad_accum * nproc == global_batch_seqs``) and
derived values (``global_batch_seqs // (micro_batch * nproc)``) as expressions. Only names,
numbers, strings, arithmetic, comparisons and boolean logic are allowed: never calls or attributes.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any

from infrarsi.errors import InfraRSIError

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
}


class ExprError(InfraRSIError):
    """An expression that cannot be parsed, uses a forbidden construct or an unknown name."""


def parse(text: str) -> ast.Expression:
    """Parse and check an expression; raises ExprError naming what is not allowed."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"cannot parse {text!r}: {exc.msg}") from None
    allowed = (
        ast.Expression,
        ast.BinOp,
        ast.UnaryOp,
        ast.BoolOp,
        ast.Compare,
        ast.Name,
        ast.Constant,
        ast.Load,
        ast.Tuple,
        ast.List,
        ast.And,
        ast.Or,
        *_BINARY,
        *_COMPARE,
        *_UNARY,
    )
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            raise ExprError(f"{type(node).__name__} is not allowed in {text!r}")
    return tree


def names(text: str) -> set[str]:
    """The variable names an expression reads."""
    return {n.id for n in ast.walk(parse(text)) if isinstance(n, ast.Name)}


def evaluate(text: str, env: Mapping[str, Any]) -> Any:
    """Evaluate an expression over ``env``; raises ExprError on an unknown name or a math error."""
    tree = parse(text)
    try:
        return _eval(tree.body, env)
    except ZeroDivisionError:
        raise ExprError(f"division by zero in {text!r} with {dict(env)}") from None


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    """The value of one node of a parsed expression (only the node types ``parse`` allows)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExprError(f"unknown name {node.id!r}; known: {sorted(env)}")
        return env[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_eval(e, env) for e in node.elts)
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, env))
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, env) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        return _compare(node, env)
    raise ExprError(f"{type(node).__name__} is not allowed")


def _compare(node: ast.Compare, env: Mapping[str, Any]) -> bool:
    """A chained comparison (``a <= b < c``), each operand evaluated once, left to right."""
    left = _eval(node.left, env)
    for op, comp in zip(node.ops, node.comparators):
        right = _eval(comp, env)
        if not _COMPARE[type(op)](left, right):
            return False
        left = right
    return True
