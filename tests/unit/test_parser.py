"""The one argument parser every command shares (fedpfn.core.flags.OneLineParser): a mistake is one
line on stderr that names it, exit 2, and an unknown flag is named before a missing --out."""

from dataclasses import dataclass

import pytest

from fedpfn.core.flags import ANALYSIS_REFUSAL, OneLineParser
from fedpfn.core.settings import at_least, setting
from fedpfn.experiments import command


@dataclass(frozen=True)
class Tiny:
    """A command's declared settings, one of them."""

    models: int = setting(2, "how many models", at_least(1))


def refused(parser: OneLineParser, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no usage dump
    return err


def test_a_script_names_the_bad_value_in_one_line(capsys):
    parser = OneLineParser(prog="tool.py")
    parser.add_argument("--rounds", type=int, default=1)
    assert refused(parser, ["--rounds", "x"], capsys) == (
        "tool.py: argument --rounds: invalid int value: 'x' (--help lists what is accepted)\n"
    )


def test_an_unknown_flag_is_named_before_a_missing_required_one(capsys):
    parser = OneLineParser(prog="tool.py")
    parser.add_argument("--out", required=True)
    parser.add_argument("--num-clients", type=int)
    assert refused(parser, ["--num_clients", "3"], capsys) == (
        "tool.py: unknown flag --num_clients; did you mean --num-clients? (--help lists what is accepted)\n"
    )
    assert "the following arguments are required: --out" in refused(parser, [], capsys)


def test_an_analysis_command_words_its_refusal_like_fedpfn_run(capsys):
    parser = command.build_parser("fedpfn soup", "Soups.", Tiny, "soup.json")
    assert isinstance(parser, OneLineParser) and parser.refusal_format == ANALYSIS_REFUSAL
    assert refused(parser, ["--nosuch"], capsys) == "error: unknown flag --nosuch (fedpfn soup --help lists every flag)\n"


def test_a_subcommand_parser_refuses_the_same_way(capsys):
    parser = OneLineParser(prog="fedpfn study")
    sub = parser.add_subparsers(dest="verb", required=True, parser_class=OneLineParser)
    sub.add_parser("status").add_argument("file")
    assert refused(parser, ["status", "a", "--x"], capsys) == (
        "fedpfn study status: unknown flag --x (--help lists what is accepted)\n"
    )
