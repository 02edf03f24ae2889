"""``transformer-explorer generate``: continue a prompt, streaming the continuation to stdout.

With ``--show-steps`` each step prints the chosen token, its probability and rank under the
controls, and the top 5 candidates before and after the controls; the continuation follows at the
end. The stop reason goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from explorer.commands import (
    add_prompt_or_chat,
    encode_chat_args,
    read_chat,
    add_intervention_arguments,
    add_model_arguments,
    add_steer_arguments,
    check_steers,
    interventions_from,
    load_model,
    steers_from,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_intervention_arguments(parser)
    add_steer_arguments(parser)
    add_prompt_or_chat(parser, "the text to continue")
    parser.add_argument("--save-chat", type=Path, default=None, metavar="FILE.json",
                        help="with --chat: write the conversation with the reply kept as an assistant turn")
    parser.add_argument("--max-new-tokens", "-n", type=int, default=64, help="at most this many new tokens (64)")
    parser.add_argument("--temperature", "-t", type=float, default=1.0, help="0 is greedy (default 1)")
    parser.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (0: off)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus threshold in (0, 1] (1: off)")
    parser.add_argument("--min-p", type=float, default=0.0, help="probability floor relative to the top token (0: off)")
    parser.add_argument("--repetition-penalty", type=float, default=1.0, help="> 1 discourages repeats (1: off)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (same seed, same continuation)")
    parser.add_argument("--stop", action="append", default=[], metavar="TEXT",
                        help="stop when the continuation contains TEXT (repeatable)")
    parser.add_argument("--ignore-eos", action="store_true", help="do not stop at the end-of-text token")
    parser.add_argument("--no-cache", action="store_true",
                        help="run the whole sequence every step instead of using the KV cache")
    parser.add_argument("--show-steps", action="store_true",
                        help="print each step: chosen token, probability, rank, top 5 before/after the controls")


def sampling_params(args: argparse.Namespace):
    from explorer.core.errors import ExplorerError
    from explorer.core.generation.sampling import SamplingParams

    try:
        return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                              repetition_penalty=args.repetition_penalty, seed=args.seed,
                              max_new_tokens=args.max_new_tokens, stop_at_eos=not args.ignore_eos,
                              stop_strings=tuple(args.stop))
    except ValueError as exc:
        raise ExplorerError(str(exc)) from None


def probability(p: float) -> str:
    """A probability as printed: four decimals, in scientific notation when that would hide it
    (never ``0.0000`` for a probability that is not zero)."""
    p = float(p)
    return f"{p:.4f}" if p == 0 or p >= 5e-5 else f"{p:.2e}"


def _candidates(dist, tokenizer) -> str:
    return "  ".join(f"{tokenizer.display(int(i))!r} {probability(p)}" for i, p in zip(dist.ids[:5], dist.probs[:5]))


def format_step(step, tokenizer) -> str:
    before, after = step.distributions(5)
    raw_rank = "removed" if before.chosen_rank is None else f"rank {before.chosen_rank}"
    return (f"[{step.index}] {step.text!r}  p={probability(step.prob)} rank {step.rank}"
            f"  (model alone: p={probability(before.chosen_prob)} {raw_rank})\n"
            f"    before: {_candidates(before, tokenizer)}\n"
            f"    after:  {_candidates(after, tokenizer)}")


def run(args: argparse.Namespace) -> int:
    from explorer.core.generation.generate import IncrementalText, generate

    params = sampling_params(args)  # bad controls and specs fail before the model loads
    interventions = interventions_from(args)
    check_steers(args)
    messages = read_chat(args.chat)
    if args.save_chat is not None and messages is None:
        from explorer.core.errors import ExplorerError

        raise ExplorerError("--save-chat needs --chat")
    loaded = load_model(args)
    interventions += steers_from(args, loaded)
    if loaded.generation_blocked:
        from explorer.core.errors import ExplorerError

        raise ExplorerError(f"cannot generate: {loaded.generation_blocked}")
    tokenizer = loaded.tokenizer
    encoded = None
    if messages is not None:  # continue the assistant's turn; stop at the template's end of turn
        from explorer.core.chat.assistant import end_of_turn_ids

        encoded = encode_chat_args(loaded, messages, args)
        prompt_ids = list(encoded.ids)
        params = params.replace(stop_token_ids=tuple(sorted(set(params.stop_token_ids) | set(end_of_turn_ids(loaded)))))
    else:
        prompt_ids = tokenizer.encode(args.prompt) if args.prompt else []
    stream = IncrementalText(tokenizer, prompt_ids)
    out = sys.stdout
    ends = {i for i in (tokenizer.eos_id, *params.stop_token_ids) if i is not None} if params.stop_at_eos else set()

    def on_step(step) -> None:
        if args.show_steps:
            print(format_step(step, tokenizer), file=out, flush=True)
        elif step.token_id not in ends:
            out.write(stream.push(step.token_id))
            out.flush()

    result = generate(loaded, prompt_ids if prompt_ids else args.prompt or "", params,
                      use_cache=not args.no_cache, on_step=on_step, interventions=interventions)
    if args.show_steps:
        out.write("\n" + result.text)
    else:
        out.write(stream.flush())
    out.write("\n")
    out.flush()
    print(f"stopped: {result.stop_reason} ({result.stop_description}); {result.n_new} tokens in "
          f"{result.elapsed:.2f} s, {result.tokens_per_second:.1f} tokens/s", file=sys.stderr)
    if encoded is not None and args.save_chat is not None:
        from explorer.core.chat.assistant import split_reply, with_reply
        from explorer.core.chat.messages import write_chat_file

        thinking, answer = split_reply(result.text, encoded.open_thinking, encoded.harmony)
        write_chat_file(args.save_chat, with_reply(messages, answer, thinking))
        print(f"wrote the conversation with the reply as turn {len(messages) + 1} to {args.save_chat}", file=sys.stderr)
    return 0
