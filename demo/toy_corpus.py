"""The synthetic parallel corpus of demo/toy_language.py: generate it, score a
hypothesis' subject-verb agreement, parse target sentences.

    python demo/toy_corpus.py generate --out DIR [--train N] [--dev N] [--test N] [--seed S]
    python demo/toy_corpus.py agreement --src test.src --hyp hyp.trg [--ref test.trg] [--json]
    python demo/toy_corpus.py parse --trg hyp.trg > hyp.parses     # for analysis/analyze.py parseval
"""
import json
import os
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli  # noqa: E402
from machinery.output_files import write_text  # noqa: E402
from machinery.text_io import InputError, read_lines  # noqa: E402
from demo.toy_language import agreement_stats, generate_corpus, parse_target  # noqa: E402


def _cmd_generate(args):
    splits = generate_corpus([("test", args.test), ("dev", args.dev),
                              ("train", args.train)], seed=args.seed)
    os.makedirs(args.out, exist_ok=True)
    for name, pairs in splits.items():
        for side, idx in (("src", 0), ("trg", 1)):
            write_text(os.path.join(args.out, "%s.%s" % (name, side)),
                       "".join(p[idx] + "\n" for p in pairs))
    print("wrote %s: train %d, dev %d, test %d pairs (seed %d)"
          % (args.out, args.train, args.dev, args.test, args.seed))


def _read_parallel(src_path, path):
    """The lines of ``path``; InputError unless it has as many as ``src_path``."""
    src, lines = read_lines(src_path, allow_empty=True), read_lines(path, allow_empty=True)
    if len(lines) != len(src):
        raise InputError("%s has %d lines but %s has %d: the files must be aligned"
                         % (path, len(lines), src_path, len(src)))
    return lines


def _cmd_agreement(args):
    src, hyp = read_lines(args.src, allow_empty=True), _read_parallel(args.src, args.hyp)
    stats = agreement_stats(src, hyp)
    if args.ref:
        ref = _read_parallel(args.src, args.ref)
        stats["ref_accuracy"] = agreement_stats(src, ref)["accuracy"]
        stats["exact_match"] = (sum(h.split() == r.split() for h, r in zip(hyp, ref))
                                / len(src) if src else 0.0)
    if args.json:
        print(json.dumps(stats))
    else:
        line = ("agreement: %d/%d produced sites correct (%.1f%%), %d of %d sites missing"
                % (stats["correct"], stats["sites"] - stats["missing"],
                   100 * stats["accuracy"], stats["missing"], stats["sites"]))
        if args.ref:
            line += ("; reference %.1f%%, exact match %.1f%%"
                     % (100 * stats["ref_accuracy"], 100 * stats["exact_match"]))
        print(line)


def _cmd_parse(args):
    lines = [parse_target(line) for line in read_lines(args.trg, allow_empty=True)]
    sys.stdout.write("".join((t or "") + "\n" for t in lines))
    print("parsed %d of %d sentences (an empty line for each one outside the grammar)"
          % (sum(t is not None for t in lines), len(lines)), file=sys.stderr)


def main(argv=None):
    ap = cli.ArgumentParser(description=cli.summary(__doc__))
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=cli.ArgumentParser)
    g = sub.add_parser("generate", help="write train/dev/test .src/.trg files")
    g.add_argument("--out", required=True,
                   help="folder of train.src, train.trg, dev.* and test.*")
    g.add_argument("--train", type=int, default=20000,
                   help="training pairs (default %(default)s, the demo's)")
    g.add_argument("--dev", type=int, default=500, help="validation pairs (default %(default)s)")
    g.add_argument("--test", type=int, default=500, help="test pairs (default %(default)s)")
    g.add_argument("--seed", type=int, default=1,
                   help="seed of the sentences drawn (default %(default)s)")
    a = sub.add_parser("agreement", help="score subject-verb agreement of a hypothesis")
    a.add_argument("--src", required=True, help="the source sentences (test.src)")
    a.add_argument("--hyp", required=True,
                   help="their translations, one a line, aligned with --src")
    a.add_argument("--ref",
                   help="the references (test.trg): also their agreement and the share of "
                        "exact matches")
    a.add_argument("--json", action="store_true",
                   help="print the figures as one JSON object instead of a line")
    r = sub.add_parser("parse", help="Penn Treebank parses of target sentences")
    r.add_argument("--trg", required=True, help="reference or hypothesis file")
    args = ap.parse_args(argv)
    for name in ("train", "dev", "test"):
        if getattr(args, name, 0) < 0:
            ap.error("--%s must be >= 0" % name)
    commands = {"generate": _cmd_generate, "agreement": _cmd_agreement, "parse": _cmd_parse}
    return cli.run(lambda: commands[args.cmd](args))


if __name__ == "__main__":
    sys.exit(main())
