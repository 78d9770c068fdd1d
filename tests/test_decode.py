"""The KV-cached decoder: fixed depth equals full-forward greedy decoding, and per-token exit with the
cache equals a cache-free recomputation under the stated semantics (biosrecall/model/decode.py).

    pytest -q tests/test_decode.py
"""

from __future__ import annotations

import pytest
import torch

from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import KL, Entropy, Fixed, Stable, exit_judge, parse_exit
from biosrecall.model import LoopedTransformer, get_preset
from biosrecall.model.decode import greedy_decode, uncached_greedy

PROMPT = [1, 7, 3, 12, 5, 9]


def tiny_model(**overrides) -> LoopedTransformer:
    torch.manual_seed(0)
    config = get_preset("bios-tiny", vocab_size=40, context_length=32, **overrides)
    model = LoopedTransformer(config).double().eval()  # float64: argmax ties cannot split the two paths
    with torch.no_grad():  # sharper, depth-dependent outputs than the small init gives
        for parameter in model.parameters():
            parameter.mul_(3.0 if parameter.dim() > 1 else 1.0)
    return model


VARIANTS = [{}, {"injection": "add", "norm": "pre"}, {"position": "learned", "init_state": "zeros"}]


@pytest.mark.parametrize("overrides", VARIANTS)
@pytest.mark.parametrize("depth", [1, 4])
def test_fixed_depth_decoding_equals_full_forward_greedy(overrides, depth):
    model = tiny_model(**overrides)
    result = greedy_decode(model, PROMPT, max_new_tokens=10, max_depth=depth)
    assert result.tokens == uncached_greedy(model, PROMPT, 10, depth)
    assert result.depths == [depth] * 10
    # Through the judge (a readout after every iteration, the coda cache rewritten each time) too.
    judged = greedy_decode(model, PROMPT, 10, depth, lambda: exit_judge(Fixed(depth)))
    assert judged == result


def reference_decode(model, prompt, max_new_tokens, max_depth, new_judge):
    """Cache-free: every step recomputes the whole sequence with plain layer forwards. A token that
    stopped at e feeds every layer of iterations beyond e the inputs it had at iteration e (so it offers
    the K/V of its last iteration), and the coda reads each earlier token at its exit state."""
    exits = [max_depth] * (len(prompt) - 1)  # the prefilled prompt runs to the max depth
    tokens, generated, depths = list(prompt), [], []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits, depth = _reference_token(model, tokens, exits, max_depth, new_judge())
            exits.append(depth)
            tokens.append(int(logits.argmax()))
            generated.append(tokens[-1])
            depths.append(depth)
    return generated, depths


def _reference_token(model, tokens, exits, max_depth, judge):
    last = len(tokens) - 1
    ids = torch.tensor([tokens])
    rope, inject, state = model.start(ids)  # the embedding and the prelude, no cache
    frozen, exit_states, last_states = {}, state.clone(), []
    for depth in range(1, max_depth + 1):
        x = model.recipe.step(model, state, inject, lambda u: u, depth, max_depth)  # the block input
        for j, layer in enumerate(model.block):
            x = x.clone()
            for q in range(last):
                if exits[q] < depth:
                    x[0, q] = frozen[q, j]
                elif exits[q] == depth:
                    frozen[q, j] = x[0, q].clone()
            x = layer(x, rope)
        state = x
        for q in range(last):
            if exits[q] == depth:
                exit_states[0, q] = state[0, q]
        last_states.append(state[0, last])
    # Earlier tokens never read later ones, so their exit states are final before any readout.
    for depth, last_state in enumerate(last_states, start=1):
        readout_input = exit_states.clone()
        readout_input[0, last] = last_state
        logits = model.head_logits(model.final_hidden(readout_input, rope))[0, last]
        if depth == max_depth or judge(depth, logits):
            return logits, depth
    raise AssertionError("unreachable")


@pytest.mark.parametrize("criterion", [KL(1.0), Stable(1), Entropy(2.0)])
def test_per_token_exit_with_the_cache_equals_cache_free_recomputation(criterion):
    model = tiny_model()
    new_judge = lambda: exit_judge(criterion)  # noqa: E731
    cached = greedy_decode(model, PROMPT, 8, 10, new_judge)
    expected_tokens, expected_depths = reference_decode(model, PROMPT, 8, 10, new_judge)
    assert cached.depths == expected_depths
    assert cached.tokens == expected_tokens


def test_the_criteria_make_tokens_exit_at_different_depths():
    """Otherwise the test above would not exercise the early-exit cache rule."""
    model = tiny_model()
    for criterion in (KL(1.0), Stable(1), Entropy(2.0)):
        used = greedy_decode(model, PROMPT, 8, 10, lambda c=criterion: exit_judge(c)).depths
        assert min(used) < 10 and max(used) <= 10
        # An early exit followed by a deeper token: the later one reads the frozen K/V.
        assert any(a < b for a, b in zip(used, used[1:], strict=False))


def test_decoder_refuses_what_it_cannot_do():
    model = tiny_model()
    with pytest.raises(BiosrecallError, match="cannot serve"):
        exit_judge(parse_exit("oracle")[0])
    with pytest.raises(BiosrecallError, match="empty"):
        greedy_decode(model, [], 3, 4)
    with pytest.raises(BiosrecallError, match="context"):
        greedy_decode(model, list(range(1, 31)) + [1, 2, 3], 3, 2)


def run_ask(args, capsys) -> tuple[int, str, str]:
    from biosrecall.cli import main

    try:
        main(["ask", *map(str, args)])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_ask_prints_each_token_with_its_depth_and_names_unknown_words(tmp_path, capsys):
    from test_cli_recall import _one_error_line, write_real_run

    run, dataset, _ = write_real_run(tmp_path, people=6)
    name = str(dataset.people["name"][0])
    args = [run, f"{name} was born in", "--max-depth", 3, "--max-new-tokens", 3, "--device", "cpu"]
    code, out, err = run_ask([*args, "--exit", "stable:1"], capsys)
    assert code == 0, err
    token_lines = out.strip().splitlines()[1:]
    assert 1 <= len(token_lines) <= 3
    assert all(1 <= int(line.rsplit("depth", 1)[1]) <= 3 for line in token_lines)
    code, out, err = run_ask([*args, "--exit", "fixed:2"], capsys)
    assert code == 0 and all(line.endswith("depth 2") for line in out.strip().splitlines()[1:])
    _one_error_line(*run_ask([run, "Zyzzyva was born in"], capsys)[::2], "'Zyzzyva'", "vocabulary")
    _one_error_line(*run_ask([run, "born", "--exit", "oracle"], capsys)[::2], "cannot serve")
    _one_error_line(*run_ask([run, "born", "--max-depth", 0], capsys)[::2], "max_depth")
