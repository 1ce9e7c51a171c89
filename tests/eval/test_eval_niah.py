"""NIAH: metrics on hand-made grids with hand-computed values, the cell score, prompts, the sweep."""

import re

import numpy as np
import pytest

from linscale_jax.eval import niah, niah_metrics as nm

# 2 lengths x 4 depths. Row 0: success, success, miss, success -> 3 runs -> p = 2**-1. Row 1: all miss.
GRID = np.array([[10.0, 10.0, 1.0, 10.0], [1.0, 1.0, 1.0, 1.0]])


def test_accuracies_by_hand():
    np.testing.assert_allclose(nm.acc_at_len(GRID), [0.75, 0.0])
    np.testing.assert_allclose(nm.acc_upto_len(GRID), [0.75, 0.375])
    np.testing.assert_allclose(nm.cell_accuracy([[5.5]]), [[0.5]])


def test_weighted_and_niah_score_by_hand():
    # alpha = 2: length weights [1, 2], depth weights [1, 2, 4, 8]; total 3 * 15 = 45.
    # weighted = (1 * (1 + 2 + 8)) / 45 ; NIAH = (1 * 0.5 * 11/15 + 2 * 0 * 0) / 3
    assert nm.weighted_accuracy(GRID, alpha=2.0) == pytest.approx(11 / 45)
    assert nm.niah_score(GRID, alpha=2.0) == pytest.approx(11 / 90)
    np.testing.assert_array_equal(nm.segment_counts([[1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 1, 1]]), [4, 1, 2])
    np.testing.assert_allclose(nm.row_penalty([[1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 1, 1]]),
                               [2 ** -1.5, 1.0, 0.0, 2 ** -0.5])


def test_scores_with_the_documented_constants():
    assert nm.ALPHA == 1.05 and nm.THRESHOLD == 0.5
    assert nm.weighted_accuracy(np.full((3, 5), 10.0)) == 1.0
    assert nm.niah_score(np.full((3, 5), 10.0)) == 1.0
    assert nm.niah_score(np.ones((3, 5))) == 0.0
    # Rows that are all-success (a >= 0.5 everywhere) carry no penalty: NIAH == weighted average.
    g = np.array([[10.0, 5.5, 10.0], [7.0, 10.0, 6.0]])
    assert nm.niah_score(g) == pytest.approx(nm.weighted_accuracy(g))
    # One length, depths [success, fail]: weights [1, 1.05]; weighted = 1/2.05, p = 2**-0.5
    g = np.array([[10.0, 1.0]])
    assert nm.weighted_accuracy(g) == pytest.approx(1 / 2.05)
    assert nm.niah_score(g) == pytest.approx(2 ** -0.5 / 2.05)
    m = nm.summarize(GRID, [100, 200])
    assert m["acc@200"] == 0.0 and m["acc<=200"] == 0.375 and m["acc@100"] == 0.75


def test_bad_grids_are_rejected():
    with pytest.raises(ValueError, match=r"\[1, 10\]"):
        nm.weighted_accuracy([[0.0, 10.0]])
    with pytest.raises(ValueError, match="grid"):
        nm.niah_score([1.0, 2.0])


def test_cell_score():
    assert niah.cell_score(" 1234567.", "1234567") == 10.0
    assert niah.cell_score(" 1239999", "1234567") == pytest.approx(1 + 9 * 3 / 7)
    assert niah.cell_score(" twelve", "1234567") == 1.0
    assert niah.cell_score("12345678", "1234567") == pytest.approx(1 + 9 * 6 / 7)  # not exact


def _enc(s):
    return list(s.encode())


def _dec(t):
    return bytes(t).decode(errors="ignore")


DOCS = ["The river runs to the sea. Birds sing in the morning light. " * 8,
        "A quiet town sat by the hills. People walked to the market every day. " * 8]


@pytest.mark.parametrize("mode", ["standard", "easy"])
def test_prompt_length_depth_and_mode(mode):
    hay = niah.Haystack(DOCS, _enc, 400)
    needle = niah.make_needle(np.random.default_rng(0))
    assert re.fullmatch(r"[1-9]\d{6}", needle.value)
    for depth in (0.0, 50.0, 100.0):
        p = niah.build_prompt(hay, needle, mode, 300, depth, _enc)
        assert len(p) == 300
        text = _dec(p)
        assert text.endswith(f"The pass key for {needle.key} is")
        assert (text.count(needle.question()) == 2) == (mode == "easy")
        at = text.index(needle.fact()) / len(text)
        assert abs(at - depth / 100 * 0.75) < 0.12  # the question suffix takes the tail
    with pytest.raises(ValueError, match="too short"):
        niah.build_prompt(hay, needle, mode, 20, 0.0, _enc)


def test_sweep_with_oracle_and_blind_generators(tmp_path):
    lengths, depths = niah.scaled_grid(256, n_lengths=3, n_depths=4)
    assert lengths[0] == 128 and lengths[-1] == 500

    def oracle(prompt, n_new):
        text = _dec(prompt)
        key = re.findall(r"key for (\w+) is$", text)[0]
        value = re.search(rf"key for {key} is (\d+)\.", text).group(1)
        return _enc(f" {value}.")[:n_new]

    lengths = [150, 220, 300]
    out = niah.run_sweep(oracle, _enc, _dec, DOCS * 3, lengths, depths, mode="standard")
    assert out["scores"].shape == (3, 4) and (out["scores"] == 10.0).all()
    blind = niah.run_sweep(lambda p, n: _enc(" 0000000."), _enc, _dec, DOCS * 3, lengths, depths)
    assert (blind["scores"] == 1.0).all()
    nm.heatmap(out["scores"], lengths, depths, tmp_path / "h.png", title="oracle")
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="haystack corpus has only"):
        niah.run_sweep(oracle, _enc, _dec, ["tiny."], [500], [0.0])
