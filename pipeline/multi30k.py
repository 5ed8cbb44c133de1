"""Multi30k task 1 (English-German image descriptions): get the data and
preprocess it as the benchmark does.

get::

    python pipeline/multi30k.py get --out DIR [--base URL_OR_PATH] \\
        [--langs en de] [--no-checksum]

fetches the ten raw files of task 1, ``{train,val,test_2016_flickr,
test_2017_flickr,test_2017_mscoco}.{en,de}.gz`` (gzip'd text, one sentence a
line), from the dataset's repository (github.com/multi30k/dataset,
``data/task1/raw/``) into ``DIR/raw/``, keeping their names.  ``--base`` is
the repository's raw address (the default, ``BASE_URL``), or a local copy of
the repository in its own layout: a directory or a ``file://`` URL.  Each
file arrives under a temporary name in ``DIR/raw/`` and gets its name only
when it is complete and verified:

* it decompresses completely (a truncated or corrupt gzip is an error);
* it has the set's number of lines (``LINES``);
* its SHA-256 is the one in ``SHA256`` (skipped with ``--no-checksum``, for
  a copy of a later version of the dataset).

A file already in ``DIR/raw/`` that passes these checks is not fetched
again.  Only English and German are offered (the two languages of task 1
that all five sets exist in); another language is refused before anything
is fetched.  Progress goes to stderr.

prepare::

    python pipeline/multi30k.py prepare --raw DIR/raw --out DIR \\
        [--bpe-merges 10000] [--jobs N]

is ``pipeline/preprocess.py prepare`` on the five sets with the benchmark's
settings, those of the dataset's ``scripts/task1-tokenize.sh`` (``lowercase.perl
| normalize-punctuation.perl -l LANG | tokenizer.perl -l LANG``, Moses'
defaults: escaping, no aggressive dash splitting), then joint BPE (10,000
merges by default, learnt on the tokenised training data of both sides)
applied with ``--vocabulary-threshold 1`` (each side's units of its BPE'd
training data), and the dictionaries of ``build_dictionary.py`` (every word
kept).  Outputs in DIR: ``SET.tok.{en,de}`` (tokenised, lowercased: the
references for tokenised BLEU), ``SET.bpe.{en,de}`` (the model's input),
``train.bpe.{en,de}.pkl/.json``, ``bpe.codes``, ``bpe.vocab.{en,de}`` and
``preprocess.json`` (the settings and line counts).

Agreement with the dataset's own tokenised files (``data/task1/tok/
SET.lc.norm.tok.LANG``, made with Moses commit 3a0631a), lines identical:
English 28,999 of 29,000 (train; the one other line differs only in its
spaces: the dataset's file has a double and a trailing space there) and all
lines of val, test_2016_flickr, test_2017_flickr and test_2017_mscoco;
German 28,994 of 29,000 (train), 1,013 of 1,014 (val) and all lines of the
three test sets.  The seven German lines that differ end in a period inside
quotes (``... im Herzen.“``, ``... Wasserfontäne."``): for every language
but English, that Moses version's normalize-punctuation.perl moved the
period out of the quotes (``... herzen &quot; .``); today's script, and
sacremoses, leave a sentence-final one where it is (``... herzen . &quot;``).
The dictionaries have 5,201 (English) and 7,064 (German) entries, eos and
UNK included, as those built the same way from the dataset's own tokenised
files.

Faults (a file that is missing, truncated or corrupt, has the wrong number
of lines or the wrong checksum; an address that cannot be reached; an
unsupported language) print one ``error: ...`` line naming the file or the
address and exit with status 1; no file of ``DIR/raw/`` then has its final
name without having been verified.
"""
import argparse
import gzip
import hashlib
import os
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zlib

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from machinery import cli
from machinery import output_files
from pipeline import preprocess
from machinery.progress import ProgressLine
from machinery.text_io import InputError, one_line

BASE_URL = 'https://github.com/multi30k/dataset/raw/master'
RAW_PATH = 'data/task1/raw'
SETS = ('train', 'val', 'test_2016_flickr', 'test_2017_flickr', 'test_2017_mscoco')
LANGUAGES = ('en', 'de')
LINES = {'train': 29000, 'val': 1014, 'test_2016_flickr': 1000,
         'test_2017_flickr': 1000, 'test_2017_mscoco': 461}
# The files of the dataset's repository (master, as of 2024).
SHA256 = {
    'train.en.gz': 'd79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f',
    'train.de.gz': '726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6',
    'val.en.gz': '14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28',
    'val.de.gz': 'f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a',
    'test_2016_flickr.en.gz': '611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9',
    'test_2016_flickr.de.gz': '9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8',
    'test_2017_flickr.en.gz': '76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074',
    'test_2017_flickr.de.gz': 'a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee',
    'test_2017_mscoco.en.gz': 'aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58',
    'test_2017_mscoco.de.gz': '799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338',
}
CHUNK = 1 << 16
TIMEOUT_S = 60


def _progress(message):
    print('multi30k: %s' % message, file=sys.stderr, flush=True)


def file_name(name, lang):
    return '%s.%s.gz' % (name, lang)


def file_names(langs):
    return [file_name(name, lang) for name in SETS for lang in langs]


def check_languages(langs):
    unknown = [lang for lang in langs if lang not in LANGUAGES]
    if unknown:
        raise InputError('--langs %s: not available; Multi30k task 1 has all five '
                         'sets in %s only' % (' '.join(unknown), ' and '.join(LANGUAGES)))


# --------------------------------------------------------------------------
# Where the files come from: a local copy or an address
# --------------------------------------------------------------------------

class LocalCopy(object):
    """A copy of the dataset's repository on this machine."""

    def __init__(self, root, base):
        self.base = base
        self.raw = os.path.join(root, RAW_PATH)
        if not os.path.isdir(root):
            raise InputError('%s: no such directory (--base names a copy of the '
                             'multi30k/dataset repository, or its address)' % base)
        if not os.path.isdir(self.raw):
            raise InputError('%s: no %s folder in it (--base names the root of a copy '
                             'of the multi30k/dataset repository)' % (base, RAW_PATH))

    def where(self, name):
        return os.path.join(self.raw, name)

    def open(self, name):
        """(binary stream, size in bytes) of the file ``name``."""
        path = self.where(name)
        if not os.path.isfile(path):
            raise InputError('%s: no such file in the copy at %s' % (path, self.base))
        return open(path, 'rb'), os.path.getsize(path)


class RemoteCopy(object):
    """The dataset's repository at an address (http, https, ftp)."""

    def __init__(self, base):
        self.base = base

    def where(self, name):
        return '%s/%s/%s' % (self.base.rstrip('/'), RAW_PATH, name)

    def open(self, name):
        url = self.where(name)
        try:
            response = urllib.request.urlopen(url, timeout=TIMEOUT_S)
        except urllib.error.HTTPError as e:
            raise InputError('%s: cannot download: HTTP %d %s' % (url, e.code, e.reason))
        except urllib.error.URLError as e:
            raise unreachable(self.base, e.reason)
        except OSError as e:   # a time-out, a reset connection
            raise unreachable(self.base, e)
        size = response.headers.get('Content-Length')
        return response, int(size) if size and size.isdigit() else None


def unreachable(base, reason):
    return InputError('cannot reach %s (%s); without a network, --base can name a local '
                      'copy of the dataset (a directory or a file:// URL)'
                      % (base, one_line(reason)))


def source_of(base):
    """The LocalCopy or RemoteCopy that ``base`` names."""
    parsed = urllib.parse.urlparse(base)
    if parsed.scheme == 'file':
        return LocalCopy(urllib.request.url2pathname(parsed.path), base)
    if parsed.scheme in ('http', 'https', 'ftp'):
        return RemoteCopy(base)
    return LocalCopy(base, base)


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------

def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(CHUNK), b''):
            digest.update(chunk)
    return digest.hexdigest()


def gzip_line_count(path):
    """Lines of the decompressed file; ValueError when it does not decompress
    to its end."""
    lines = 0
    try:
        with gzip.open(path, 'rb') as f:
            for chunk in iter(lambda: f.read(CHUNK), b''):
                lines += chunk.count(b'\n')
    except (OSError, EOFError, zlib.error) as e:
        raise ValueError('truncated or corrupt gzip file (%s)' % one_line(e))
    return lines


def problem_with(path, name, checksum):
    """Why the file at ``path`` is not a good copy of ``name``; None if it is."""
    try:
        lines = gzip_line_count(path)
    except ValueError as e:
        return str(e)
    expected = LINES[name.split('.')[0]]
    if lines != expected:
        return '%d lines, not the %d of the dataset' % (lines, expected)
    digest = sha256_of(path) if checksum else None
    if checksum and digest != SHA256[name]:
        return ('SHA-256 %s, not the %s of the dataset (--no-checksum accepts a copy '
                'of another version)' % (digest, SHA256[name]))
    return None


# --------------------------------------------------------------------------
# get
# --------------------------------------------------------------------------

def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fetch(source, name, target, checksum):
    """Copy ``name`` from ``source`` to ``target``: to a temporary name beside
    it, checked, then renamed; nothing is left behind on a failure."""
    fd, part = tempfile.mkstemp(dir=os.path.dirname(target),
                                prefix='.%s.' % name, suffix='.part')
    try:
        with os.fdopen(fd, 'wb') as out:
            copy_stream(source, name, out)
            out.flush()
            os.fsync(out.fileno())
        problem = problem_with(part, name, checksum)
        if problem:
            raise InputError('%s: %s; the file was not kept' % (source.where(name), problem))
        os.chmod(part, 0o666 & ~current_umask())   # mkstemp made it 0600
        os.replace(part, target)
    finally:
        output_files.remove_if_there(part)


def copy_stream(source, name, out):
    """Write the bytes of ``name`` to ``out``, with a progress line."""
    stream, size = source.open(name)
    verb = 'copying' if isinstance(source, LocalCopy) else 'downloading'
    done = 0
    progress = ProgressLine(max(size // 1024, 1), '%s %s' % (verb, name), 'kB') \
        if size is not None else None
    with stream:
        while True:
            try:
                chunk = stream.read(CHUNK)
            except OSError as e:
                raise InputError('%s: cannot read: %s' % (source.where(name), one_line(e)))
            if not chunk:
                break
            out.write(chunk)
            done += len(chunk)
            if progress is not None:   # the line ends at finish(), not before
                progress(min(done // 1024, progress.total - 1))
    if progress is not None:
        progress.finish()
    else:
        _progress('%s %s: %d kB' % (verb, name, done // 1024))


def get(args):
    check_languages(args.langs)
    source = source_of(args.base)
    raw = os.path.join(args.out, 'raw')
    os.makedirs(raw, exist_ok=True)
    for name in file_names(args.langs):
        target = os.path.join(raw, name)
        if os.path.exists(target):
            problem = problem_with(target, name, args.checksum)
            if problem is None:
                _progress('%s: already there and verified' % target)
                continue
            _progress('%s: %s; fetching it again' % (target, problem))
        fetch(source, name, target, args.checksum)
        _progress('%s: %d lines%s' % (target, LINES[name.split('.')[0]],
                                      ', checksum verified' if args.checksum else ''))
    _progress('done: %d files in %s' % (len(args.langs) * len(SETS), raw))


# --------------------------------------------------------------------------
# prepare
# --------------------------------------------------------------------------

def benchmark_settings(args):
    """pipeline/preprocess.py prepare's settings for task1-tokenize.sh's
    preprocessing, then joint BPE with vocabulary threshold 1."""
    return argparse.Namespace(
        src_lang='en', trg_lang='de', out=args.out, jobs=args.jobs,
        lowercase=True, normalize_punctuation=True, aggressive_dash_splits=False,
        zh_split='whitespace', bpe_merges=args.bpe_merges, joint_bpe=True,
        bpe_vocabulary_threshold=1, vocab=None)


def raw_paths(raw):
    """{set: {lang: raw file}}; InputError for a missing file."""
    paths = {name: {lang: os.path.join(raw, file_name(name, lang)) for lang in LANGUAGES}
             for name in SETS}
    for name in SETS:
        for lang in LANGUAGES:
            if not os.path.isfile(paths[name][lang]):
                raise InputError('%s: no such file (pipeline/multi30k.py get --out DIR '
                                 'fetches the data into DIR/raw)' % paths[name][lang])
    return paths


def prepare(args):
    preprocess.prepare_sets(benchmark_settings(args), raw_paths(args.raw), keep_tok=SETS)


# --------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------

def parse_args(argv):
    parser = cli.ArgumentParser(
        description='Multi30k task 1 (English-German): get the raw data, preprocess it '
        'as the benchmark does.')
    sub = parser.add_subparsers(dest='command', required=True,
                                parser_class=cli.ArgumentParser)
    g = sub.add_parser('get', help='fetch and verify the raw files into DIR/raw')
    g.add_argument('--out', required=True, metavar='DIR',
                   help='the data folder: the raw files go to DIR/raw (usual: '
                        'data/multi30k)')
    g.add_argument('--base', default=BASE_URL, metavar='URL_OR_PATH',
                   help='the raw address of the dataset repository (default %s), or a '
                   'local copy: a directory or a file:// URL' % BASE_URL)
    g.add_argument('--langs', nargs='+', default=list(LANGUAGES), metavar='LANG',
                   help='languages to get (default: en de)')
    g.add_argument('--no-checksum', dest='checksum', action='store_false',
                   help='do not compare SHA-256 checksums (a later version of the data)')
    p = sub.add_parser('prepare', help='raw files -> tokenised text, BPE, dictionaries')
    p.add_argument('--raw', required=True, metavar='DIR/raw',
                   help='the raw files that "get" fetched (usual: data/multi30k/raw)')
    p.add_argument('--out', required=True, metavar='DIR',
                   help='where the tokenised text, the BPE\'d text, the BPE codes and '
                        'the dictionaries go (usual: data/multi30k)')
    p.add_argument('--bpe-merges', type=int, default=10000,
                   help='merges of the joint English-German BPE (default 10000, the '
                        'benchmark\'s)')
    p.add_argument('--jobs', type=cli.positive_int, default=1,
                   help='processes for tokenisation (default 1)')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: (get if args.command == 'get' else prepare)(args))


if __name__ == '__main__':
    sys.exit(main())
