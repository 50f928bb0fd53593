"""The ``latopt`` command line: one sub-command per stage, all argument parsing in this package.

The stages are plain Python APIs (``latopt.training.base_training``, ``latopt.layerfold``, ``latopt.export``, ...) that know
nothing of argparse. Each module of this package wires one stage: ``register(subparsers)`` adds its
parser(s) and sets ``func`` (a callable taking the parsed ``Namespace`` and returning an exit code or
``None``) that turns the arguments into one API call and prints its results to stdout; progress and
warnings go to stderr through :mod:`latopt.log` (``-v`` / ``-q`` on every sub-command set how much). A
:class:`~latopt.errors.LatoptError` raised anywhere is printed as one line (``latopt: error: ...``) with
exit code 2 (3 for a failed check) and no traceback. ``latopt search`` with the DP's options (``--method dp``,
``--budget``, ...: ``latopt plan``'s now) is refused with one line giving the ``latopt plan`` command (exit 2).
Under torchrun (several processes) only ``train`` and ``fold`` run (:data:`TORCHRUN_COMMANDS`); the others
are refused with one line. Ctrl-C prints ``latopt: interrupted`` (exit 130) and SIGTERM ``latopt: terminated``
(exit 143), both after the same cleanup (:mod:`latopt.signals`): nothing half-written is left behind.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from latopt import __version__
from latopt.cli import exact, export, inspect, plan, profile, run, search, train, weights
from latopt.errors import LatoptError, first_line, one_line, out_of_memory
from latopt.log import DEFAULT, setup
from latopt.signals import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Terminated,
    check_terminated,
    sigterm_raises,
    terminating,
    threads_ended,
)

# The command modules, in the order their sub-commands appear in ``latopt --help``.
COMMANDS = (inspect, weights, profile, train, search, plan, export, run, exact)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="latopt",
        description="Hardware-aware latency optimizer for mobile CNNs: profile, fold, search, export.",
    )
    parser.add_argument("--version", action="version", version=f"latopt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


# A library parameter that one of the commands sets under a flag of another name (the flag's ``dest`` differs
# from the function keyword). Everything else maps by ``dest``.
PARAM_FLAGS: dict[str, str] = {
    "fmt": "format",            # latopt.export.export(fmt=...)
    "lut_path": "lut",          # export's LUT (ShipOptions.lut; export.plan.export_lut's parameter)
    "device_name": "device",    # export(device_name=...)
    "gate_accuracy": "no_accuracy_gate",
    "spec": "data",             # latopt.data.get_task(spec)
}


def flag_for(parser: argparse.ArgumentParser, command: str | None, param: str | None) -> str | None:
    """The flag of ``latopt COMMAND`` that sets the library parameter ``param`` (``"lambda_c"`` ->
    ``"--lambda-c"``), or None when the command has no such flag (the error then reads as it is)."""
    if not param or not command:
        return None
    dest = PARAM_FLAGS.get(param, param)
    for action in _actions(parser, command):
        if action.dest == dest and action.option_strings:
            return max(action.option_strings, key=len)
    return None


def _actions(parser: argparse.ArgumentParser, command: str) -> list[argparse.Action]:
    """Every option of ``latopt COMMAND``, its sub-commands' included (``latopt exact compress``)."""
    out: list[argparse.Action] = []
    todo = [c for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            for name, c in a.choices.items() if name == command]
    while todo:
        p = todo.pop()
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                todo.extend(a.choices.values())
            else:
                out.append(a)
    return out


def entry() -> None:
    """The ``latopt`` program (console script and ``python -m latopt``): :func:`main`, then exit with its code.

    After Ctrl-C or SIGTERM, threads a library left running get a few seconds to end
    (:func:`latopt.signals.threads_ended`); then the process exits without waiting for them.

    Standard output and error never fail on a character their encoding lacks (``×``, ``→`` under an ASCII or
    Latin-1 locale: written as ``\\u00d7``), and results that cannot be written to standard output (``>
    /dev/full``) are one error line and exit 2, not an interpreter traceback at exit."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    code = main()
    try:
        sys.stdout.flush()      # what was printed last, still buffered
    except BrokenPipeError:     # `latopt ... | head`: the reader wanted no more
        _drop_stdout()
    except OSError as e:        # > /dev/full
        code = code or _stdout_failed(e)
    if code in (EXIT_INTERRUPTED, EXIT_TERMINATED) and not threads_ended():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:   # also while the parser is built or a stage's modules are imported
        print("latopt: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    refused = search.refusal(sys.argv[1:] if argv is None else argv)   # `latopt search --method dp`: latopt plan
    if refused is not None:
        print(refused, file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    setup(getattr(args, "verbosity", DEFAULT))  # -v / -q (every sub-command takes them)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        _check_torchrun(args.command)
        with sigterm_raises():
            try:
                rc = args.func(args)
            except Exception as e:      # raised while a SIGTERM unwinds (an interrupted import): its consequence
                if terminating():
                    raise Terminated() from e
                raise
            check_terminated()      # a SIGTERM whose exception was lost: the command still ends 143
    except LatoptError as e:
        flag = flag_for(parser, args.command, e.param)
        where = f" (option {flag})" if flag else ""
        print(f"latopt: error: {one_line(str(e) + where)}", file=sys.stderr)
        return e.exit_code
    except Terminated:
        print("latopt: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except BrokenPipeError:  # e.g. `latopt inspect ... | head`
        _drop_stdout()
        return 0
    except Exception as e:  # only what is named here becomes a line; anything else is re-raised as it is
        if out_of_memory(e):
            print(f"latopt: error: {OUT_OF_MEMORY} ({first_line(e, 120)})", file=sys.stderr)
            return 2
        if isinstance(e, OSError) and _printing(e):
            return _stdout_failed(e)
        raise
    return int(rc or 0)


OUT_OF_MEMORY = ("out of memory: the model, --batch or --resolution is too large for this machine's memory; "
                 "lower them")


def _drop_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's own flush at exit cannot fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _stdout_failed(e: OSError) -> int:
    """Results could not be written to standard output (> /dev/full): one line, exit 2."""
    _drop_stdout()
    print(f"latopt: error: cannot write the standard output: {e.strerror or e}", file=sys.stderr)
    return 2


def _printing(e: OSError) -> bool:
    """Whether ``e`` was raised by a ``print`` of a command module: the commands (``latopt/cli/``) print their
    results to standard output and write files only through the stages (whose errors are OutputError lines),
    so an OSError raised in a command module's own frame is a failed write of standard output."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and Path(tb.tb_frame.f_code.co_filename).parent == Path(__file__).parent


TORCHRUN_COMMANDS = ("train", "fold")  # the commands that run as one process of a torchrun job


def _check_torchrun(command: str) -> None:
    """One line when a command that is not a distributed job is started by torchrun with several processes."""
    world = os.environ.get("WORLD_SIZE", "1")
    if command in TORCHRUN_COMMANDS or world in ("", "0", "1"):
        return
    from latopt.training.accel import (
        launched_by_torchrun,  # start-up time: torch is imported only under a launcher
    )

    if launched_by_torchrun():
        raise LatoptError(f"latopt {command} does not run under torchrun (WORLD_SIZE={world}); only "
                          f"{' and '.join(TORCHRUN_COMMANDS)} do. A search trial trains in one process: start one "
                          "search worker per GPU instead (README, 'Training on GPUs')")


if __name__ == "__main__":  # pragma: no cover
    entry()
