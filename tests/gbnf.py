"""A small GBNF reader and recogniser for the tests: does a grammar that
Escrow writes accept the text it should, and refuse the text it should not?

It reads the subset ``orchestrator.grammar`` writes (rules, string literals,
character classes with ranges, negation and escapes, groups, ``* + ?``,
``{m,n}``, alternation) and fails loudly on anything else, so a grammar it
reads is at least well-formed; the real engines' own parsers are exercised by
the tests against llama-server and llama-cpp-python.
"""

from __future__ import annotations

import re
import sys
from functools import lru_cache
from typing import Any

_ESC = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-", "^": "^", "/": "/"}


class GrammarSyntaxError(ValueError):
    pass


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def ws(self, newlines: bool = False) -> None:
        while self.i < len(self.text):
            c = self.text[self.i]
            if c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            elif c == "#":
                while self.i < len(self.text) and self.text[self.i] != "\n":
                    self.i += 1
            else:
                return

    def char(self) -> str:
        c = self.text[self.i]
        if c != "\\":
            self.i += 1
            return c
        kind = self.text[self.i + 1]
        width = {"x": 2, "u": 4, "U": 8}.get(kind)
        if width:
            digits = self.text[self.i + 2:self.i + 2 + width]
            if not re.fullmatch(r"[0-9a-fA-F]+", digits) or len(digits) != width:
                raise GrammarSyntaxError(f"bad escape at {self.i}")
            self.i += 2 + width
            return chr(int(digits, 16))
        if kind not in _ESC:
            raise GrammarSyntaxError(f"unknown escape \\{kind} at {self.i}")
        self.i += 2
        return _ESC[kind]

    def alternatives(self) -> Any:
        options = [self.sequence()]
        while self.i < len(self.text) and self.text[self.i] == "|":
            self.i += 1
            self.ws(newlines=True)
            options.append(self.sequence())
        return ("alt", tuple(options))

    def sequence(self) -> Any:
        items = []
        while True:
            self.ws()
            if self.i >= len(self.text) or self.text[self.i] in "|)\n":
                return ("seq", tuple(items))
            items.append(self.postfix(self.atom()))

    def atom(self) -> Any:
        c = self.text[self.i]
        if c == '"':
            self.i += 1
            out = []
            while self.text[self.i] != '"':
                out.append(self.char())
            self.i += 1
            return ("lit", "".join(out))
        if c == "[":
            self.i += 1
            negated = self.text[self.i] == "^"
            self.i += negated
            ranges = []
            while self.text[self.i] != "]":
                low = self.char()
                high = low
                if self.text[self.i] == "-" and self.text[self.i + 1] != "]":
                    self.i += 1
                    high = self.char()
                ranges.append((low, high))
            self.i += 1
            return ("class", negated, tuple(ranges))
        if c == "(":
            self.i += 1
            self.ws(newlines=True)
            inner = self.alternatives()
            self.ws(newlines=True)
            if self.text[self.i] != ")":
                raise GrammarSyntaxError(f"expected ) at {self.i}")
            self.i += 1
            return inner
        name = re.compile(r"[a-zA-Z0-9-]+").match(self.text, self.i)
        if not name:
            raise GrammarSyntaxError(f"unexpected {c!r} at {self.i}")
        self.i = name.end()
        return ("ref", name.group())

    def postfix(self, node: Any) -> Any:
        while self.i < len(self.text):
            c = self.text[self.i]
            if c in "*+?":
                self.i += 1
                node = ("rep", node, {"*": 0, "+": 1, "?": 0}[c], 1 if c == "?" else None)
            elif c == "{":
                m = re.compile(r"\{(\d+)(,(\d*))?\}").match(self.text, self.i)
                if not m:
                    raise GrammarSyntaxError(f"bad repetition at {self.i}")
                self.i = m.end()
                low = int(m.group(1))
                high = low if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                node = ("rep", node, low, high)
            else:
                return node
        return node


def parse(text: str) -> dict[str, Any]:
    """The rules of a GBNF grammar; raises GrammarSyntaxError."""
    reader = _Reader(text)
    rules: dict[str, Any] = {}
    while True:
        reader.ws(newlines=True)
        if reader.i >= len(text):
            break
        m = re.compile(r"([a-zA-Z0-9-]+)\s*::=").match(text, reader.i)
        if not m:
            raise GrammarSyntaxError(f"expected a rule at {reader.i}: {text[reader.i:reader.i + 40]!r}")
        reader.i = m.end()
        reader.ws(newlines=True)
        if m.group(1) in rules:
            raise GrammarSyntaxError(f"rule {m.group(1)} defined twice")
        rules[m.group(1)] = reader.alternatives()
    missing = {name for body in rules.values() for name in _refs(body)} - set(rules)
    if missing or "root" not in rules:
        raise GrammarSyntaxError(f"undefined rules: {sorted(missing) or ['root']}")
    return rules


def _refs(node: Any) -> set[str]:
    if node[0] == "ref":
        return {node[1]}
    if node[0] in ("alt", "seq"):
        return set().union(*(_refs(n) for n in node[1])) if node[1] else set()
    if node[0] == "rep":
        return _refs(node[1])
    return set()


def accepts(grammar: str, text: str) -> bool:
    """Whether ``text`` is in the language of ``grammar``'s root rule."""
    rules = parse(grammar)

    @lru_cache(maxsize=None)
    def rule_ends(name: str, i: int) -> frozenset[int]:
        return frozenset(ends(rules[name], i))

    def ends(node: Any, i: int) -> set[int]:
        kind = node[0]
        if kind == "lit":
            return {i + len(node[1])} if text.startswith(node[1], i) else set()
        if kind == "class":
            if i >= len(text):
                return set()
            inside = any(lo <= text[i] <= hi for lo, hi in node[2])
            return {i + 1} if inside != node[1] else set()
        if kind == "ref":
            return set(rule_ends(node[1], i))
        if kind == "alt":
            return set().union(*(ends(n, i) for n in node[1]))
        if kind == "seq":
            at = {i}
            for item in node[1]:
                at = set().union(*(ends(item, j) for j in at)) if at else set()
            return at
        _, inner, low, high = node
        at, seen, count = {i}, set(), 0
        while at and (high is None or count < high):
            if count >= low:
                seen |= at
            nxt = set().union(*(ends(inner, j) for j in at)) - (seen if count >= low else set())
            count += 1
            at = nxt
        if count >= low:
            seen |= at
        return seen

    # Each nesting level of the text costs a dozen frames here.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        return len(text) in rule_ends("root", 0)
    finally:
        sys.setrecursionlimit(limit)
