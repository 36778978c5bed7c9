"""Reading an LLM's reply: exactly one diff, and its stated expectation."""

import pytest

from infrarsi.proposers.reply import ReplyRejected, parse_reply

DIFF = "--- a/model.py\n+++ b/model.py\n@@ -1,1 +1,1 @@\n-x = 1\n+x = 2\n"


def test_one_fenced_diff_and_its_expectation():
    reply = parse_reply(
        f"Sure.\n```diff\n{DIFF}```\n```json\n"
        '{"step_time_ratio": 0.8, "peak_mem_ratio": 1.1, "addresses": "attn"}\n```'
    )
    assert reply.diff == DIFF
    assert (reply.expectation.step_time_ratio, reply.expectation.peak_mem_ratio) == (0.8, 1.1)
    assert reply.expectation.addresses == "attn" and reply.note == ""


def test_a_bare_diff_without_fences_is_read_without_the_prose_after_it():
    assert parse_reply("Here:\n" + DIFF).diff == DIFF
    assert parse_reply("Here:\n" + DIFF + "\nThis removes the mask.\n").diff == DIFF


def test_a_diff_in_a_python_block_is_read():
    assert parse_reply(f"```python\n{DIFF}```").diff == DIFF


@pytest.mark.parametrize(
    "text, reason",
    [
        ("I would fuse the attention.", "no unified diff"),
        (f"```diff\n{DIFF}```\nand also\n```diff\n{DIFF}```", "2 diffs; exactly one"),
        ("```diff\n--- a/model.py\n+++ b/model.py\n+x = 2\n```", "no hunk"),
    ],
)
def test_a_reply_without_exactly_one_diff_is_rejected_with_the_reason(text, reason):
    with pytest.raises(ReplyRejected, match=reason):
        parse_reply(text)


@pytest.mark.parametrize(
    "json_text",
    ['{"step_time_ratio": -1}', '{"step_time_ratio": "fast"}', '{"peak_mem_ratio": 0.5'],
)
def test_an_unusable_expectation_leaves_no_prior_and_says_why(json_text):
    reply = parse_reply(f"```diff\n{DIFF}```\n```json\n{json_text}\n```")
    assert reply.expectation.step_time_ratio == 1.0 and reply.expectation.peak_mem_ratio == 1.0
    assert "expectation was not used" in reply.note
