"""n-best lists in the Moses format: ``i ||| hypothesis ||| score``.

``i`` is the 0-based line number of the source sentence, ``hypothesis`` the
tokens separated by single spaces, ``score`` the cost of the hypothesis
(-log p, lower is better; length-normalised with ``translate.py -n``) and,
after rescoring (evaluation/rescore.py), further costs separated by spaces.  Every
hypothesis of the final beam appears, best first.
"""
from machinery.text_io import InputError, iter_lines

SEPARATOR = ' ||| '


def format_score(value):
    return '%.6f' % value


def format_entry(index, hypothesis, scores):
    """One n-best line (no newline); scores: one number or several."""
    if not isinstance(scores, (list, tuple)):
        scores = [scores]
    return SEPARATOR.join([str(index), hypothesis,
                           ' '.join(format_score(s) for s in scores)])


def parse_line(line, path, number):
    """(index, hypothesis, scores text) of one line; InputError naming the
    file and line when it is not ``i ||| hypothesis ||| scores``."""
    fields = line.split('|||')
    if len(fields) < 3:
        raise InputError('%s: line %d is not an n-best entry "i ||| hypothesis ||| '
                         'score": %d field(s)' % (path, number, len(fields)))
    index = fields[0].strip()
    if not index.isdigit():
        raise InputError('%s: line %d: the sentence number %r is not a non-negative '
                         'integer' % (path, number, index))
    scores = fields[-1].strip()
    for value in scores.split():
        try:
            float(value)
        except ValueError:
            raise InputError('%s: line %d: the score %r is not a number'
                             % (path, number, value))
    return int(index), fields[1].strip(), '|||'.join(fields[2:]).strip()


def read_nbest(path, n_sources=None):
    """Entries (index, hypothesis, scores text, line) of an n-best file.
    With n_sources, every index must be below it."""
    entries = []
    for number, line in enumerate(iter_lines(path), 1):
        if not line.strip():
            raise InputError('%s: line %d is empty: not an n-best entry' % (path, number))
        index, hyp, scores = parse_line(line, path, number)
        if n_sources is not None and index >= n_sources:
            raise InputError('%s: line %d refers to sentence %d but the source has %d '
                             'lines' % (path, number, index, n_sources))
        entries.append((index, hyp, scores, line))
    if not entries:
        raise InputError('%s: empty file, no n-best entries in it' % path)
    return entries
