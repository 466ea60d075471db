"""Per-token cost of grammar-constrained decoding on the local llama.cpp model.

Prints seconds per generated token without a grammar and with one, for each engine that is installed:

- `gbnf`: llama.cpp's own GBNF sampler (what `LlamaCppBackend` uses: `grammar=` of `create_completion`);
- `llguidance`, `xgrammar`: the grammar engine computes a token bitmask each step and drives llama-cpp-python
  through a `logits_processor` (masked tokens get -inf); measured only when the package imports.

Each figure is the median over `--repeats` greedy runs of the same prompt (the prompt is read once first, so the
figures are generation only). `decode` is llama.cpp's own decode time per token, `other` the rest of the time per
token (sampling, the grammar, Python), `setup` the per-call (gbnf: parse) or one-off (compile) cost of the grammar.

usage:
  .venv/bin/python scripts/bench_grammar_engine.py GRAMMAR.gbnf PROMPT.txt [--model qwen2.5-coder-1.5b]
         [--max-tokens 48] [--repeats 3] [--engines none,gbnf,llguidance,xgrammar]
  .venv/bin/python scripts/bench_grammar_engine.py --make-names DIR [--names 2000]
         writes test grammars of KQA Pro entity names (flat alternation and prefix trie), a tiny grammar of the
         same shape and a prompt for them, and a CodeAlignKGQA prompt (3 demonstrations, a question), into DIR
  .venv/bin/python scripts/bench_grammar_engine.py --codealign [--questions 3] [--demos 10] [--max-tokens 128]
         [--repeats 1] [--model qwen2.5-coder-1.5b] [--n-ctx 8192]
         the library's own path: `LlamaCppBackend.complete` without a grammar and with
         `program_grammar('codealign', 'syntax')` under each engine (`backend.engine` switched between calls, so
         all runs share one loaded model and one warm prompt prefix), on CodeAlignKGQA prompts with the manual
         KQA Pro demonstrations (`include_facts=False`); each prompt is read once first (max_tokens=1), so the
         figures are generation with the prefix reused
"""
from __future__ import annotations
import argparse, json, os, statistics, sys, time
from pathlib import Path

# before llama.cpp is loaded: OpenMP reads it once, and spinning worker threads slow a shared 2-core machine
# down several times over (kgqa_nb.llm sets it too, but only when it is the first to load llama.cpp)
os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')

ENGINES = ('none', 'gbnf', 'llguidance', 'xgrammar')
GREEDY = dict(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, seed=0)


def load() -> str:
    return '/'.join(f'{x:.2f}' for x in os.getloadavg())


# ------------------------------------------------------------------ test grammars
def gbnf_literal(s: str) -> str:
    return '"' + s.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n') + '"'


def trie_expr(names: list[str]) -> str:
    "A GBNF expression matching exactly `names`, written as a prefix trie (shared prefixes spelled once)."
    trie: dict = {}
    for n in names:
        node = trie
        for ch in n: node = node.setdefault(ch, {})
        node[''] = {}  # end of a name

    def expr(node: dict) -> str:
        alts = []
        for ch, child in sorted((k, v) for k, v in node.items() if k):
            lit = ch
            while len(child) == 1 and '' not in child:  # a chain with one way on: one literal
                (c2, child), = child.items()
                lit += c2
            rest = expr(child) if child else ''
            alts.append(gbnf_literal(lit) + (' ' + rest if rest else ''))
        if not alts: return ''
        body = alts[0] if len(alts) == 1 else '(' + ' | '.join(alts) + ')'
        if '' in node: return '(' + ' | '.join(alts) + ')?' if len(alts) > 1 else f'({alts[0]})?'
        return body

    return expr(trie)


def make_names(folder: Path, n: int):
    data = json.loads(Path(os.environ.get('KGQA_DATA', '../shared/data'), 'kqapro', 'test.json').read_text())
    names = []
    for q in data:
        for c in q.get('choices', []):
            if c and c[0].isalpha() and '\n' not in c and len(c) < 60 and c not in names: names.append(c)
        if len(names) >= n: break
    names = names[:n]
    shape = 'root ::= ("Find(\\"" name "\\")\\n")+\n'
    folder.mkdir(parents=True, exist_ok=True)
    (folder/'names_flat.gbnf').write_text(shape + 'name ::= ' + ' | '.join(map(gbnf_literal, sorted(names))) + '\n')
    (folder/'names_trie.gbnf').write_text(shape + 'name ::= ' + trie_expr(names) + '\n')
    (folder/'tiny.gbnf').write_text(shape + 'name ::= [^"\\n]+\n')
    demo = ''.join(f'Find("{x}")\n' for x in names[:6])
    (folder/'names_prompt.txt').write_text('# Entities of a knowledge base, one Find call per line\n' + demo)
    # for the grammar notebook's CodeAlignKGQA grammars: 3 manual demonstrations and a question, ending where they begin
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kgqa_nb.programs.prompts import CODEALIGN_ANSWER_START, DemoPool, codealign_demo, codealign_question_block
    demos = '\n\n'.join(codealign_demo(d, k) for k, d in enumerate(list(DemoPool.manual_kqapro().demos)[:3], 1))
    question = codealign_question_block(data[0]['question'], ['Tron: Legacy', 'Pirates of the Caribbean: The Curse of '
                                        'the Black Pearl'], ['film'])
    prompt = demos + '\n\n# Test question\n' + question + '\n' + CODEALIGN_ANSWER_START
    (folder/'codealign_prompt.txt').write_text(prompt)
    sizes = ', '.join(f'{p.name} ({p.stat().st_size:,} B)' for p in sorted(folder.iterdir()))
    print(f'{len(names)} names -> {folder}: {sizes}')


# ------------------------------------------------------------------ engines
class MaskProcessor:
    "A llama-cpp-python logits processor: feeds the tokens generated so far to a grammar matcher, masks the rest."
    def __init__(self, consume, fill, n_vocab: int):
        self.consume, self.fill, self.n_vocab = consume, fill, n_vocab
        self.n, self.ok, self.engine_s, self.steps = None, True, 0.0, 0

    def __call__(self, input_ids, scores):
        import numpy as np
        t = time.perf_counter()
        if self.n is None: self.n = len(input_ids)  # the first call sees the prompt
        for tok in input_ids[self.n:]: self.ok &= bool(self.consume(int(tok)))
        self.n = len(input_ids)
        mask = self.fill()  # int32 bitmask, bit i set: token i allowed
        self.engine_s += time.perf_counter() - t
        self.steps += 1
        allowed = np.unpackbits(mask.view(np.uint8), bitorder='little')[:self.n_vocab].astype(bool)
        scores[~allowed[:len(scores)]] = -np.inf
        return scores


def token_bytes(llm) -> list[bytes]:
    "Each token's text as bytes (control tokens: empty, so no grammar allows them)."
    import ctypes, llama_cpp
    vocab, buf = llm._model.vocab, ctypes.create_string_buffer(1 << 14)
    out = []
    for t in range(llm.n_vocab()):
        n = llama_cpp.llama_token_to_piece(vocab, t, buf, len(buf) - 1, 0, True)
        control = llama_cpp.llama_token_get_attr(vocab, t) & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
        out.append(b'' if control or n < 0 else bytes(buf[:n]))
    return out


def llguidance_processor(llm, text: str):
    import llguidance, llguidance.numpy as lnp
    from llguidance.llamacpp import lltokenizer_from_vocab
    t = time.perf_counter()
    if not hasattr(llm, '_llg_tokenizer'): llm._llg_tokenizer = lltokenizer_from_vocab(llm._model.vocab)
    tok_s = time.perf_counter() - t
    t = time.perf_counter()
    m = llguidance.LLMatcher(llm._llg_tokenizer, llguidance.grammar_from('gbnf', text))
    if m.is_error(): raise ValueError(m.get_error())
    mask = lnp.allocate_token_bitmask(1, llm._llg_tokenizer.vocab_size)

    def fill():
        lnp.fill_next_token_bitmask(m, mask)
        return mask[0]
    compile_s = time.perf_counter() - t
    return MaskProcessor(m.consume_token, fill, llm.n_vocab()), dict(tokenizer_s=tok_s, compile_s=compile_s)


def xgrammar_processor(llm, text: str):
    import llama_cpp, xgrammar as xgr
    t = time.perf_counter()
    if not hasattr(llm, '_xgr_compiler'):
        vocab = llm._model.vocab
        stops = sorted({llama_cpp.llama_vocab_eos(vocab), llama_cpp.llama_vocab_eot(vocab)} - {-1})
        info = xgr.TokenizerInfo(token_bytes(llm), xgr.VocabType.RAW, vocab_size=llm.n_vocab(), stop_token_ids=stops)
        llm._xgr_compiler = xgr.GrammarCompiler(info, max_threads=2, cache_enabled=False)
    tok_s = time.perf_counter() - t
    t = time.perf_counter()
    matcher = xgr.GrammarMatcher(llm._xgr_compiler.compile_grammar(text))
    mask = xgr.allocate_token_bitmask(1, llm.n_vocab())

    def fill():
        matcher.fill_next_token_bitmask(mask)
        return mask[0].numpy()
    compile_s = time.perf_counter() - t
    return MaskProcessor(matcher.accept_token, fill, llm.n_vocab()), dict(tokenizer_s=tok_s, compile_s=compile_s)


def gbnf_parse_seconds(llm, text: str) -> float:
    "What llama.cpp spends building a grammar sampler (it does so at the start of every call)."
    import llama_cpp
    times = []
    for _ in range(3):
        t = time.perf_counter()
        s = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, text.encode(), b'root')
        times.append(time.perf_counter() - t)
        if not s: raise ValueError('llama.cpp rejects the grammar (run it through LlamaCppBackend for the message)')
        llama_cpp.llama_sampler_free(s)
    return statistics.median(times)


def run(llm, prompt: str, max_tokens: int, **kw) -> dict:
    import llama_cpp
    ctx = llm._ctx.ctx
    llama_cpp.llama_perf_context_reset(ctx)
    t = time.perf_counter()
    r = llm.create_completion(prompt, max_tokens=max_tokens, **GREEDY, **kw)
    wall = time.perf_counter() - t
    p = llama_cpp.llama_perf_context(ctx)
    n = max(1, r['usage']['completion_tokens'])
    gen = wall - p.t_p_eval_ms / 1000
    decode = p.t_eval_ms / 1000
    return dict(tokens=r['usage']['completion_tokens'], text=r['choices'][0]['text'], s_per_token=gen / n,
                decode_s_per_token=decode / max(1, p.n_eval), other_s_per_token=(gen - decode) / n)


def bench(grammar_file: Path, prompt_file: Path, model: str, max_tokens: int, repeats: int, engines: list[str]):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kgqa_nb.llm.base import Decoding
    from kgqa_nb.llm.presets import get_backend
    text, prompt = grammar_file.read_text(), prompt_file.read_text()
    print(f'grammar {grammar_file.name}: {len(text):,} chars, {text.count("::=")} rules; prompt {prompt_file.name}; '
          f'model {model}; load average (1/5/15 min) at start {load()}', flush=True)
    backend = get_backend(model, cache=False)
    llm = backend.llm
    # the backend's own path once: the grammar is accepted and obeyed there too
    via_backend = backend.complete(prompt, Decoding(max_tokens=max_tokens, grammar=text))
    print(f'LlamaCppBackend: constrained={via_backend.constrained}, {via_backend.completion_tokens} tokens, '
          f'{via_backend.generation_seconds / max(1, via_backend.completion_tokens):.3f} s/token', flush=True)
    run(llm, prompt, 1)  # read the prompt once
    setup, procs = {}, {}
    if 'gbnf' in engines: setup['gbnf'] = dict(parse_s_per_call=gbnf_parse_seconds(llm, text))
    for name, make in [('llguidance', llguidance_processor), ('xgrammar', xgrammar_processor)]:
        if name not in engines: continue
        try:
            _, setup[name] = make(llm, text)
        except ImportError as e:
            print(f'{name}: not installed ({e})')
            engines = [x for x in engines if x != name]
        except Exception as e:
            print(f'{name}: cannot use this grammar: {type(e).__name__}: {str(e)[:300]}')
            engines = [x for x in engines if x != name]
    results = {e: [] for e in engines}
    for _ in range(repeats):  # engines interleaved, so a change in machine load hits them alike
        for e in engines:
            if e == 'none': results[e].append(run(llm, prompt, max_tokens))
            elif e == 'gbnf':
                grammar = backend._llama_cpp.LlamaGrammar.from_string(text, verbose=False)
                results[e].append(run(llm, prompt, max_tokens, grammar=grammar))
            else:
                proc, _ = (llguidance_processor if e == 'llguidance' else xgrammar_processor)(llm, text)
                r = run(llm, prompt, max_tokens, logits_processor=backend._llama_cpp.LogitsProcessorList([proc]))
                r.update(engine_s_per_token=proc.engine_s / max(1, proc.steps), matcher_accepted_all=proc.ok)
                results[e].append(r)
    base = statistics.median(r['s_per_token'] for r in results['none']) if results.get('none') else None
    print(f'\n{"engine":<11} {"tokens":>6} {"s/token":>8} {"decode":>7} {"other":>7} {"vs none":>8}  setup / notes')
    summary = {}
    for e, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs)
               for k in ('s_per_token', 'decode_s_per_token', 'other_s_per_token')}
        extra = dict(setup.get(e, {}))
        if 'engine_s_per_token' in rs[0]:
            extra.update(engine_s_per_token=statistics.median(r['engine_s_per_token'] for r in rs),
                         matcher_accepted_all=all(r['matcher_accepted_all'] for r in rs))
        if e not in ('none', 'gbnf') and results.get('gbnf'):  # the same greedy answer as llama.cpp's own sampler?
            extra.update(same_text_as_gbnf=rs[0]['text'] == results['gbnf'][0]['text'])
        rel = f'{med["s_per_token"] / base:7.2f}x' if base else ''
        notes = ', '.join(f'{k}={v:.4f}' if isinstance(v, float) else f'{k}={v}' for k, v in extra.items())
        print(f'{e:<11} {rs[0]["tokens"]:>6} {med["s_per_token"]:8.3f} {med["decode_s_per_token"]:7.3f} '
              f'{med["other_s_per_token"]:7.3f} {rel:>8}  {notes}')
        print(f'{"":<11} text: {rs[0]["text"][:100]!r}')
        summary[e] = dict(**{k: round(v, 4) for k, v in med.items()}, tokens=[r['tokens'] for r in rs], **extra)
    print(f'\nload average at end {load()}')
    print(json.dumps(dict(grammar=grammar_file.name, grammar_chars=len(text), model=model, max_tokens=max_tokens,
                          repeats=repeats, results=summary, load_end=load()), default=str))


# ------------------------------------------------------------------ the backend's engines on CodeAlignKGQA prompts
CODEALIGN_QUESTIONS = [  # (question, entities, concepts): KQA Pro-style, answered by the demonstrations' functions
    ('How many countries have more than 50 million people?', [], ['country']),
    ('Who is the director of Tron: Legacy?', ['Tron: Legacy'], []),
    ('Which film is longer, Pirates of the Caribbean: The Curse of the Black Pearl or Tron: Legacy?',
     ['Pirates of the Caribbean: The Curse of the Black Pearl', 'Tron: Legacy'], ['film']),
]


def bench_codealign(model: str, n_questions: int, n_demos: int, max_tokens: int, repeats: int, n_ctx: int):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import llama_cpp
    from kgqa_nb.programs.grammar import program_grammar
    from kgqa_nb.llm.base import Decoding
    from kgqa_nb.llm.llamacpp import resolve_engine
    from kgqa_nb.llm.presets import get_backend
    from kgqa_nb.programs.parse import parse_generation
    from kgqa_nb.programs.prompts import DemoPool, codealign_prompt
    engines = ['none', 'gbnf'] + (['llguidance'] if resolve_engine('auto') == 'llguidance' else [])
    print(f'load average (1/5/15 min) at start {load()}; model {model}, n_ctx {n_ctx}; engines {engines}', flush=True)
    grammar = program_grammar('codealign', 'syntax').gbnf()
    demos = list(DemoPool.manual_kqapro())[:n_demos]
    b = get_backend(model, cache=False, n_ctx=n_ctx, engine=engines[-1])
    setup = {}
    t = time.perf_counter(); b.gbnf_problem(grammar); setup['gbnf_parse_s'] = time.perf_counter() - t
    if 'llguidance' in engines:
        t = time.perf_counter(); b._llguidance_tokenizer(); setup['llg_tokenizer_s'] = time.perf_counter() - t
        t = time.perf_counter(); b.llguidance_matcher(grammar); setup['llg_compile_s'] = time.perf_counter() - t
    print(f'grammar {len(grammar):,} chars; ' + ', '.join(f'{k} {v:.3f}' for k, v in setup.items()), flush=True)
    rows = []
    for qi, (question, entities, concepts) in enumerate(CODEALIGN_QUESTIONS[:n_questions]):
        parts = codealign_prompt(question, entities, concepts, demos=demos, include_facts=False)
        t = time.perf_counter()
        w = b.complete(parts.text, Decoding(max_tokens=1))
        print(f'prompt {qi}: {w.prompt_tokens} tokens, warm-up call {time.perf_counter() - t:.1f} s '
              f'({b.last_reused_tokens} reused); load {load()}', flush=True)
        for rep in range(repeats):
            for e in engines:  # interleaved, so that a change in machine load hits every engine alike
                if e != 'none': b.engine = e
                d = Decoding(max_tokens=max_tokens, stop=parts.stop, grammar=None if e == 'none' else grammar)
                c = b.complete(parts.text, d)
                p = llama_cpp.llama_perf_context(b.llm._ctx.ctx)
                n = max(1, c.completion_tokens)
                decode = p.t_eval_ms / 1000
                gen = c.generation_seconds
                row = dict(prompt=qi, repeat=rep, engine=e, tokens=c.completion_tokens, finish=c.finish_reason,
                           reused=b.last_reused_tokens, s_per_token=gen / n,
                           decode_s_per_token=decode / max(1, p.n_eval), other_s_per_token=(gen - decode) / n,
                           parses=parse_generation(c.text, 'codealign', parts.answer_start).ok, text=c.text,
                           load=load())
                rows.append(row)
                print(f'  {e:<10} {row["tokens"]:>4} tok {row["s_per_token"]:.3f} s/tok '
                      f'(decode {row["decode_s_per_token"]:.3f}, other {row["other_s_per_token"]:.4f}) '
                      f'{c.finish_reason} parses={row["parses"]} load {row["load"]}', flush=True)
    print(f'\n{"engine":<11} {"tokens":>6} {"s/token":>8} {"decode":>7} {"other":>7} {"vs none":>8}  same text as gbnf')
    summary = {}
    for e in engines:
        rs = [r for r in rows if r['engine'] == e]
        med = {k: statistics.median(r[k] for r in rs)
               for k in ('s_per_token', 'decode_s_per_token', 'other_s_per_token')}
        same = [r['text'] == g['text'] for r in rs for g in rows
                if g['engine'] == 'gbnf' and (g['prompt'], g['repeat']) == (r['prompt'], r['repeat'])]
        summary[e] = dict(**{k: round(v, 4) for k, v in med.items()}, tokens=sum(r['tokens'] for r in rs),
                          parses=sum(r['parses'] for r in rs), runs=len(rs),
                          same_text_as_gbnf=None if e == 'none' else all(same))
        base = summary['none']['s_per_token']
        print(f'{e:<11} {summary[e]["tokens"]:>6} {med["s_per_token"]:8.3f} {med["decode_s_per_token"]:7.3f} '
              f'{med["other_s_per_token"]:7.4f} {med["s_per_token"] / base:7.2f}x  {all(same) if e != "none" else ""}')
    print(f'\nload average at end {load()}')
    print(json.dumps(dict(model=model, n_ctx=n_ctx, demos=n_demos, max_tokens=max_tokens, repeats=repeats,
                          grammar_chars=len(grammar), grammar_id=Decoding(grammar=grammar).constraint_id,
                          setup={k: round(v, 4) for k, v in setup.items()},
                          results=summary, load_end=load())))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('grammar', nargs='?', type=Path, help='GBNF file (root rule `root`)')
    ap.add_argument('prompt', nargs='?', type=Path, help='prompt text file')
    ap.add_argument('--model', default='qwen2.5-coder-1.5b', help='a local preset of kgqa_nb.llm, or a .gguf path')
    ap.add_argument('--max-tokens', type=int, default=48)
    ap.add_argument('--repeats', type=int, default=3)
    ap.add_argument('--engines', default='none,gbnf,llguidance,xgrammar')
    ap.add_argument('--make-names', type=Path, help='write test grammars and a prompt into this folder, then stop')
    ap.add_argument('--names', type=int, default=2000)
    ap.add_argument('--codealign', action='store_true', help='time the backend\'s engines on CodeAlignKGQA prompts')
    ap.add_argument('--questions', type=int, default=3, help='--codealign: prompts (at most 3)')
    ap.add_argument('--demos', type=int, default=10, help='--codealign: manual demonstrations in each prompt')
    ap.add_argument('--n-ctx', type=int, default=8192, help='--codealign: context window')
    a = ap.parse_args()
    if a.make_names: return make_names(a.make_names, a.names)
    if a.codealign:
        max_tokens = a.max_tokens if '--max-tokens' in sys.argv else 128
        repeats = a.repeats if '--repeats' in sys.argv else 1
        return bench_codealign(a.model, a.questions, a.demos, max_tokens, repeats, a.n_ctx)
    if not (a.grammar and a.prompt): ap.error('give a GBNF file and a prompt file (or --make-names DIR)')
    engines = [e for e in a.engines.split(',') if e]
    if bad := set(engines) - set(ENGINES): ap.error(f'unknown engines {bad}; known: {ENGINES}')
    bench(a.grammar, a.prompt, a.model, a.max_tokens, a.repeats, engines)


if __name__ == '__main__':
    main()
