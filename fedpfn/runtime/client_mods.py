"""A Flower mod (`--client-mod`) around every ClientApp call: Flower's `fixedclipping_mod`,
`adaptiveclipping_mod`, `LocalDpMod`, or a user's, by dotted path.

Flower's mods read exactly one ArrayRecord and one ConfigRecord in the message, and one
ArrayRecord (and one MetricRecord) in the reply, with the entries of the model sent. A client
rule's own records (SCAFFOLD's c and Δc_i) and the model's integer buffers (BatchNorm's
counters) are set aside while the mod looks, and put back after: the mod clips (and noises)
the model's floating-point entries, the rule's records travel as the rule wrote them. A mod's
noise comes from NumPy's global generator (Flower draws it there), seeded from the run's seed,
the round and the partition, so a run is its seed's and a resume continues it exactly.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Context, Message, RecordDict

from fedpfn.core import protocol
from fedpfn.core.kwargs import check_kinds, parse_kwargs
from fedpfn.core.seeding import Stream, numpy_global
from fedpfn.core.settings import ConfigError
from fedpfn.core.user_code import USER_FAULTS, import_user_object, user_fault

Mod = Callable[[Message, Context, Callable[[Message, Context], Message]], Message]


@lru_cache(maxsize=4)
def load_client_mod(path: str, args: str | None) -> Mod:
    """The mod `path` names: a function, or a class built with `args` (JSON); one line where it is neither."""
    found = import_user_object(path, "client_mod", "mod")
    kwargs = parse_kwargs(args, "client_mod_args")
    if inspect.isclass(found):
        check_kinds(found, kwargs, "client_mod_args")
        try:
            found = found(**kwargs)
        except USER_FAULTS as err:  # a user's constructor may raise anything, SystemExit too
            line = f"client_mod: {path}({', '.join(kwargs)}) failed: {type(err).__name__}: {err}"
            raise user_fault(err, line) from None
    elif kwargs:
        raise ConfigError(f"client_mod_args: {path} is a function, built by no arguments; leave --client-mod-args out")
    try:
        inspect.signature(found).bind(None, None, None)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(
            f"client_mod: '{path}' is not a mod: Flower calls one as mod(message, context, call_next)"
        ) from None
    return found  # type: ignore[return-value]


def _split(content: RecordDict, keep: tuple[str, ...]) -> tuple[RecordDict, dict[str, Any]]:
    """(what the mod sees: `keep`'s records, ARRAYS' floating entries only; the rest, set aside)."""
    aside: dict[str, Any] = {k: r for k, r in content.items() if k not in keep}
    whole = content[protocol.ARRAYS]
    floating = {k: a for k, a in whole.items() if np.issubdtype(np.dtype(a.numpy().dtype), np.floating)}
    aside[protocol.ARRAYS] = whole
    seen = RecordDict({k: content[k] for k in keep if k in content})
    seen[protocol.ARRAYS] = ArrayRecord(floating)
    return seen, aside


def _join(seen: RecordDict, aside: dict[str, Any]) -> RecordDict:
    """The mod's records with those set aside; its arrays over the whole model's."""
    whole = aside[protocol.ARRAYS]
    arrays = ArrayRecord({**dict(whole.items()), **dict(seen[protocol.ARRAYS].items())})
    return RecordDict({**aside, **seen, protocol.ARRAYS: arrays})


def run_with_mod(
    mod: Mod, seed: int, partition_id: int, msg: Message, context: Context, train: Callable[[Message], Message]
) -> Message:
    """`train(msg)` (the ClientApp's round) inside `mod`, which sees what Flower's mods expect."""
    server_round = int(msg.content.config_records[protocol.CONFIG][protocol.SERVER_ROUND])
    msg.content, sent_aside = _split(msg.content, (protocol.ARRAYS, protocol.CONFIG))
    reply_aside: dict[str, Any] = {}

    def call_next(message: Message, _: Context) -> Message:
        nonlocal reply_aside
        seen = message.content
        message.content = _join(seen, sent_aside)
        reply = train(message)
        message.content = seen  # the mod reads what it was shown, after the round as before
        if not reply.has_error():
            reply.content, reply_aside = _split(reply.content, (protocol.ARRAYS, protocol.METRICS))
        return reply

    with numpy_global(seed, Stream.DP_NOISE, server_round, partition_id):
        out = mod(msg, context, call_next)
    if not out.has_error() and reply_aside:
        out.content = _join(out.content, reply_aside)
    return out
