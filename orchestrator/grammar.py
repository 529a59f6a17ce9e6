"""One grammar per run, from the tools the policy allows: what the text
protocol lets a model write, so that every tool call it makes parses.

The language: free text (at most ``FREE_TEXT_ITEMS`` characters or so) that
never opens a tool block, then one ``<tool name="NAME">{json}</tool>`` with
NAME among the tools and the JSON an object that satisfies that tool's
argument schema (or, asked for, one anchored search/replace edit), then the
end of the turn.
It is written in GBNF, which llama.cpp and llama-cpp-python read as is and
XGrammar (vLLM's and SGLang's default grammar backend) reads as its EBNF;
how each engine is sent it is ``orchestrator.adapters.model_client.engines``' concern.

A schema feature the grammar cannot express (a pattern, a length, a bound
over a wide range, a combinator other than anyOf/oneOf, nesting past
``MAX_DEPTH``, an enum past ``MAX_ENUM``) gets a looser rule for that field,
named in ``ToolGrammar.loosened``: the perimeter's schema check still judges
the call. A grammar that cannot be written at all (no tools, a tool name the
text protocol cannot carry, a grammar past ``MAX_GRAMMAR_CHARS``) is refused
with ``GrammarRefused``. Pure: no I/O, deterministic output (replay compares
requests byte for byte).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from orchestrator.contract import Frozen, ToolSpec
from orchestrator.errors import ContractError

MAX_DEPTH = 12
MAX_ENUM = 256
MAX_RANGE = 64  # integer bounds are written as the alternatives when the range is this small
MAX_LITERAL_LENGTH = 64  # maxLength written as a bounded repetition up to this
MAX_GRAMMAR_CHARS = 512_000
# The text before the call is bounded: a small model that rambles (or echoes
# its prompt) is brought to its call instead of to the output ceiling.
FREE_TEXT_ITEMS = 160
TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # what TextProtocol's parser reads

# Keywords that only describe (or that the perimeter checks and the grammar
# need not: the grammar may be looser than the schema, never stricter).
_DESCRIPTIVE = frozenset({
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions",
})

_BASE_RULES = (
    'ws ::= " "?',
    'json-char ::= [^"\\\\\\x00-\\x1f] | "\\\\" (["\\\\/bfnrt] | "u" hex hex hex hex)',
    "hex ::= [0-9a-fA-F]",
    'json-string ::= "\\"" json-char* "\\""',
    'json-int ::= "-"? ("0" | [1-9] [0-9]*)',
    'json-number ::= json-int ("." [0-9]+)? ([eE] [-+]? [0-9]+)?',
    'json-bool ::= "true" | "false"',
    'json-null ::= "null"',
    'json-object ::= "{" ws (json-string ws ":" ws json-value (ws "," ws json-string ws ":" ws json-value)*)? ws "}"',
    'json-array ::= "[" ws (json-value (ws "," ws json-value)*)? ws "]"',
    "json-value ::= json-object | json-array | json-string | json-number | json-bool | json-null",
    # Free text that never opens a tool block: a "<" is followed by anything
    # but "<" or the rest of "tool". One "<" at a time: Gemma 3 270M, given
    # "<"+, wrote "<" until the output ceiling (an edit's markers are the
    # edit block's own).
    'text-item ::= [^<] | "<" ([^<t] | "t" ([^<o] | "o" ([^<o] | "o" [^<l])))',
    f"free-text ::= text-item{{0,{FREE_TEXT_ITEMS}}}",
)
# TextProtocol's anchored edit: a path line, SEARCH lines, =======, REPLACE
# lines; a line of either part may not start with "=" or ">" (the markers).
# Newlines are written as escapes, never raw, inside literals and classes.
_EDIT_RULES = (
    'edit-block ::= edit-path "\\n<<<<<<< SEARCH\\n" edit-lines "=======\\n" edit-lines ">>>>>>> REPLACE"',
    f"edit-path ::= [^\\n<>=]{{1,{FREE_TEXT_ITEMS}}}",
    'edit-lines ::= ([^=>\\n] [^\\n]* "\\n" | "\\n")*',
)


# The event recorded for each call (or call-less answer) that a constrained
# request should have made impossible: the engine did not honour the constraint.
NOT_HONOURED = "constraint_not_honoured"


class ConstraintUse(Frozen):
    """How a run used constrained decoding, as ``escrow report`` says it:
    ``calls`` sent with the constraint, ``not_honoured`` calls (or call-less
    answers) that broke it anyway, ``loosened`` fields."""

    kind: str
    engine: str
    calls: int
    not_honoured: int
    loosened: int = 0

    def text(self) -> str:
        loose = f", {self.loosened} field(s) loosened" if self.loosened else ""
        return (f"{self.kind} ({self.engine}) on {self.calls} call(s); not honoured "
                f"{self.not_honoured}{loose}")


class GrammarRefused(ContractError):
    """No grammar can be written for these tools; the run goes unconstrained
    only if the user did not ask for the constraint."""


class ToolGrammar(Frozen):
    """The grammar (GBNF) and the fields it describes more loosely than their
    schema, as ``tool.path: what was loosened``."""

    text: str
    loosened: tuple[str, ...] = ()


def literal(text: str) -> str:
    """``text`` as a GBNF/EBNF string literal: printable ASCII kept, the rest escaped."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def json_text(value: Any) -> str:
    """How the model must write ``value`` in JSON: compact, unicode kept, but
    lone surrogates (which no UTF-8 text carries) escaped."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True, separators=(", ", ": "))
    return text


class _Builder:
    def __init__(self, tool: str, root: Mapping[str, Any], rules: dict[str, str], loosened: list[str]) -> None:
        self.tool = tool
        self.root = root
        self.rules = rules
        self.loosened = loosened
        self.refs: dict[str, str] = {}

    def loosen(self, path: str, why: str) -> None:
        self.loosened.append(f"{self.tool}{path}: {why}")

    def rule(self, hint: str, body: str) -> str:
        base = re.sub(r"[^a-z0-9]+", "-", hint.lower()).strip("-")[:40] or "r"
        name = f"{base}-{len(self.rules)}"
        self.rules[name] = body
        return name

    def value(self, schema: Any, path: str, depth: int) -> str:
        """A rule expression for a value satisfying ``schema``."""
        if schema is True or schema == {}:
            return "json-value"
        if not isinstance(schema, Mapping):
            self.loosen(path, "not a schema object; any JSON value")
            return "json-value"
        if depth > MAX_DEPTH:
            self.loosen(path, f"nested deeper than {MAX_DEPTH}; any JSON value")
            return "json-value"
        if "$ref" in schema:
            return self.ref(schema["$ref"], path, depth)
        if "const" in schema:
            return literal(json_text(schema["const"]))
        if "enum" in schema:
            return self.enum(schema["enum"], path)
        for combinator in ("anyOf", "oneOf"):
            if combinator in schema:
                options = schema[combinator]
                if not isinstance(options, list) or not options:
                    self.loosen(path, f"{combinator} without options; any JSON value")
                    return "json-value"
                alternatives = [self.value(s, f"{path}|{i}", depth + 1) for i, s in enumerate(options)]
                return self.rule(path or "any-of", " | ".join(dict.fromkeys(alternatives)))
        unsupported = sorted(k for k in ("allOf", "not", "if", "then", "else", "patternProperties",
                                          "propertyNames", "dependentSchemas", "dependentRequired",
                                          "unevaluatedProperties", "contains", "prefixItems") if k in schema)
        if unsupported:
            self.loosen(path, f"{', '.join(unsupported)} not expressed; any JSON value")
            return "json-value"
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if isinstance(k, str)]
            if not kinds:
                self.loosen(path, "type list without names; any JSON value")
                return "json-value"
            alternatives = [self.typed(k, schema, path, depth) for k in kinds]
            return self.rule(path or "types", " | ".join(dict.fromkeys(alternatives)))
        if isinstance(kind, str):
            return self.typed(kind, schema, path, depth)
        if "properties" in schema:
            return self.typed("object", schema, path, depth)
        if "items" in schema:
            return self.typed("array", schema, path, depth)
        return "json-value"

    def ref(self, target: Any, path: str, depth: int) -> str:
        if not isinstance(target, str) or not target.startswith("#/"):
            self.loosen(path, f"$ref {str(target)[:40]!r} not resolved; any JSON value")
            return "json-value"
        if target in self.refs:
            return self.refs[target]
        node: Any = self.root
        for part in target[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is None:
            self.loosen(path, f"$ref {target[:40]!r} not found; any JSON value")
            return "json-value"
        # Named before its body is written, so a recursive schema refers to itself.
        name = self.rule(target.rsplit("/", 1)[-1], "")
        self.refs[target] = name
        self.rules[name] = self.value(node, path, depth + 1)
        return name

    def enum(self, values: Any, path: str) -> str:
        if not isinstance(values, list) or not values:
            self.loosen(path, "enum without values; any JSON value")
            return "json-value"
        if len(values) > MAX_ENUM:
            self.loosen(path, f"enum of {len(values)} values (over {MAX_ENUM}); any JSON value of that kind")
            kinds = {type(v) for v in values}
            return "json-string" if kinds == {str} else "json-value"
        texts = dict.fromkeys(literal(json_text(v)) for v in values)
        return self.rule(path or "enum", " | ".join(texts))

    def typed(self, kind: str, schema: Mapping[str, Any], path: str, depth: int) -> str:
        if kind == "string":
            return self.string(schema, path)
        if kind == "integer":
            return self.integer(schema, path)
        if kind == "number":
            if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")):
                self.loosen(path, "number bounds not expressed")
            return "json-number"
        if kind == "boolean":
            return "json-bool"
        if kind == "null":
            return "json-null"
        if kind == "object":
            return self.object(schema, path, depth)
        if kind == "array":
            return self.array(schema, path, depth)
        self.loosen(path, f"unknown type {kind[:40]!r}; any JSON value")
        return "json-value"

    def string(self, schema: Mapping[str, Any], path: str) -> str:
        for key in ("pattern", "format", "contentEncoding", "contentMediaType"):
            if key in schema:
                self.loosen(path, f"{key} not expressed; any string")
        low = schema.get("minLength", 0)
        high = schema.get("maxLength")
        low = low if isinstance(low, int) and not isinstance(low, bool) and low >= 0 else 0
        if not (isinstance(high, int) and not isinstance(high, bool) and high >= low):
            high = None
        if high is not None and high <= MAX_LITERAL_LENGTH:
            return self.rule(path or "string", f'"\\"" json-char{{{low},{high}}} "\\""')
        if high is not None:
            self.loosen(path, f"maxLength {high} not expressed (over {MAX_LITERAL_LENGTH})")
        if low == 0:
            return "json-string"
        if low > 1:
            self.loosen(path, f"minLength {low} written as 1")
        return self.rule(path or "string", '"\\"" json-char+ "\\""')

    def integer(self, schema: Mapping[str, Any], path: str) -> str:
        def bound(key: str) -> int | None:
            value = schema.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return None
            return int(value) if float(value).is_integer() else None

        low, high = bound("minimum"), bound("maximum")
        if (x := bound("exclusiveMinimum")) is not None:
            low = x + 1 if low is None else max(low, x + 1)
        if (x := bound("exclusiveMaximum")) is not None:
            high = x - 1 if high is None else min(high, x - 1)
        if "multipleOf" in schema:
            self.loosen(path, "multipleOf not expressed")
        if low is not None and high is not None and 0 <= high - low < MAX_RANGE:
            return self.rule(path or "int", " | ".join(literal(str(n)) for n in range(low, high + 1)))
        if high is not None:
            self.loosen(path, f"maximum {high} not expressed")
        if low is not None and low >= 1:
            if low > 1:
                self.loosen(path, f"minimum {low} written as 1")
            return self.rule(path or "int", "[1-9] [0-9]*")
        if low is not None and low >= 0:
            return self.rule(path or "int", '"0" | [1-9] [0-9]*')
        if low is not None:
            self.loosen(path, f"minimum {low} not expressed")
        return "json-int"

    def object(self, schema: Mapping[str, Any], path: str, depth: int) -> str:
        props = schema.get("properties")
        extra = schema.get("additionalProperties", True)
        if not isinstance(props, Mapping) or not props:
            if extra is False:
                return self.rule(path or "empty", '"{" ws "}"')
            return "json-object"
        required = {r for r in schema.get("required", ()) if isinstance(r, str)}
        # The order the prompt's signature shows (TextProtocol._signature):
        # required first, then by name; dict order is not kept by the store.
        names = sorted((n for n in props if isinstance(n, str)), key=lambda n: (n not in required, n))
        missing = sorted(required - set(names))
        if missing:
            self.loosen(path, f"required {missing[:3]} without a schema; any JSON object")
            return "json-object"
        members = []
        for name in names:
            value = self.value(props[name], f"{path}.{name}", depth + 1)
            members.append((name in required, f'{literal(json_text(name))} ws ":" ws {value}'))
        if extra is not False:
            self.loosen(path, "additional properties left out")
        firsts = [m for req, m in members if req]
        optional = [m for req, m in members if not req]
        # Optional members keep their order, each may be absent: with a
        # required one before them each is (", " member)?; without, the
        # first present one has no comma (one rule per position, linear).
        if firsts:
            body = ' ws "," ws '.join(firsts) + "".join(f' (ws "," ws {m})?' for m in optional)
        else:
            # tails[i]: the members after position i, each with its comma.
            tails: list[str] = [""] * (len(optional) + 1)
            for i in reversed(range(1, len(optional))):
                tails[i] = self.rule(f"{path}-tail", f'(ws "," ws {optional[i]})? {tails[i + 1]}'.rstrip())
            head = ""
            for i in reversed(range(len(optional))):
                body = f"{optional[i]} {tails[i + 1]}".rstrip() + (f" | {head}" if head else "")
                head = self.rule(f"{path}-head", body)
            body = f"{head}?"
        return self.rule(path or "args", f'"{{" ws {body} ws "}}"')

    def array(self, schema: Mapping[str, Any], path: str, depth: int) -> str:
        if any(k in schema for k in ("minItems", "maxItems", "uniqueItems")):
            self.loosen(path, "item counts not expressed")
        item = self.value(schema.get("items", True), f"{path}[]", depth + 1)
        return self.rule(path or "array", f'"[" ws ({item} (ws "," ws {item})*)? ws "]"')


def tool_grammar(specs: tuple[ToolSpec, ...], edit_tool: str | None = None) -> ToolGrammar:
    """The text protocol's grammar for these tools (see the module docstring).
    With ``edit_tool`` among them, an anchored edit may stand for its call: off
    by default, as Gemma 3 270M filled an edit's lines with "<" to the output
    ceiling (the tool's JSON form stays)."""
    if not specs:
        raise GrammarRefused("no tools are allowed: a tool-call grammar needs at least one")
    rules: dict[str, str] = {}
    loosened: list[str] = []
    calls = []
    edits = edit_tool is not None and any(spec.name == edit_tool for spec in specs)
    for spec in specs:
        if not TOOL_NAME.match(spec.name):
            raise GrammarRefused(
                f"tool name {spec.name[:60]!r} cannot be written in the text protocol's <tool name=...> tag",
                tool=spec.name[:60])
        builder = _Builder(spec.name, spec.parameters, rules, loosened)
        params = spec.parameters
        if isinstance(params, Mapping) and (params.get("type") == "object" or "properties" in params):
            args = builder.object(params, "", 0)
        else:  # the perimeter's parse layer takes one JSON object, whatever the schema says
            builder.loosen("", "arguments schema is not an object schema; any JSON object")
            args = "json-object"
        calls.append(f'{literal(spec.name + chr(34) + ">")} {args}')
    head = [
        "root ::= free-text tool-call" + (' | (free-text "\\n")? edit-block' if edits else ""),
        'tool-call ::= "<tool name=\\"" (' + " | ".join(calls) + ') "</tool>"',
    ]
    tail = list(_BASE_RULES) + (list(_EDIT_RULES) if edits else [])
    text = "\n".join(head + [f"{name} ::= {body}" for name, body in rules.items()] + tail) + "\n"
    if len(text) > MAX_GRAMMAR_CHARS:
        raise GrammarRefused(
            f"the tool-call grammar would be {len(text):,} characters (limit {MAX_GRAMMAR_CHARS:,}): "
            "the tools' schemas are too large to constrain", chars=len(text))
    return ToolGrammar(text=text, loosened=tuple(dict.fromkeys(loosened)))
