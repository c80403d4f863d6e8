"""The ``tecomp`` command line.

    tecomp demo [NAME]        run a built-in example end to end (conv2d, softmax, take, mlp,
                              butterfly, laplacian, or all)
    tecomp show FILE.py       print the tensor expressions a file defines
    tecomp lower FILE.py      print their loop IR and static cost
    tecomp bench [ARGS...]    run the CPU benchmark suite (benchmarks/bench_cpu.py)
    tecomp cache info|clear   show or empty the persistent kernel cache

``tecomp COMMAND --help`` describes each command's options.

Program files (``show``/``lower``).  The file is run as a Python script; then, in order of
preference:

1. if it defines ``program()``, that function is called and returns ``(outputs, inputs)``:
   a tensor or a list of tensors, and the list of placeholders (and scalar ``tc.var`` s) in
   the order a kernel would take them;
2. else, if it defines ``OUTPUTS`` (a tensor or list) -- and optionally ``INPUTS`` -- those;
3. else every module-level tensor that no other module-level tensor reads is an output, and
   the inputs are the placeholders they depend on.

``--grad`` differentiates the first output (the gradient of its sum, or of ``sum(out·H)``
with a head ``H`` when ``--head`` is given) with respect to the float inputs, or to the
tensors named with ``--wrt``.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import runpy
import sys
from pathlib import Path
from typing import Any

import tecomp as tc

from .cli_demos import DEMOS, run_demo, step


# ------------------------------------------------------------------------------ program files
def load_program(path: str) -> tuple[list[tc.Tensor], list[Any]]:
    """``(outputs, inputs)`` that the Python file ``path`` defines (module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise tc.TecompError(f"{path}: no such file")
    try:
        ns = runpy.run_path(str(p), run_name="__tecomp_program__")
    except SyntaxError as err:
        where = f"{err.filename or path}:{err.lineno}" if err.lineno else path
        text = (err.text or "").rstrip("\n")
        caret = f"\n    {text}\n    {' ' * max((err.offset or 1) - 1, 0)}^" if text else ""
        raise tc.TecompError(f"{where}: syntax error: {err.msg}{caret}") from None
    if callable(ns.get("program")):
        got = ns["program"]()
        if not (isinstance(got, tuple) and len(got) == 2):
            raise tc.TecompError(f"{path}: program() must return (outputs, inputs), got "
                                 f"{type(got).__name__}")
        outs, ins = got
    elif "OUTPUTS" in ns:
        outs, ins = ns["OUTPUTS"], ns.get("INPUTS")
    else:
        outs, ins = _module_outputs(ns), None
        if not outs:
            raise tc.TecompError(f"{path}: defines no tensor (and no program() or OUTPUTS)")
    outs = [outs] if isinstance(outs, tc.Tensor) else list(outs)
    for t in outs:
        if not isinstance(t, tc.Tensor):
            raise tc.TecompError(f"{path}: output {t!r} is not a tensor")
    if ins is None:
        from .lowering_api import default_inputs

        ins = default_inputs(outs)
    return outs, [ins] if isinstance(ins, tc.Tensor) else list(ins)


def _module_outputs(ns: dict[str, Any]) -> list[tc.Tensor]:
    from .functor import input_tensors

    tensors = [v for k, v in ns.items() if isinstance(v, tc.Tensor) and not k.startswith("_")]
    read = {id(d) for t in tensors for d in input_tensors(t)}
    return [t for t in tensors if id(t) not in read and not t.is_placeholder]


def _differentiate(outs: list[tc.Tensor], ins: list[Any], args: argparse.Namespace
                   ) -> tuple[list[tc.Tensor], list[Any]]:
    out = outs[0]
    if args.wrt:
        by_name = {t.name: t for t in ins if isinstance(t, tc.Tensor)}
        missing = [w for w in args.wrt if w not in by_name]
        if missing:
            raise tc.TecompError(f"--wrt {', '.join(missing)}: no such input (inputs: "
                                 f"{', '.join(by_name)})")
        wrt = [by_name[w] for w in args.wrt]
    else:
        wrt = [t for t in ins if isinstance(t, tc.Tensor) and t.dtype.startswith("float")]
    head = None
    if args.head:
        head = tc.placeholder(out.shape, name=f"{out.name}_head", dtype=out.dtype)
        ins = [*ins, head]
    with step(f"differentiating {out.name} with respect to {', '.join(t.name for t in wrt)}"):
        grads = tc.gradient(out, wrt, head=head, optimize=not args.no_optimize)
    return grads, ins


def parse_sizes(items: list[str] | None) -> dict[str, int] | None:
    """``--size n=128 m=4`` as ``{"n": 128, "m": 4}`` (None when not given)."""
    if not items:
        return None
    sizes = {}
    for item in items:
        name, eq, value = item.partition("=")
        try:
            if not (eq and name.isidentifier()):
                raise ValueError(item)
            sizes[name] = int(value)
        except ValueError:
            raise tc.TecompError(f"--size {item!r}: expected NAME=INTEGER, e.g. n=128") from None
    return sizes


def check_sizes(sizes: dict[str, int] | None, outs: list[tc.Tensor], ins: list[Any]) -> None:
    """Every name in ``--size`` is a symbolic size of the program."""
    if not sizes:
        return
    from .functor import free_vars, topo_order

    known = {v.name for v in ins if isinstance(v, tc.Var)}
    for t in topo_order(outs):
        for extent in t.shape:
            known |= {v.name for v in free_vars(extent)}
    unknown = sorted(set(sizes) - known)
    if unknown:
        have = ", ".join(sorted(known)) or "none: every size is constant"
        raise tc.TecompError(f"--size {', '.join(unknown)}: the program has no symbolic size "
                             f"of that name (its sizes: {have})")


def _prepare(args: argparse.Namespace) -> tuple[list[tc.Tensor], list[Any], Any]:
    """The program's (outputs, inputs) after ``--grad``, and the checked ``--size``."""
    sizes = parse_sizes(args.size)  # before any work or output
    outs, ins = load_program(args.file)
    check_sizes(sizes, outs, ins)
    if args.grad:
        outs, ins = _differentiate(outs, ins, args)
    return outs, ins, sizes


def cmd_show(args: argparse.Namespace) -> int:
    outs, ins, sizes = _prepare(args)
    if not args.grad and not args.no_optimize and args.optimize:
        outs = tc.optimize(outs)
    if args.dot:
        print(tc.to_dot(outs), end="")
        return 0
    print(tc.show(outs))
    if args.explain:
        print("\n" + str(tc.explain(outs, sizes=sizes)))
    return 0


def cmd_lower(args: argparse.Namespace) -> int:
    outs, ins, sizes = _prepare(args)
    if args.dot:
        print(tc.to_dot(outs), end="")
        return 0
    with step("lowering"):
        if args.no_optimize:
            from .lowering_api import Lowered
            from .passes.lower import lower_program

            lowered = Lowered(*lower_program(outs, ins))
        else:
            lowered = tc.lower(outs, ins)
    print(lowered)
    try:
        cost = tc.cost(outs, ins, sizes=sizes, optimize=not args.no_optimize)
        print(f"\ncost: {cost}")
    except tc.TecompError as err:
        print(f"\ncost: not counted ({err}); bind sizes with --size NAME=VALUE")
    if args.build:
        with step("compiling"):
            kernel = tc.build(outs, ins)
        print(f"built {kernel!r}")
    if args.explain:
        print("\n" + str(tc.explain(outs, sizes=sizes)))
    return 0


# ------------------------------------------------------------------------------ bench
def _find_bench() -> Path | None:
    for root in (Path.cwd(), Path(__file__).resolve().parents[1]):
        cand = root / "benchmarks" / "bench_cpu.py"
        if cand.is_file():
            return cand
    return None


def cmd_bench(args: argparse.Namespace) -> int:
    path = _find_bench()
    if path is None:
        print("error: benchmarks/bench_cpu.py not found; run `tecomp bench` from a checkout "
              "of the tecomp repository", file=sys.stderr)
        return 1
    spec = importlib.util.spec_from_file_location("tecomp_bench_cpu", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(mod)
        main = getattr(mod, "main", None)
        if main is None:
            print(f"error: {path} defines no main()", file=sys.stderr)
            return 1
        takes_args = bool(inspect.signature(main).parameters)
        if not {"-h", "--help"} & set(args.args):
            print(f"running {path.name} (progress below; the suite takes minutes)", flush=True)
        saved_argv, sys.argv = sys.argv, ["tecomp bench", *args.args]  # its usage line
        try:
            rc = main(args.args) if takes_args else main()
        except SystemExit as stop:  # its argument parser's --help or usage error
            rc = stop.code
        finally:
            sys.argv = saved_argv
    finally:
        sys.path.remove(str(path.parent))
    return int(rc or 0)


# ------------------------------------------------------------------------------ main
def cmd_cache(args: argparse.Namespace) -> int:
    """``tecomp cache info`` / ``tecomp cache clear`` (the directory of ``tc.config``)."""
    info = tc.config.cache_info()
    if args.action == "clear":
        removed = tc.config.clear_cache()
        where = info["directory"] or "(the persistent cache is off)"
        print(f"removed {removed} file(s) from {where}")
        return 0
    if info["directory"] is None:
        print("persistent cache: off (TECOMP_CACHE=0 or tc.config.cache = False)")
        return 0
    print(f"directory: {info['directory']}")
    print(f"status:    {info['status']}")
    print(f"entries:   {info['entries']} ({info['bytes'] / 2**20:.1f} MiB)")
    print(f"in memory: up to {tc.config.kernel_cache_size} kernels")
    return 0


def _program_parser(sub: Any, name: str, help_: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_, description=help_ + ". " + (
        "FILE.py defines program() returning (outputs, inputs), or OUTPUTS [and INPUTS], or "
        "module-level tensors (the unread ones are the outputs)."))
    p.set_defaults(command_parser=p)
    p.add_argument("file", metavar="FILE.py", help="a Python file that declares tensors")
    p.add_argument("--grad", action="store_true",
                   help="differentiate the first output (its sum, or sum(out*H) with --head)")
    p.add_argument("--wrt", nargs="+", metavar="NAME",
                   help="inputs to differentiate with respect to (default: every float input)")
    p.add_argument("--head", action="store_true",
                   help="take the incoming gradient H as an extra input instead of ones")
    p.add_argument("--no-optimize", action="store_true",
                   help="skip zero elimination (see the naive gradient)")
    p.add_argument("--size", nargs="+", metavar="NAME=VALUE",
                   help="bind symbolic sizes for the cost, e.g. --size n=128")
    p.add_argument("--dot", action="store_true", help="print Graphviz text instead")
    p.add_argument("--explain", action="store_true",
                   help="also say why the program may be slower than hand-written code")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tecomp", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="tecomp: a tensor-expression compiler with exact zero elimination for "
        "fast derivatives.", epilog=__doc__.split("\n\n", 2)[1])
    parser.add_argument("--version", action="version", version=f"tecomp {tc.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser("demo", help="run a built-in example end to end",
                       description="Run a built-in example: declare, differentiate, show the "
                       "IR and cost, compile, check against NumPy, time.")
    d.set_defaults(command_parser=d)
    d.add_argument("name", nargs="?", default="conv2d", choices=[*DEMOS, "all"],
                   help="which example (default conv2d)")
    d.add_argument("--small", action="store_true", help="small sizes (a few seconds)")
    s = _program_parser(sub, "show", "print the tensor expressions a file defines")
    s.add_argument("--optimize", action="store_true", help="show them after tc.optimize")
    lo = _program_parser(sub, "lower", "print the loop IR and static cost of a file's tensors")
    lo.add_argument("--build", action="store_true", help="also compile it with LLVM")
    b = sub.add_parser("bench", help="run the CPU benchmark suite",
                       description="Run benchmarks/bench_cpu.py's main() (from a checkout); "
                       "further arguments, --help included, go to it: `tecomp bench --help` "
                       "lists the benchmark's options.")
    b.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    c = sub.add_parser("cache", help="show or empty the persistent kernel cache",
                       description="The persistent cache (TECOMP_CACHE_DIR, default "
                       "~/.cache/tecomp): 'info' prints its directory, status and size, "
                       "'clear' removes its entries.")
    c.add_argument("action", choices=["info", "clear"], help="what to do")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # the rest, verbatim, --help included, for the benchmark
        return cmd_bench(argparse.Namespace(args=argv[1:]))
    args, extra = parser.parse_known_args(argv)
    if extra:  # reported with the usage of the command they were given to
        getattr(args, "command_parser", parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help()
        return 0
    try:
        if args.command == "demo":
            return run_demo(args.name, small=args.small)
        if args.command == "show":
            return cmd_show(args)
        if args.command == "lower":
            return cmd_lower(args)
        if args.command == "cache":
            return cmd_cache(args)
        return cmd_bench(args)
    except tc.TecompError as err:
        print(f"\nerror: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
