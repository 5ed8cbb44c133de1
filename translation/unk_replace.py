"""Unknown-word replacement (Luong et al. 2015; Neubig's chapter, sec. 8.5).

Each UNK of an output becomes the source word that the step emitting it
attended to most (over the source words, the final eos left out), or that
word's translation from a word dictionary when one is given.

The dictionary is a UTF-8 text file, one entry a line:
``SOURCE_WORD TARGET_WORD [SCORE]``, fields separated by whitespace.  A
source word with several entries takes the one with the highest score (an
entry without a score counts as score 0; among equals the first line wins).
Blank lines are ignored; any other line is an error naming the file and line.
"""
import numpy

from machinery.text_io import InputError, iter_lines

UNK_TOKEN = 'UNK'


def load_dictionary(path):
    """{source word: target word} of a dictionary file (format above)."""
    best = {}
    for number, line in enumerate(iter_lines(path), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) not in (2, 3):
            raise InputError('%s: line %d: expected "SOURCE_WORD TARGET_WORD [SCORE]", '
                             'got %d field(s)' % (path, number, len(fields)))
        score = 0.
        if len(fields) == 3:
            try:
                score = float(fields[2])
            except ValueError:
                raise InputError('%s: line %d: the score %r is not a number'
                                 % (path, number, fields[2]))
        if fields[0] not in best or score > best[fields[0]][1]:
            best[fields[0]] = (fields[1], score)
    return {source: target for source, (target, _) in best.items()}


def replace_unknown(target_words, source_words, attention, dictionary=None):
    """target_words with each UNK replaced.

    attention: one row per target word (at least), over the source words
    followed by eos; dictionary: {source word: target word} or None.
    """
    if not source_words:
        return list(target_words)
    out = []
    for t, word in enumerate(target_words):
        if word == UNK_TOKEN:
            j = int(numpy.argmax(numpy.asarray(attention[t])[:len(source_words)]))
            source = source_words[j]
            word = dictionary.get(source, source) if dictionary else source
        out.append(word)
    return out
