"""The small language-modelling experiment: baseline, mean and attentive
residual LMs (language_model/lm.py) on the toy corpus' target side, same budget, same seed.

    python language_model/lm_experiment.py [--out DIR] [--updates N] [--seeds S ...]
        [--variants baseline mean attentive attentive-scope] [--plot FILE.png]

Generates the toy corpus (demo/toy_corpus.py; its target side has subject-verb
agreement 3-10 tokens apart, across attractor nouns), trains one model per
variant and seed for the same number of updates on the same batches (a seed
gives the same data order and, where the parameters are the same, the same
initial values; the best parameters by validation perplexity are kept), then
measures on the test set:

* perplexity (per word, end-of-sentence tokens counted, as ``language_model/lm.py eval``);
* agreement: at every clause-final main verb of the test sentences, whether
  the model gives the reference form (the verb stem with the subject's class
  suffix) a higher probability than the stem with each of the two other
  class suffixes, given the reference prefix.

Writes DIR/results.json and DIR/results.md (the table: means over the seeds,
each seed's figure in brackets) and the plot (validation perplexity during
training, test perplexity, agreement).  Progress goes to stderr; each
training's log to DIR/<variant>-seed<S>.log.
"""
import os
import sys

if __name__ == '__main__':  # run as a file: import from the project root, not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from theano_platform import theano_env  # noqa: F401  (must come before theano)
if __name__ == '__main__':
    theano_env.configure(allow_gc=False)

import contextlib
import time
from collections import OrderedDict

import numpy
import theano
import theano.tensor as tensor

from machinery import cli
from language_model import lm
from demo import toy_language
from machinery import vocab
from build_dictionary import build_dictionary
from data_iterator import prepare_monolingual
from machinery.model_io import load_archive_extras
from machinery.output_files import write_json, write_text
from machinery.vocab import save_dictionary
from machinery.text_io import read_lines

VARIANTS = OrderedDict([
    ('baseline', dict(residual='none')),
    ('mean', dict(residual='mean')),
    ('attentive', dict(residual='attentive', att_scoring='content')),
    ('attentive-scope', dict(residual='attentive', att_scoring='content_scope')),
])
LABELS = {'baseline': 'LSTM baseline', 'mean': 'LSTM + mean residual',
          'attentive': 'LSTM + attentive residual',
          'attentive-scope': 'LSTM + attentive residual (content+scope)'}


def log(message):
    print(message, file=sys.stderr, flush=True)


def write_corpus(out, n_train, n_dev, n_test, seed):
    """The target side of the toy corpus: out/{train,dev,test}.txt."""
    os.makedirs(out, exist_ok=True)
    splits = toy_language.generate_corpus([('test', n_test), ('dev', n_dev),
                                         ('train', n_train)], seed=seed)
    paths = {}
    for name, pairs in splits.items():
        paths[name] = os.path.join(out, '%s.txt' % name)
        text = ''.join(trg + '\n' for _, trg in pairs)
        write_text(paths[name], text)
    return paths


def run_name(variant, seed):
    return '%s-seed%d' % (variant, seed)


def training_options(args, variant, seed, paths, out):
    """The same options for every variant except the residual."""
    return dict(VARIANTS[variant], saveto=os.path.join(out, run_name(variant, seed) + '.npz'),
                dataset=paths['train'], valid_dataset=paths['dev'],
                dictionary=paths['dictionary'], n_words=paths['n_words'], encoder=args.encoder,
                dim_word=args.dim_word, dim=args.dim, batch_size=args.batch_size,
                valid_batch_size=64, optimizer='adam', lrate=args.lrate, clip_c=1.,
                finish_after=args.updates, validFreq=args.valid_freq,
                saveFreq=args.updates, sampleFreq=10 ** 9, dispFreq=args.valid_freq,
                patience=10 ** 6, maxlen=50, overwrite=True, seed=seed,
                restart=True)   # an earlier experiment's run moves aside


class _TrainingLog(object):
    """Training's stdout into a log file; its progress lines also to stderr."""
    SHOWN = ('Epoch', 'Valid', 'Compiled')

    def __init__(self, f):
        self.f = f

    def write(self, text):
        self.f.write(text)
        for line in text.split('\n'):
            if line.startswith(self.SHOWN):
                log('  ' + line)

    def flush(self):
        self.f.flush()


def train_variant(args, variant, seed, paths, out):
    """Train one model (its log in out/<run>.log); the wall time in s."""
    options = training_options(args, variant, seed, paths, out)
    log('== %s, seed %d: %s parameters, %d updates' % (
        variant, seed, format(lm.count_params(options), ','), args.updates))
    t0 = time.time()
    with open(os.path.join(out, run_name(variant, seed) + '.log'), 'w') as f, \
            contextlib.redirect_stdout(_TrainingLog(f)):
        lm.train(**options)
    return time.time() - t0


def agreement_sites(sentences):
    """(sentence index, position, the verb forms of the three classes,
    index of the reference one) of every clause-final main verb."""
    sites = []
    for n, line in enumerate(sentences):
        for pos, word in enumerate(vocab.words(line)):
            if word in toy_language.TRG_FINITE:
                stem, cls = toy_language.TRG_FINITE[word]
                forms = [stem + c for c in toy_language.CLASSES]
                sites.append((n, pos, forms, forms.index(word)))
    return sites


def agreement_accuracy(model, path, batch_size=64):
    """Share of the test verbs whose reference form the model prefers over
    the two other class forms, given the reference prefix."""
    y_sym, y_mask_sym, _, logit = lm.build_model(model.tparams, model.options)[2:6]
    probs = tensor.nnet.softmax(logit.reshape([-1, logit.shape[2]])).reshape(logit.shape)
    f_probs = theano.function([y_sym, y_mask_sym], probs, name='f_probs')
    sentences = read_lines(path)
    sites = agreement_sites(sentences)
    ids = [vocab.words_to_ids(vocab.words(s), model.word_dict, model.options['n_words'])
           for s in sentences]
    correct = 0
    for start in range(0, len(sentences), batch_size):
        y, y_mask = prepare_monolingual(ids[start:start + batch_size])
        p = f_probs(y, y_mask)
        for n, pos, forms, ref in sites:
            if start <= n < start + batch_size:
                form_ids = vocab.words_to_ids(forms, model.word_dict)
                correct += int(numpy.argmax(p[pos, n - start, form_ids]) == ref)
    return correct / len(sites), len(sites)


def measure(variant, seed, out, paths, seconds):
    path = os.path.join(out, run_name(variant, seed) + '.npz')
    model = lm.LoadedModel(path)
    test = lm.evaluate(model, paths['test'])
    accuracy, n_sites = agreement_accuracy(model, paths['test'])
    history = load_archive_extras(path)['history_errs']
    return OrderedDict([
        ('variant', variant), ('seed', seed), ('label', LABELS[variant]),
        ('parameters', lm.count_params(model.options)),
        ('test_perplexity', test['perplexity']), ('test_words', test['words']),
        ('agreement_accuracy', accuracy), ('agreement_sites', n_sites),
        ('best_valid_perplexity', float(numpy.exp(min(history)))),
        ('valid_perplexity_history', [float(numpy.exp(e)) for e in history]),
        ('train_seconds', seconds)])


def by_variant(results):
    """variant -> its runs, in the order of the results."""
    groups = OrderedDict()
    for r in results:
        groups.setdefault(r['variant'], []).append(r)
    return groups


def _mean_and_runs(values, fmt):
    text = fmt % numpy.mean(values)
    if len(values) > 1:
        text += ' (%s)' % ', '.join(fmt % v for v in values)
    return text


def table(results, args):
    lines = ['| model | parameters | test perplexity | agreement (of %d verbs) | '
             'best dev perplexity | training s |' % results[0]['agreement_sites'],
             '|---|---:|---:|---:|---:|---:|']
    for variant, runs in by_variant(results).items():
        lines.append('| %s | %s | %s | %s | %s | %.0f |' % (
            runs[0]['label'], format(runs[0]['parameters'], ','),
            _mean_and_runs([r['test_perplexity'] for r in runs], '%.3f'),
            _mean_and_runs([100 * r['agreement_accuracy'] for r in runs], '%.1f%%'),
            _mean_and_runs([r['best_valid_perplexity'] for r in runs], '%.3f'),
            numpy.mean([r['train_seconds'] for r in runs])))
    lines.append('')
    lines.append('%s, dim_word %d, dim %d, batch %d, Adam (lr %g), clip 1, %d updates; '
                 'seeds %s (mean, then each seed); %d training sentences (corpus seed %d).'
                 % (args.encoder.upper(), args.dim_word, args.dim, args.batch_size,
                    args.lrate, args.updates, ', '.join(str(s) for s in args.seeds),
                    args.train, args.corpus_seed))
    return '\n'.join(lines) + '\n'


def plot(results, args, path):
    """Dev perplexity during training; test perplexity (each seed, a line at
    the mean); agreement (the mean, a dot per seed)."""
    from machinery import plots
    fig, (curves, ppl, agree) = plots.plt.subplots(1, 3, figsize=(15, 4.5),
                                             gridspec_kw={'width_ratios': [2, 1, 1]})
    groups = by_variant(results)
    colours = dict((v, 'C%d' % i) for i, v in enumerate(groups))
    styles = ['-', '--', ':', '-.']
    for variant, runs in groups.items():
        for i, r in enumerate(runs):
            steps = [args.valid_freq * (k + 1)
                     for k in range(len(r['valid_perplexity_history']))]
            curves.plot(steps, r['valid_perplexity_history'], color=colours[variant],
                        linestyle=styles[i % len(styles)],
                        label=r['label'] if i == 0 else None)
    lowest = min(min(r['valid_perplexity_history']) for r in results)
    curves.set(xlabel='updates', ylabel='dev perplexity', ylim=(0.97 * lowest, 1.3 * lowest),
               title='Validation during training (one line per seed; the first '
                     'validations are above the frame)')
    curves.legend()
    x = numpy.arange(len(groups))
    all_ppl = [r['test_perplexity'] for r in results]
    for xi, (variant, runs) in zip(x, groups.items()):
        values = [r['test_perplexity'] for r in runs]
        acc = [100 * r['agreement_accuracy'] for r in runs]
        jitter = numpy.linspace(-0.12, 0.12, len(runs)) if len(runs) > 1 else [0.]
        ppl.scatter(xi + jitter, values, color=colours[variant], s=30, alpha=0.7, zorder=3)
        ppl.hlines(numpy.mean(values), xi - 0.25, xi + 0.25, color='black')   # the mean
        ppl.annotate('%.3f' % numpy.mean(values), (xi, numpy.mean(values)),
                     textcoords='offset points', xytext=(0, 4), ha='center', fontsize=9)
        agree.bar(xi, numpy.mean(acc), color=colours[variant], alpha=0.8)
        agree.scatter(xi + jitter, acc, color='black', s=12, zorder=3)
        agree.annotate('%.1f%%' % numpy.mean(acc), (xi, max(acc)), textcoords='offset points',
                       xytext=(0, 6), ha='center', va='bottom', fontsize=9)
    span = max(all_ppl) - min(all_ppl) or 1.
    ppl.set(xticks=x, xticklabels=list(groups), xlim=(-0.5, len(x) - 0.5),
            ylim=(min(all_ppl) - 0.3 * span, max(all_ppl) + 0.3 * span),
            ylabel='test perplexity (lower is better)', title='Test perplexity (each seed)')
    ppl.grid(axis='y', alpha=0.3)
    agree.axhline(100. / len(toy_language.CLASSES), color='grey', linestyle='--',
                  label='chance')
    agree.set(xticks=x, xticklabels=list(groups), ylim=(0, 118),
              ylabel='% of verbs in the agreeing form',
              title='Agreement (%d test verbs)' % results[0]['agreement_sites'])
    agree.legend(loc='lower right')
    for ax in (ppl, agree):
        ax.tick_params(axis='x', labelsize=8, labelrotation=15)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    plots.save(fig, path, dpi=100)


def parse_args(argv):
    ap = cli.ArgumentParser(description=cli.summary(__doc__))
    out = ap.add_argument_group('output')
    out.add_argument('--out', default='lm_experiment_output',
                     help='folder of the corpus, the runs\' logs, results.json and '
                          'results.md (default %(default)s)')
    out.add_argument('--plot', default=os.path.join('docs', 'lm_experiment.png'),
                     help='the figure (default %(default)s, the one in the docs)')
    corpus = ap.add_argument_group('the toy corpus')
    corpus.add_argument('--train', type=cli.positive_int, default=20000,
                        help='training sentences (default %(default)s)')
    corpus.add_argument('--dev', type=cli.positive_int, default=500,
                        help='validation sentences (default %(default)s)')
    corpus.add_argument('--test', type=cli.positive_int, default=1000,
                        help='test sentences (default %(default)s)')
    corpus.add_argument('--corpus-seed', type=int, default=1,
                        help='seed of the sentences drawn (default %(default)s)')
    runs = ap.add_argument_group('the runs (the defaults are docs/language_model.md\'s)')
    runs.add_argument('--variants', nargs='+', default=list(VARIANTS)[:3],
                      choices=list(VARIANTS),
                      help='the models compared (default: %(default)s)')
    runs.add_argument('--seeds', type=int, nargs='+', default=[1234],
                      help='one training per variant and seed (default 1234)')
    runs.add_argument('--updates', type=cli.positive_int, default=4000,
                      help='updates of every run (default %(default)s)')
    runs.add_argument('--valid-freq', type=cli.positive_int, default=200,
                      help='updates between validations (default %(default)s)')
    runs.add_argument('--encoder', default='lstm', choices=tuple(lm.layers.RECURRENT),
                      help='the recurrent layer (default %(default)s)')
    runs.add_argument('--dim_word', type=int, default=32,
                      help='word embedding size (default %(default)s)')
    runs.add_argument('--dim', type=int, default=64,
                      help='recurrent state size (default %(default)s)')
    runs.add_argument('--batch_size', type=int, default=32,
                      help='sentences per update (default %(default)s)')
    runs.add_argument('--lrate', type=float, default=0.002,
                      help='Adam\'s learning rate (default %(default)s)')
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(cli.arguments(argv))
    return cli.run(lambda: experiment(args))


def experiment(args):
    """Every variant and seed: train, measure; then the table and the plot."""
    paths = write_corpus(os.path.join(args.out, 'data'), args.train, args.dev,
                         args.test, args.corpus_seed)
    word_dict = build_dictionary(paths['train'])
    paths['dictionary'] = os.path.join(args.out, 'dict.pkl')
    paths['n_words'] = max(word_dict.values()) + 1
    save_dictionary(word_dict, paths['dictionary'], os.path.join(args.out, 'dict.json'))
    results = []
    for variant in args.variants:
        for seed in args.seeds:
            seconds = train_variant(args, variant, seed, paths, args.out)
            results.append(measure(variant, seed, args.out, paths, seconds))
            log('%s, seed %d: test perplexity %.3f, agreement %.1f%%, %.0f s' % (
                variant, seed, results[-1]['test_perplexity'],
                100 * results[-1]['agreement_accuracy'], seconds))
    write_json(os.path.join(args.out, 'results.json'),
               {'options': vars(args), 'results': results}, indent=2)
    md = table(results, args)
    write_text(os.path.join(args.out, 'results.md'), md)
    plot(results, args, args.plot)
    print(md)
    log('wrote %s/results.json, %s/results.md and %s' % (args.out, args.out, args.plot))


if __name__ == '__main__':
    sys.exit(main())
