"""List-valued SimConfig fields in sweep specs and plans (tree_topk_acceptance, the bands policy's
num_speculative_tokens_per_batch_size): given in [fixed] as a list, on a [grid] axis as a list of lists, strictly
typed like every other value."""

import textwrap

import pytest

from specsim.errors import ConfigError
from specsim.sweep import load_spec

HEAD = """
[fixed]
hardware = "h100-sxm"
target = "llama-3.1-8b"
draft = "llama-3.2-1b"
alpha = 0.7
requests = 8
output_len = 16
"""


def _spec(tmp_path, body):
    p = tmp_path / "s.toml"
    p.write_text(textwrap.dedent(HEAD + body))
    return p


def test_lists_in_fixed_and_on_a_grid_axis(tmp_path):
    spec = load_spec(_spec(tmp_path, 'speculative_token_tree = \'{"widths": [2, 1]}\'\n'
                                     "tree_topk_acceptance = [0.7, 0.8]\n[grid]\nbatch = [1, 4]\n"))
    assert len(spec) == 2 and spec.points[0].speculation.tree_topk_acceptance == (0.7, 0.8)
    bands = load_spec(_spec(tmp_path, 'policy = "bands"\n[grid]\nnum_speculative_tokens_per_batch_size = '
                                      '[[[1, 8, 4], [9, 64, 2]], [[1, 64, 3]]]\n'))
    assert [p.speculation.num_speculative_tokens_per_batch_size for p in bands.points] == \
        [((1, 8, 4), (9, 64, 2)), ((1, 64, 3),)]
    assert bands.ids[0] != bands.ids[1]


@pytest.mark.parametrize("value, words", [
    ('[0.7, "0.8"]', "numbers"), ("[0.7, true]", "numbers"), ("[]", "non-empty"), ("[0.7, nan]", "finite"),
])
def test_bad_list_values_are_one_line(tmp_path, value, words):
    with pytest.raises(ConfigError, match=words) as e:
        load_spec(_spec(tmp_path, f"speculative_token_tree = '[[0], [1]]'\ntree_topk_acceptance = {value}\n"
                                  "[grid]\nbatch = [1]\n"))
    assert "fixed.tree_topk_acceptance" in str(e.value)


def test_bands_must_be_integer_triples(tmp_path):
    for value in ("[[1, 8, 4.5]]", "[[1, 8]]", "[1, 8, 4]"):
        with pytest.raises(ConfigError, match="num_speculative_tokens_per_batch_size"):
            load_spec(_spec(tmp_path, f'policy = "bands"\nnum_speculative_tokens_per_batch_size = {value}\n'
                                      "[grid]\nbatch = [1]\n"))


def test_scalar_fields_still_refuse_lists(tmp_path):
    with pytest.raises(ConfigError, match="scalars"):
        load_spec(_spec(tmp_path, "[grid]\nbatch = [[1, 2]]\n"))
