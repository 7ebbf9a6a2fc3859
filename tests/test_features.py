"""The feature-block grammar (Contract 1): pure, milliseconds."""

from __future__ import annotations

import ast
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrepro import features as fb
from tfrepro.errors import UserError

DESIGN_EXAMPLE = textwrap.dedent(
    """\
    import tensorflow as tf
    import keras

    # tfrepro: feature mixed_precision -- mixed_float16 compute policy
    keras.mixed_precision.set_global_policy("mixed_float16")
    # tfrepro: end

    # tfrepro: feature mirrored_strategy -- one replica per device
    # strategy = tf.distribute.MirroredStrategy()
    # tfrepro: else
    strategy = tf.distribute.get_strategy()
    # tfrepro: end
    """
)


def test_parses_the_design_example_with_states_and_descriptions():
    src = fb.parse(DESIGN_EXAMPLE, "repro.py")
    assert [(b.name, b.description, b.line, b.state) for b in src.blocks] == [
        ("mixed_precision", "mixed_float16 compute policy", 4, True),
        ("mirrored_strategy", "one replica per device", 8, False),
    ]
    assert src.feature_names == ("mirrored_strategy", "mixed_precision")


def test_render_switches_parts_and_keeps_line_numbers():
    src = fb.parse(DESIGN_EXAMPLE, "repro.py")
    out = src.render({"mirrored_strategy"})
    assert "\nstrategy = tf.distribute.MirroredStrategy()\n" in out
    assert "\n# strategy = tf.distribute.get_strategy()\n" in out
    assert '\n# keras.mixed_precision.set_global_policy("mixed_float16")\n' in out
    assert len(out.splitlines()) == len(DESIGN_EXAMPLE.splitlines())
    ast.parse(out)


def test_render_none_is_the_file_as_written():
    src = fb.parse(DESIGN_EXAMPLE, "repro.py")
    assert src.render(None) == DESIGN_EXAMPLE


def test_round_trip_is_byte_for_byte():
    src = fb.parse(DESIGN_EXAMPLE, "repro.py")
    flipped = src.set_states({"mixed_precision": False, "mirrored_strategy": True})
    assert flipped != DESIGN_EXAMPLE
    back = fb.parse(flipped, "repro.py").set_states({"mixed_precision": True, "mirrored_strategy": False})
    assert back == DESIGN_EXAMPLE


def test_indented_block_with_empty_lines_and_comments_round_trips():
    text = textwrap.dedent(
        """\
        def build():
            # tfrepro: feature norm -- custom norm layer
            # the user's own comment stays a comment
            x = custom(x)

            x = other(x)
            # tfrepro: else
            # x = stock(x)
            # tfrepro: end
            return x
        """
    )
    src = fb.parse(text, "m.py")
    assert src.blocks[0].state is True and src.blocks[0].indent == "    "
    off = src.set_states({"norm": False})
    assert "    # # the user's own comment stays a comment\n" in off
    assert "    #\n" in off  # the empty line, commented
    assert "    # x = custom(x)\n" in off and "\n    x = stock(x)\n" in off
    ast.parse(off)
    assert fb.parse(off, "m.py").set_states({"norm": True}) == text


def test_crlf_line_endings_survive():
    text = DESIGN_EXAMPLE.replace("\n", "\r\n")
    src = fb.parse(text, "w.py")
    flipped = src.set_states({"mirrored_strategy": True})
    assert "\r\nstrategy = tf.distribute.MirroredStrategy()\r\n" in flipped
    assert fb.parse(flipped, "w.py").set_states({"mirrored_strategy": False}) == text


def test_blocks_with_the_same_name_switch_together():
    text = "# tfrepro: feature a\nx = 1\n# tfrepro: end\ny = 2\n# tfrepro: feature a\n# z = 3\n# tfrepro: end\n"
    out = fb.parse(text, "f.py").render({"a"})
    assert out == "# tfrepro: feature a\nx = 1\n# tfrepro: end\ny = 2\n# tfrepro: feature a\nz = 3\n# tfrepro: end\n"


def test_export_removes_markers_and_inactive_parts():
    src = fb.parse(DESIGN_EXAMPLE, "repro.py")
    out = src.render({"mirrored_strategy"}, export=True)
    assert "tfrepro" not in out
    assert "set_global_policy" not in out
    assert "strategy = tf.distribute.MirroredStrategy()" in out
    assert "get_strategy" not in out
    ast.parse(out)


def test_export_puts_pass_where_a_suite_would_be_empty():
    text = textwrap.dedent(
        """\
        with scope():
            # tfrepro: feature cb -- a callback
            callbacks.append(cb)
            # tfrepro: end
        for i in range(3):
            # tfrepro: feature warm
            # lr = warm(i)
            # tfrepro: end
            print(i)
        """
    )
    out = fb.parse(text, "x.py").render(set(), export=True)
    ast.parse(out)
    assert out.splitlines()[:2] == ["with scope():", "    pass"]
    assert "print(i)" in out and out.count("pass") == 1


@pytest.mark.parametrize(
    "text,line,fragment",
    [
        ("# tfrepro: feature a\nx = 1\n", 1, "never closed"),
        ("x = 1\n# tfrepro: end\n", 2, "outside any feature block"),
        ("x = 1\n# tfrepro: else\n", 2, "outside any feature block"),
        (
            "# tfrepro: feature a\nx = 1\n# tfrepro: feature b\ny = 2\n# tfrepro: end\n# tfrepro: end\n",
            3,
            "do not nest",
        ),
        ("# tfrepro: feature Bad-Name\nx = 1\n# tfrepro: end\n", 1, "bad feature name"),
        ("# tfrepro: feature 9lives\nx = 1\n# tfrepro: end\n", 1, "bad feature name"),
        ("# tfrepro: feature\nx = 1\n# tfrepro: end\n", 1, "without a name"),
        ("# tfrepro: feature a\n\n# tfrepro: end\n", 1, "holds no code"),
        ("# tfrepro: feature a\nx = 1\n# tfrepro: else\n# tfrepro: end\n", 3, "holds no code"),
        ("# tfrepro: feature a\n# # just a note\n# tfrepro: end\n", 1, "holds no code"),
        ("# tfrepro: feature a\nx = 1\n# y = 2\n# tfrepro: end\n", 3, "mixes commented and live"),
        ("# tfrepro: feature a\nx = 1\n# tfrepro: else\ny = 2\n# tfrepro: end\n", 1, "both parts"),
        ("# tfrepro: feature a\n# x = 1\n# tfrepro: else\n# y = 2\n# tfrepro: end\n", 1, "both parts"),
        (
            "# tfrepro: feature a\nx = 1\n# tfrepro: else\n# y = 1\n# tfrepro: else\n# z = 1\n# tfrepro: end\n",
            5,
            "second `else`",
        ),
        ("# tfrepro: featur a\nx = 1\n", 1, "unknown tfrepro marker"),
        ("    # tfrepro: feature a\nx = 1\n    # tfrepro: end\n", 2, "indented less"),
    ],
)
def test_malformed_blocks_name_file_and_line(text, line, fragment):
    with pytest.raises(UserError) as info:
        fb.parse(text, "proj/train.py")
    err = info.value
    assert err.exit_code == 2
    assert err.where == f"proj/train.py:{line}"
    assert fragment in err.message
    assert err.hint


def test_prose_comment_in_a_live_part_is_not_an_error():
    src = fb.parse("# tfrepro: feature a\n# use fp16 for speed\nx = 1\n# tfrepro: end\n", "f.py")
    assert src.blocks[0].state is True


# -- property: any generated file round-trips and renders valid Python ------

names = st.sampled_from(["alpha", "beta", "gamma", "delta"])


@st.composite
def marked_files(draw):
    lines = ["import os\n"]
    states: dict[str, bool] = {}
    for i in range(draw(st.integers(1, 5))):
        name = draw(names)
        # blocks sharing a name share a state as written (they switch together)
        on = states.setdefault(name, draw(st.booleans()))
        has_else = draw(st.booleans())
        indent = draw(st.sampled_from(["", "    "]))
        if indent:
            lines.append("if True:\n")
        on_code = [f"{indent}v{i}_on = {j}\n" for j in range(draw(st.integers(1, 3)))]
        if draw(st.booleans()):
            on_code.insert(1, "\n")
        lines.append(f"{indent}# tfrepro: feature {name} -- d{i}\n")
        lines.extend(on_code if on else [fb.comment_line(x, indent) for x in on_code])
        if has_else:
            off_code = [f"{indent}v{i}_off = 0\n"]
            lines.append(f"{indent}# tfrepro: else\n")
            lines.extend([fb.comment_line(x, indent) for x in off_code] if on else off_code)
        lines.append(f"{indent}# tfrepro: end\n")
        if indent:
            lines.append("    pass\n")
    return "".join(lines), states


@settings(max_examples=200, deadline=None)
@given(marked_files(), st.data())
def test_any_states_round_trip_and_render_valid_python(file_and_states, data):
    text, states = file_and_states
    src = fb.parse(text, "gen.py")
    want = {n: data.draw(st.booleans()) for n in states}
    switched = src.set_states(want)
    ast.parse(switched)
    reparsed = fb.parse(switched, "gen.py")
    assert all(b.state == want[b.name] for b in reparsed.blocks)
    assert reparsed.set_states(states) == text
    enabled = {n for n, v in want.items() if v}
    exported = src.render(enabled, export=True)
    ast.parse(exported)
    assert "tfrepro" not in exported
