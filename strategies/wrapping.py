"""A strategy wrapper (Flower's differential-privacy wrappers, or a user's) around the composed
strategy, and the settings that plug one in on either side.

A Flower wrapper (`DifferentialPrivacyServerSideFixedClipping(strategy, noise_multiplier, ...)`)
takes the strategy it wraps as its first argument and expects of it what Flower's FedAvg
offers: one ArrayRecord per reply, the same entries as the model it was sent. The composed
strategy holds more (buffers, SCAFFOLD's control variates, FedPNU's packed replies), so the
wrapper wraps a view of it (`ComposedView`) that shows it exactly that:

- the wrapper is sent and clips the model's trainable parameters, in the model's order;
  buffers (BatchNorm statistics) go around it, averaged by the composed strategy as always;
- the replies it reads are whole (FedPNU's unpacked, personal entries restored) and hold the
  parameters alone; the parts' records (SCAFFOLD's Δc) are put back after it clipped, so the
  server parts read the clipped models. Those records themselves are not clipped nor noised:
  the privacy guarantee covers the model's update (docs/guide/privacy.md);
- what it adds to the aggregate (noise) lands on the composed strategy's result, after the
  parts adjusted it.

A wrapper reads every reply (per-client clipping), so the server asks for every client's model
and aggregates the replies, never the round's totals (fedpfn.runtime.algorithms.mean_based).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Strategy

from fedpfn.core.kwargs import check_kinds, parse_kwargs
from fedpfn.core.protocol import ARRAYS, to_array_record, to_numpy
from fedpfn.core.seeding import Stream, numpy_global
from fedpfn.core.settings import ConfigError, between, setting
from fedpfn.core.user_code import USER_FAULTS, call_user, import_user_class, user_fault
from strategies.composed import ComposedStrategy, conform
from strategies.privacy import PrivacyBudget
from strategies.registry import accepted_keywords
from strategies.state import load_strategy_state, strategy_state

if TYPE_CHECKING:
    from fedpfn.core.config import RunConfig

T = TypeVar("T")


@dataclass(frozen=True)
class PluginParams:
    """What plugs in around the algorithms: a wrapper around the server side, a mod around each client."""

    server_wrap: str | None = setting(
        None,
        "a strategy wrapper around the whole server side, package.module:Class taking the strategy first "
        "(e.g. flwr.serverapp.strategy:DifferentialPrivacyServerSideFixedClipping); it reads every reply",
    )
    server_wrap_args: str | None = setting(
        None,
        "keyword arguments of --server-wrap as a JSON object, e.g. '{\"noise_multiplier\": 1.0, "
        "\"clipping_norm\": 1.0}' (num_sampled_clients defaults to clients_per_round)",
    )
    client_mod: str | None = setting(
        None,
        "a Flower mod around every client's training, package.module:name (a mod function, or a class "
        "built with --client-mod-args), e.g. flwr.clientapp.mod:fixedclipping_mod; Ray and flwr run",
    )
    client_mod_args: str | None = setting(
        None, "keyword arguments of a --client-mod class as a JSON object (e.g. LocalDpMod's)"
    )
    dp_delta: float = setting(
        1e-5,
        "δ of the (ε, δ) privacy budget a --server-wrap with noise_multiplier reports",
        between(0, 1, low_open=True, high_open=True),
    )


PLUGINS = "plugins"  # where a run keeps PluginParams: plugins.server_wrap (fedpfn.core.hyper)


def plugins_of(cfg: RunConfig) -> PluginParams:
    """The run's plug-ins."""
    return cfg.hyper(PLUGINS, PluginParams)


def plugin_values(params: PluginParams) -> dict[str, Any]:
    """The settings a run records: those set, so a run without a plug-in reads as before them."""
    values = {k: v for k, v in vars(params).items() if v is not None and k != "dp_delta"}
    return {**values, "dp_delta": params.dp_delta} if params.server_wrap else values


def load_wrapper_class(path: str) -> type[Strategy]:
    """`package.module:Class` -> the wrapper class (fedpfn.core.user_code: only what the command names)."""
    kind = "a flwr.serverapp.strategy.Strategy subclass (a wrapper takes the strategy it wraps first)"
    return import_user_class(path, "server_wrap", Strategy, kind, "strategy wrapper")


def wrapper_kwargs(params: PluginParams, clients_per_round: int) -> dict[str, Any]:
    """--server-wrap-args with `num_sampled_clients` filled in where the wrapper takes it."""
    cls = load_wrapper_class(params.server_wrap or "")
    kwargs = parse_kwargs(params.server_wrap_args, "server_wrap_args")
    accepted, takes_any = accepted_keywords(cls)
    if "strategy" not in accepted:
        raise ConfigError(
            f"server_wrap: {params.server_wrap} is no wrapper: it takes no 'strategy' argument (a wrapper "
            "takes the strategy it wraps first, as Flower's DifferentialPrivacy* classes do); use --server for it"
        )
    if "strategy" in kwargs:
        raise ConfigError("server_wrap_args: 'strategy' is the composed server side, fedpfn's to pass; leave it out")
    unknown = sorted(set(kwargs) - set(accepted)) if not takes_any else []
    if unknown:
        raise ConfigError(
            f"server_wrap_args: {params.server_wrap} takes no argument {', '.join(unknown)}; "
            f"it accepts {', '.join(a for a in accepted if a != 'strategy')}"
        )
    check_kinds(cls, kwargs, "server_wrap_args")
    sampled = kwargs.get("num_sampled_clients", clients_per_round)
    if "num_sampled_clients" in accepted and sampled != clients_per_round:
        raise ConfigError(
            f"server_wrap_args: num_sampled_clients {sampled} is not clients_per_round ({clients_per_round}); "
            "the noise's scale divides by the clients a round samples: leave it out, or give the same"
        )
    return {**kwargs, "num_sampled_clients": sampled} if "num_sampled_clients" in accepted else kwargs


def build_wrapper(params: PluginParams, strategy: Strategy, clients_per_round: int) -> Strategy:
    """The wrapper class built around `strategy`; one line where its constructor refuses the arguments."""
    cls = load_wrapper_class(params.server_wrap or "")
    kwargs = wrapper_kwargs(params, clients_per_round)
    try:
        return cls(strategy, **kwargs)
    except USER_FAULTS as err:  # the user's constructor may raise anything, SystemExit too
        line = f"server_wrap: {params.server_wrap}({', '.join(kwargs)}) failed: {type(err).__name__}: {err}"
        raise user_fault(err, line) from None


class ComposedView(FedAvg):
    """The composed strategy as the wrapper must see it: parameters only, one ArrayRecord a reply.

    A FedAvg in type (Flower's accounted mode and user wrappers test for one); every hook goes
    to the composed strategy."""

    def __init__(self, composed: ComposedStrategy) -> None:
        super().__init__()
        self.composed = composed
        self.whole = ArrayRecord()  # the model sent, buffers included
        self.held: dict[int, dict[str, ArrayRecord]] = {}  # id(reply content) -> records set aside
        self.last = ArrayRecord()  # the composed strategy's last aggregate, buffers included

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.composed.configure_train(server_round, self.whole, config, grid)

    def hold(self, contents: list[RecordDict]) -> None:
        """Each reply down to its parameters, in the model's order; the rest set aside."""
        names = self.composed.param_names
        self.held = {}
        for content in contents:
            records = dict(content.array_records)
            self.held[id(content)] = records
            for key in records:
                del content[key]
            content[ARRAYS] = ArrayRecord({name: records[ARRAYS][name] for name in names})

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The clipped parameters back with what was set aside; the composed strategy's parameters out."""
        replies = list(replies)
        for reply in replies:
            if reply.has_error():
                continue
            records = self.held[id(reply.content)]
            clipped = reply.content[ARRAYS]
            for key, record in records.items():
                reply.content[key] = record
            reply.content[ARRAYS] = ArrayRecord({**dict(records[ARRAYS].items()), **dict(clipped.items())})
        aggregated, metrics = self.composed.aggregate_restored(server_round, replies)
        if aggregated is None:
            return None, metrics
        self.last = aggregated
        return ArrayRecord({name: aggregated[name] for name in self.composed.param_names}), metrics


class WrappedStrategy:
    """What the server loop runs when a wrapper is set: the wrapper around the composed strategy's view.

    The same hooks as ComposedStrategy but `aggregate_totals`: a wrapper reads every reply, so the
    server aggregates its replies (fedpfn.runtime.algorithms.mean_based is False with a wrapper,
    the one decision). The wrapper's noise comes from NumPy's global generator
    (Flower draws it there); it is seeded per round from the run's seed, so a run's noise is its
    seed's and a resumed run continues as it would have.

    The wrapper's hooks are a user's code (or Flower's) called mid-run: each is bounded by the
    round's timeout, and what it raises, or a call that never returns, stops the run in one line
    naming it (`_call`)."""

    def __init__(
        self, view: ComposedView, wrapper: Strategy, seed: int, budget: PrivacyBudget | None,
        path: str = "", timeout: float | None = None,
    ) -> None:  # fmt: skip
        """`path`: the wrapper's dotted path (what a line names); `timeout`: each hook's bound (None: none)."""
        self.view, self.composed, self.wrapper = view, view.composed, wrapper
        self.seed = seed
        self.budget = budget
        self.path, self.timeout = path or type(wrapper).__name__, timeout

    def _call(self, hook: str, server_round: int, call: Callable[[], T]) -> T:
        """`call()`, the wrapper's `hook`, within the round's timeout; what it raises, and a call that
        never returns, one line naming the wrapper (ConfigError, or UserInterrupt)."""
        return call_user(f"server_wrap: {self.path}'s {hook} in round {server_round}", self.timeout, call)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self.view.whole = arrays
        params = ArrayRecord({name: arrays[name] for name in self.composed.param_names})
        sent = lambda: list(self.wrapper.configure_train(server_round, params, config, grid))  # noqa: E731
        return self._call("configure_train", server_round, sent)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        contents = [reply.content for reply in replies if not reply.has_error()]
        self.composed.restore(server_round, contents)
        self.view.hold(contents)
        with numpy_global(self.seed, Stream.DP_NOISE, server_round):
            aggregated, metrics = self._call(
                "aggregate_train", server_round, lambda: self.wrapper.aggregate_train(server_round, replies)
            )
        if aggregated is None:
            return None, metrics
        if self.budget is not None:
            self.budget.release()
        sent = to_numpy(self.view.whole)
        params = conform(to_numpy(aggregated), {n: sent[n] for n in self.composed.param_names})
        return to_array_record({**to_numpy(self.view.last), **params}), metrics

    def client_models(self, server_round: int, replies: list[Message]) -> list[Any]:
        return self.composed.client_models(server_round, replies)

    def summary(self) -> None:
        self.wrapper.summary()

    def state(self) -> dict[str, Any]:
        flower = type(self.wrapper).__module__.startswith("flwr.")
        declared = ("clipping_norm",) if flower else None  # adaptive clipping moves it
        return {
            **self.composed.state(),
            "wrapper": strategy_state(self.wrapper, declared),
            "releases": self.budget.releases if self.budget else 0,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.composed.load_state(state)
        load_strategy_state(self.wrapper, state["wrapper"])
        if self.budget is not None:
            self.budget.releases = int(state["releases"])

    def round_summary(self) -> dict[str, Any]:
        figures = self.composed.round_summary()
        if hasattr(self.wrapper, "clipping_norm"):
            figures["dp_clipping_norm"] = float(self.wrapper.clipping_norm)
        return {**figures, **(self.budget.figures() if self.budget else {})}
