"""Runs the command SCRIPT as ``SCRIPT --help`` would run it, but stops when
it parses its arguments, and prints what its parser (and each sub-command's
parser) explains as one JSON object: {"missing": ["PROG ARGUMENT", ...], the
arguments and options without help text; "descriptions": {PROG: text}}.
test_help.py runs it for every command."""
import argparse
import json
import os
import runpy
import sys


def walk(parser, found):
    found['descriptions'][parser.prog] = parser.description or ''
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if not (choice.help or '').strip():
                    found['missing'].append('%s %s (sub-command)' % (parser.prog, choice.dest))
            for sub in action.choices.values():
                walk(sub, found)
        elif not (action.help or '').strip():
            name = '/'.join(action.option_strings) or action.metavar or action.dest
            found['missing'].append('%s %s' % (parser.prog, name))


class Parsed(Exception):
    pass


def main():
    found = {'missing': [], 'descriptions': {}}

    def parse_known_args(self, args=None, namespace=None):
        walk(self, found)
        raise Parsed()
    argparse.ArgumentParser.parse_known_args = parse_known_args
    script = os.path.abspath(sys.argv[1])
    sys.argv = [script, '--help']
    sys.path.insert(0, os.path.dirname(script))   # as "python SCRIPT" does
    try:
        runpy.run_path(script, run_name='__main__')
    except Parsed:
        pass
    print(json.dumps(found))


if __name__ == '__main__':
    main()
