"""Build the word dictionary of a corpus, with the original dl4mt ids.

Usage: python build_dictionary.py FILE [FILE ...]

For each FILE (plain text or ``.gz``, UTF-8) writes ``FILE.pkl`` (a pickle of
an OrderedDict word -> id that the original Python-2 code can load) and
``FILE.json`` (the same mapping, in id order).

The ids are those of the original script:
  * each line is stripped of ASCII whitespace and split on SINGLE spaces
    (``line.strip().split(' ')``), so a run of spaces, or an empty line,
    yields the empty word ``''``, which is counted like any other word (and
    a tab stays inside its word);
  * words are counted in order of first appearance, ranked with
    ``numpy.argsort(counts)[::-1]`` (numpy's default sort, so the order of
    ties is numpy's), and numbered from 2 in that order after ``eos`` = 0
    and ``UNK`` = 1;
  * the ids are assigned in that order by plain item assignment, so a corpus
    word that is literally ``eos`` or ``UNK`` overwrites the id of the
    special entry (that entry then has the word's rank id, and id 0 or 1 is
    left without a word), exactly as in the original.

On a missing, empty or non-UTF-8 file it prints one ``error: ...`` line to
stderr, writes no file, and exits with status 1.
"""
import collections
import sys

from machinery import cli   # first: without .venv, one line (machinery/__init__.py)

import numpy
from machinery.output_files import check_distinct
from machinery.vocab import save_dictionary
from machinery.text_io import InputError, iter_lines

_PROGRESS_EVERY = 1000000
_ASCII_WHITESPACE = ' \t\n\r\x0b\x0c'


def count_words(path, progress=None):
    """Word counts of ``path`` as an OrderedDict in order of first appearance."""
    counts = collections.Counter()  # keeps insertion order
    n_lines = 0
    for n_lines, line in enumerate(iter_lines(path), 1):
        counts.update(line.strip(_ASCII_WHITESPACE).split(' '))
        if progress and n_lines % _PROGRESS_EVERY == 0:
            progress('%s: %d lines, %d words so far' % (path, n_lines, len(counts)))
    if n_lines == 0:
        raise InputError('%s: file is empty' % path)
    return collections.OrderedDict(counts)


def build_dictionary(path, progress=None):
    """The word -> id OrderedDict of ``path``, with the original's ids."""
    word_freqs = count_words(path, progress)
    words = list(word_freqs.keys())
    freqs = list(word_freqs.values())
    sorted_idx = numpy.argsort(freqs)
    sorted_words = [words[ii] for ii in sorted_idx[::-1]]

    worddict = collections.OrderedDict()
    worddict['eos'] = 0
    worddict['UNK'] = 1
    for ii, ww in enumerate(sorted_words):
        worddict[ww] = ii + 2
    return worddict


def _progress(message):
    print(message, file=sys.stderr, flush=True)


def build_and_save(paths):
    """FILE.pkl and FILE.json for every file; every dictionary is built
    before the first is written, so that an error writes nothing."""
    check_distinct([f + suffix for f in paths for suffix in ('.pkl', '.json')], paths)
    dictionaries = []
    for filename in paths:
        _progress('Processing %s' % filename)
        dictionaries.append((filename, build_dictionary(filename, _progress)))
    for filename, worddict in dictionaries:
        save_dictionary(worddict, filename + '.pkl', filename + '.json')
        _progress('%s: %d words -> %s.pkl, %s.json'
                  % (filename, len(worddict), filename, filename))
    _progress('Done')


def parse_args(argv):
    p = cli.ArgumentParser(description=cli.summary(__doc__))
    p.add_argument('files', nargs='+', metavar='FILE',
                   help='a corpus side, one tokenised sentence a line (plain text or '
                        '.gz, UTF-8): FILE.pkl (a pickle the original Python 2 code '
                        'reads) and FILE.json (the same words and ids) are written '
                        'beside it')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: build_and_save(args.files))


if __name__ == '__main__':
    sys.exit(main())
