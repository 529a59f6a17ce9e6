"""The tool-call grammar (orchestrator.grammar): what it accepts from the
shipped tools, and what it does with hostile schemas: a well-formed grammar
with the field loosened and said so, or a clear refusal, never a crash."""

from __future__ import annotations

import json
import random

import pytest

from orchestrator.contract import ToolSpec
from orchestrator.grammar import MAX_DEPTH, MAX_ENUM, GrammarRefused, json_text, literal, tool_grammar
from orchestrator.tool_protocols import TextProtocol
from orchestrator.toolset import tool_specs
from tests.gbnf import accepts, parse

SHIPPED = tool_grammar(tool_specs()).text


def call(name: str, args: object, before: str = "") -> str:
    return f'{before}<tool name="{name}">{json_text(args)}</tool>'


@pytest.mark.parametrize("text", [
    call("list_files", {"path": "."}),
    call("list_files", {}, before="Let me look at the files first.\n"),
    call("list_files", {"depth": 3, "path": "src"}),
    call("read_file", {"path": "calc.py", "max_lines": None, "start_line": 2}),
    call("bash", {"command": "python3 -m pytest -q", "timeout_s": 30}),
    call("write_file", {"content": "x = 1\n\t\"é\" 😀", "path": "a.py"}),
    call("edit_file", {"new": "b", "old": "a", "path": "a.py"}),
    call("submit", {"summary": "fixed mean()"}),
    call("submit", {}, before="if a < b and c <t or <to <too:\n"),
])
def test_the_shipped_tools_grammar_accepts_well_formed_calls(text):
    assert accepts(SHIPPED, text)
    calls = TextProtocol().calls(_payload(text), turn=0)
    assert calls and all(isinstance(json.loads(c.arguments), dict) for c in calls)


@pytest.mark.parametrize("text", [
    # The issue's demo answer: JSON then junk then a second block.
    '<tool name="list_files">{"path": "."}iatrics 겪을 수 있는 <tool name="list_files">{}</tool>',
    call("list_files", {"depth": 11}),  # depth is 1..10
    call("list_files", {"path": "."}) + " and more",  # nothing after the call
    call("bash", {"command": ""}),  # minLength 1
    call("bash", {}),  # command is required
    call("read_file", {"path": "a", "extra": 1}),  # extra fields are forbidden
    call("delete_everything", {}),  # not an allowed tool
    '<tool name="submit">{"summary": "unterminated}</tool>',
    "I think the task is done.",  # no call at all
    'a <tool name="bash"> <tool name="submit">{}</tool>',  # a tool block opened in the free text
    "x" * 1000 + call("submit", {}),  # past the free text's bound
    "<" * 300,  # what Gemma 3 270M wrote given "<"+ in the free text
    "<<" + call("submit", {}),
    # An edit and a call in one answer: one or the other.
    call("submit", {}, before="calc.py\n<<<<<<< SEARCH\na < b\n=======\na <= b\n>>>>>>> REPLACE\n"),
])
def test_the_shipped_tools_grammar_refuses_what_the_perimeter_would_reject(text):
    assert not accepts(SHIPPED, text)


def test_only_the_allowed_tools_are_in_the_grammar():
    text = tool_grammar(tool_specs(("read_file", "submit"))).text
    assert accepts(text, call("submit", {}))
    assert not accepts(text, call("bash", {"command": "ls"}))
    assert not accepts(text, "a.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE")  # no edit_file


def test_the_grammar_does_not_depend_on_dict_order():
    shuffled = []
    rng = random.Random(3)
    for spec in tool_specs():
        props = list(spec.parameters["properties"].items())
        rng.shuffle(props)
        shuffled.append(spec.model_copy(update={"parameters": {**spec.parameters, "properties": dict(props)}}))
    assert tool_grammar(tuple(shuffled)).text == SHIPPED


EDITS = ["calc.py\n<<<<<<< SEARCH\n    return a < b\n\n=======\n    return a <= b\n>>>>>>> REPLACE",
         "I will fix it.\ncalc.py\n<<<<<<< SEARCH\nx\n=======\n>>>>>>> REPLACE"]


def test_anchored_edits_only_where_asked_for():
    with_edits = tool_grammar(tool_specs(), edit_tool="edit_file").text
    for text in EDITS:
        assert accepts(with_edits, text) and not accepts(SHIPPED, text)
        assert TextProtocol().calls(_payload(text), turn=0)[0].name == "edit_file"
    assert not accepts(with_edits, EDITS[0] + " and more")
    assert not accepts(tool_grammar(tool_specs(("read_file", "submit")), edit_tool="edit_file").text, EDITS[0])
    assert all(" ::= " in line for line in with_edits.splitlines())


def test_every_rule_is_one_line():
    # A raw newline inside a literal or a class reads differently per parser.
    assert all(" ::= " in line for line in SHIPPED.splitlines())


def test_what_the_shipped_grammar_loosens_is_said():
    loosened = tool_grammar(tool_specs()).loosened
    assert "bash.command: maxLength 100000 not expressed (over 64)" in loosened
    assert all(":" in item for item in loosened)


def spec(schema: object, name: str = "tool") -> ToolSpec:
    return ToolSpec(name=name, description="d", parameters=schema)  # type: ignore[arg-type]


def obj(**props: object) -> dict:
    return {"type": "object", "properties": props, "required": sorted(props), "additionalProperties": False}


def deep(levels: int) -> tuple[dict, object]:
    schema: dict = {"type": "string"}
    value: object = "leaf"
    for _ in range(levels):
        schema, value = obj(a=schema), {"a": value}
    return schema, value


@pytest.mark.parametrize("levels", [3, MAX_DEPTH + 5, 60])
def test_deep_nesting_gives_a_grammar_loosened_past_the_limit(levels):
    schema, value = deep(levels)
    grammar = tool_grammar((spec(schema),))
    assert accepts(grammar.text, call("tool", value))
    assert any("nested deeper" in item for item in grammar.loosened) == (levels > MAX_DEPTH)


def test_a_schema_nested_past_pythons_recursion_limit_is_no_crash():
    schema, _ = deep(3)
    for _ in range(20_000):
        schema = {"type": "object", "properties": {"a": schema}}
    grammar = tool_grammar((ToolSpec.model_construct(name="tool", description="d", parameters=schema),))
    value: object = [1, {"b": None}]  # below the depth limit any JSON value is taken
    for _ in range(MAX_DEPTH + 2):
        value = {"a": value}
    assert accepts(grammar.text, call("tool", value))
    assert not accepts(grammar.text, call("tool", {"a": [1]}))


def test_a_huge_enum_is_loosened_and_a_small_one_is_exact():
    huge = tool_grammar((spec(obj(k={"enum": [f"v{i}" for i in range(MAX_ENUM * 40)]})),))
    assert any("enum of" in item for item in huge.loosened)
    assert accepts(huge.text, call("tool", {"k": "anything"}))
    small = tool_grammar((spec(obj(k={"enum": ["a", 1, None, "é\"\\", {"x": [1]}]})),))
    for value in ["a", 1, None, "é\"\\", {"x": [1]}]:
        assert accepts(small.text, call("tool", {"k": value}))
    assert not accepts(small.text, call("tool", {"k": "b"}))


ODD_KEYS = ["", " ", '"', "\\", "a\"b\\c", "line\nbreak", "tab\there", "\x00nul", "é", "日本語", "😀",
            "\u2028", "<tool", "</tool>", "::=", "# not a comment", "[^a-z]", "a" * 300, "\ud800"]


def test_odd_key_names_are_written_exactly():
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in ODD_KEYS},
              "required": ODD_KEYS, "additionalProperties": False}
    grammar = tool_grammar((spec(schema),))
    parse(grammar.text)
    # Each key as JSON writes it: unicode kept, a lone surrogate escaped.
    members = ", ".join(f"{json_text(k)}: {i}" for i, k in enumerate(sorted(ODD_KEYS)))
    assert accepts(grammar.text, f'<tool name="tool">{{{members}}}</tool>')
    assert not accepts(grammar.text, f'<tool name="tool">{{{members.replace(": 3", ": x")}}}</tool>')


def test_unicode_and_control_characters_survive_as_escapes():
    for text in ["\x00", "\x7f", "é", "\u2028", "😀", "\ud800"]:
        written = literal(text)
        assert written.isascii() and accepts(f"root ::= {written}\n", text)


@pytest.mark.parametrize(("schema", "value", "said"), [
    (obj(p={"type": "string", "pattern": "^[a-z]+(?<=x)$"}), {"p": "anything"}, "pattern"),
    (obj(p={"type": "string", "format": "date-time"}), {"p": "x"}, "format"),
    (obj(p={"allOf": [{"type": "string"}, {"maxLength": 3}]}), {"p": [1, {"z": None}]}, "allOf"),
    (obj(p={"not": {"type": "null"}}), {"p": 1.5e3}, "not"),
    (obj(p={"type": "integer", "minimum": -5, "maximum": 10_000}), {"p": -7}, "maximum"),
    (obj(p={"type": "number", "exclusiveMinimum": 0}), {"p": 0.5}, "number bounds"),
    (obj(p={"$ref": "#/nowhere"}), {"p": True}, "not found"),
    (obj(p={"$ref": "http://example.com/s.json"}), {"p": "x"}, "not resolved"),
    (obj(p={"type": "array", "items": {"type": "integer"}, "maxItems": 2}), {"p": [1, 2, 3]}, "item counts"),
    (obj(p={"type": ["string", "null"]}), {"p": None}, None),
    (obj(p={"type": 5}), {"p": "anything"}, None),
    (obj(p={"type": "tuple"}), {"p": 1}, "unknown type"),
    (obj(p="not a schema"), {"p": {}}, "not a schema"),
    (obj(p={"anyOf": []}), {"p": 1}, "anyOf without options"),
    ({"type": "string"}, {"any": "object"}, "not an object schema"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "ghost"]}, {"x": 1}, "required"),
    ({"type": "object", "properties": "nope", "required": 3}, {"x": 1}, None),
    ({"type": "object", "properties": {"a": {"type": "string"}}}, {"a": "x"}, "additional properties"),
])
def test_inexpressible_features_loosen_the_field_and_say_so(schema, value, said):
    grammar = tool_grammar((spec(schema),))
    assert accepts(grammar.text, call("tool", value))
    if said is not None:
        assert any(said in item for item in grammar.loosened), grammar.loosened


def test_a_recursive_schema_gives_a_recursive_rule():
    schema = {"type": "object", "properties": {"tree": {"$ref": "#/$defs/node"}}, "required": ["tree"],
              "$defs": {"node": {"type": "object", "additionalProperties": False, "required": ["kids"],
                                 "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}}
    grammar = tool_grammar((spec(schema),))
    assert accepts(grammar.text, call("tool", {"tree": {"kids": [{"kids": []}, {"kids": [{"kids": []}]}]}}))
    assert not accepts(grammar.text, call("tool", {"tree": {"kids": [{"leaf": 1}]}}))


def test_optional_members_may_each_be_absent():
    schema = {"type": "object", "additionalProperties": False,
              "properties": {n: {"type": "boolean"} for n in "abcd"}}
    grammar = tool_grammar((spec(schema),))
    for mask in range(16):
        value = {n: True for i, n in enumerate("abcd") if mask >> i & 1}
        assert accepts(grammar.text, call("tool", value)), value
    assert not accepts(grammar.text, '<tool name="tool">{, "a": true}</tool>')


@pytest.mark.parametrize(("specs", "why"), [
    ((), "no tools"),
    ((spec(obj(), name='bad"name'),), "cannot be written"),
    ((spec(obj(), name="日本"),), "cannot be written"),
    (tuple(spec(obj(**{f"p{j}": {"enum": [f"{i}-{j}-{'x' * 40}" for i in range(MAX_ENUM)]} for j in range(8)}),
                name=f"t{i}") for i in range(8)), "too large"),
])
def test_what_cannot_be_written_is_refused_clearly(specs, why):
    with pytest.raises(GrammarRefused, match=why):
        tool_grammar(specs)


def _payload(text: str):
    from orchestrator.envelope import Payload

    return Payload(text=text)
