"""Build the documentation site from the notebooks (`make docs`), the way `nbdev_docs` would without quarto.

    python scripts/build_docs.py [--site _docs] [--proc _proc] [--no-examples] [--workers 2]
    python scripts/build_docs.py --readme [--check]     # write README.md from nbs/index.ipynb (or only compare)

quarto, which `nbdev_docs` renders with, cannot be installed on these machines (its PyPI package downloads the binary at
build time, and no other registry carries it). So the site is built in two steps:

1. nbdev's own processing, what `nbdev_proc_nbs` runs before quarto: each notebook in nbs/ and nbs/experiments/
   (whatever is there: no list is kept) goes through `nbdev.processors.FilterDefaults`, which turns the title cell into
   frontmatter, inserts a `show_doc` cell after every exported function and class (`add_show_docs`), executes them so
   that every exported name's signature, docments and docstring are on its page, links backticked names to their pages
   (`add_links`), and drops `#| export`/`#| hide` cells. One processor is replaced: in place of `exec_show_docs` (which
   runs the export, import and show_doc cells), the numbered component notebooks run every cell that `nbdev_test` runs
   (same skip flags; `#| data` cells only when the benchmark data is there), in order and in the same shell, so that
   their examples show their outputs (`--no-examples`: only what exec_show_docs runs). nbdev stops the build at any
   failing cell, and exec_show_docs alone fails on every notebook with a cell that imports and uses an earlier cell's
   name (nbdev's FAQ: "cells containing imports and other code"); here only a failing export or show_doc cell stops it,
   other failures are named in the log and the cells after them shown without outputs. Experiment notebooks
   (nbs/experiments/, a `skip_exec` frontmatter: papermill notebooks) and notebooks without exports never run a cell:
   they are rendered as committed.
2. The quarto-specific parts of the processed notebooks are translated (frontmatter -> title cell, `#| echo: false`
   -> a `remove_input` tag, directive comments dropped, links to the doc host made relative) and the site is rendered
   by MkDocs with mkdocs-material and mkdocs-jupyter (nbconvert under the hood), all plain PyPI wheels. Chosen over
   bare nbconvert pages because it gives the navigation sidebar, per-page table of contents and a search that works
   from file:// (material's `offline` plugin) without writing a theme; Google fonts are off, the search's iframe-worker
   shim is a local copy (scripts/docs_assets/), there is no repo_url (material would query the GitHub API) and MathJax
   points at a local empty file, so a site opened offline loads nothing from the network. The results page is
   outputs/README.md with the figures it links, copied in. Pages are named as nbdev names them (`00_core` ->
   `core.html`), so the links that `add_links` writes resolve.

The home page is nbs/index.ipynb, which is also README.md's source (settings.ini readme_nb): `--readme` joins its
markdown cells into README.md, byte for byte (tests/test_docs.py checks that README.md is that file). The README's
long parts are the markdown-only pages nbs/guide.ipynb and nbs/results_notes.ipynb, which the navigation lists next to
Home and the results page.
"""
from __future__ import annotations
import argparse, json, os, re, shutil, subprocess, sys, time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT/'nbs'
EXPERIMENTS = NBS/'experiments'  # the papermill notebooks: the site's Experiments section
README_NB = 'index.ipynb'
GUIDE_NB, NOTES_NB = 'guide.ipynb', 'results_notes.ipynb'  # the README's details (markdown only): in the nav by Home
DATA_FLAG = 'data'
DATA_FILES = ('metaqa/kb.txt', 'kopl/example_kb.json', 'kqapro/test.json')  # as tests/test_notebooks.py


# ---------------------------------------------------------------- README.md from nbs/index.ipynb
def readme_text(nb_path: Path = NBS/README_NB) -> str:
    "README.md's text: index.ipynb's markdown cells, joined by a blank line, ending in one newline."
    nb = json.loads(nb_path.read_text(encoding='utf-8'))
    parts = [''.join(c['source']).strip('\n') for c in nb['cells'] if c['cell_type'] == 'markdown']
    return '\n\n'.join(p for p in parts if p) + '\n'


def write_readme(check: bool = False) -> int:
    text, path = readme_text(), ROOT/'README.md'
    if check:
        same = path.exists() and path.read_text(encoding='utf-8') == text
        print('README.md is up to date' if same else 'README.md differs from nbs/index.ipynb: run `make readme`')
        return 0 if same else 1
    path.write_text(text, encoding='utf-8')
    print(f'wrote README.md from nbs/{README_NB} ({len(text.encode())} bytes)')
    return 0


# ---------------------------------------------------------------- step 1: nbdev's processing (one process per notebook)
def notebooks() -> list[Path]:
    """Every notebook in nbs/ (as nbdev globs them with settings.ini's recursive = False: no `_`/`.` names), then the
    experiment notebooks in nbs/experiments/. The site's pages are one flat folder, so no two may share a name."""
    nbs = [p for folder in (NBS, EXPERIMENTS) for p in sorted(folder.glob('*.ipynb'))
           if not p.name.startswith(('_', '.'))]
    dup = sorted({p.name for p in nbs if [q.name for q in nbs].count(p.name) > 1})
    if dup: raise SystemExit(f'notebooks with the same name in nbs/ and nbs/experiments/: {", ".join(dup)}')
    return nbs


def is_component(nb: Path) -> bool: return bool(re.match(r'\d+_', nb.name))


def page_names(nbs: list[Path]) -> dict[str, str]:
    """nbs/<name>.ipynb (or nbs/experiments/<name>.ipynb) -> the site's page, named as nbdev names it (`00_core` ->
    `core.html`: the doc links that `add_links` writes point there). A notebook whose name is taken by a component's
    page (`report` beside `34_report`) is `<name>_notebook.html`."""
    names = {p.name: re.sub(r'^\d+_', '', p.stem) + '.html' for p in nbs}
    taken = {names[p.name] for p in nbs if is_component(p)}
    return {k: (v.replace('.html', '_notebook.html') if v in taken and not is_component(NBS/k) else v)
            for k, v in names.items()}


def package_of(nb: Path) -> str:
    "A component notebook's subpackage, from its dotted name (`11_kopl.executor` -> `kopl`); '' for a top module."
    stem = re.sub(r'^\d+_', '', nb.stem)
    return stem.split('.')[0] if '.' in stem else ''


def by_package(components: list) -> list:
    "The Components section of the navigation: top modules first, then one sub-section per subpackage, in order."
    out, sections = [], {}
    for pkg, entry in components:
        if not pkg: out.append(entry)
        else: sections.setdefault(pkg, []).append(entry)
    return out + [{f'kgqa_nb.{pkg}': entries} for pkg, entries in sections.items()]


def have_data() -> bool:
    from kgqa_nb.core import data_dir
    try: return all(data_dir(f).exists() for f in DATA_FILES)
    except FileNotFoundError: return False


def _essential(cell) -> bool:
    "Cells nbdev_docs itself must run: exported code and show_doc (the signatures come from them)."
    from nbdev.processors import _show_docs
    d = getattr(cell, 'directives_', {}) or {}
    if d.keys() & {'export', 'exports', 'exporti', 'exec_doc'}: return True
    trees = cell.parsed_()
    return bool(trees and _show_docs(trees))


def exec_cells(examples: bool, data: bool):
    "A processor in place of nbdev's `exec_show_docs` (same shell, same cells), optionally running the examples too."
    from execnb.shell import CaptureShell
    from nbdev.config import get_config
    from nbdev.process import Processor
    from nbdev.processors import _do_eval, cell_lang
    flags = set(get_config().tst_flags.split()) - ({DATA_FLAG} if data else set())

    def skipped(cell):  # nbdev_test's rule: other flags, `#| eval: false`, the export call
        d = getattr(cell, 'directives_', {}) or {}
        return ('nbdev_export' + '(' in cell.source or d.get('eval:', [''])[0].lower() == 'false'
                or bool(flags & d.keys()))

    class _exec(Processor):
        """exec_show_docs runs exports, imports and show_doc cells; with examples on, every cell nbdev_test runs, in
        order, in the one shell, so that examples show their outputs. nbdev stops the whole build at a failing cell;
        here only a failing export or show_doc cell does: after any other failure the rest of the examples are shown
        without outputs (the build log names the notebook and the cell), since tests/test_notebooks.py is the place
        where a notebook's examples must pass."""
        def begin(self):
            self.failed = ''
            # as exec_show_docs: nothing runs in a notebook without exports or show_doc cells; and never in one with a
            # `skip_exec` frontmatter (the papermill experiments: rendered as committed)
            fm = getattr(self.nb, 'frontmatter_', {}) or {}
            self.active = (bool(getattr(self.nb, 'has_docs_', None)) and str(fm.get('skip_exec', '')).lower() != 'true'
                           and str(fm.get('skip_showdoc', '')).lower() != 'true')
            if not self.active: return
            self.k = CaptureShell(self.nb.path_)
            self.k.run_cell('from nbdev.showdoc import show_doc')
        def __call__(self, cell):
            if not self.active: return
            if cell.cell_type != 'code' or cell_lang(cell) != 'python' or not cell.source: return
            if (getattr(cell, 'directives_', {}) or {}).get('eval:', [''])[0].lower() == 'false': return
            essential = _essential(cell)
            if examples and not self.failed: run = essential or not skipped(cell)
            else: run = essential or (bool(_do_eval(cell)) and not skipped(cell))
            if not run: return
            self.k.cell(cell)
            if self.k.exc is None: return
            err = f'cell {cell.idx_}: {type(self.k.exc).__name__}: {self.k.exc}'.splitlines()[0][:200]
            if essential: raise Exception(f'{Path(self.nb.path_).name}, {err}:\n{cell.source}') from self.k.exc
            cell.outputs = []
            self.failed = self.failed or err
        def end(self): self.nb.examples_failed_ = self.failed
    return _exec


def process_one(args) -> tuple[str, float, str]:
    "nbs/<name>.ipynb -> <proc>/<name>.ipynb through nbdev's FilterDefaults (what nbdev_proc_nbs does per notebook)."
    src, dst, examples, data = args
    src, dst = Path(src), Path(dst)
    t = time.time()
    os.environ['IN_TEST'] = '1'  # as nbdev.serve_drv does while processing
    os.chdir(src.parent)  # as nbdev_test and papermill --cwd: notebooks' relative paths start in their own folder
    import matplotlib; matplotlib.use('Agg')
    from execnb.nbio import read_nb, write_nb
    from nbdev.processors import FilterDefaults, exec_show_docs, strip_ansi
    nb = read_nb(src)
    runner = exec_cells(examples and is_component(src), data)

    class Filter(FilterDefaults):
        def base_procs(self):
            procs = [runner if p is exec_show_docs else p for p in super().base_procs()]
            return procs + [strip_ansi]  # again: the examples' outputs came after nbdev's strip_ansi
    Filter()(nb)
    write_nb(nb, dst)
    return src.name, time.time() - t, getattr(nb, 'examples_failed_', '')


# ---------------------------------------------------------------- step 2: quarto-isms -> MkDocs pages
_DIRECTIVE = re.compile(r'^\s*#\|.*$\n?', re.MULTILINE)


_ATTR_LINK = re.compile(r'\[([^\]]+)\]\(([^)\s]+)\)\{([^}]*)\}')  # pandoc's [text](url){attrs}: quarto only
_LINK = re.compile(r'\]\(([\w.-]+\.html)#([^)\s]+)\)')


def _md(s) -> str: return ''.join(s) if isinstance(s, list) else (s or '')


def headings(proc_nb: Path) -> set[str]:
    "The anchors of a processed notebook's `show_doc` sections (lower-cased names, as in nbdev's links)."
    nb = json.loads(proc_nb.read_text(encoding='utf-8'))
    outs = [_md(o.get('data', {}).get('text/markdown')) for c in nb['cells'] for o in c.get('outputs', [])]
    return {h.lower() for md in outs for h in re.findall(r'^#{2,4} (\S+)\s*$', md, re.MULTILINE)}


def _anchor(page: str, a: str, anchors: dict) -> str:
    "A method's link (`kg.html#kg.find`) goes to its class's section when the method has no section of its own."
    have = anchors.get(page)
    if have is None or a in have or '.' not in a: return a
    return a.split('.')[0] if a.split('.')[0] in have else a


def _fix_md(md: str, doc_prefix: str, anchors: dict) -> str:
    "Links to the doc host made relative (and to an existing section); pandoc link attributes as HTML."
    md = md.replace(doc_prefix, '')
    md = _LINK.sub(lambda m: '](' + m[1] + '#' + _anchor(m[1], m[2], anchors) + ')', md)
    return _ATTR_LINK.sub(lambda m: f'<a href="{m[2]}" {m[3]}>{m[1]}</a>', md)


def to_page(proc_nb: Path, doc_prefix: str, anchors: dict) -> tuple[dict, str, str]:
    "(notebook json for mkdocs-jupyter, title, description) from a processed notebook."
    import yaml
    nb = json.loads(proc_nb.read_text(encoding='utf-8'))
    cells, title, desc = [], proc_nb.stem, ''
    for c in nb['cells']:
        src = _md(c.get('source'))
        if c['cell_type'] == 'raw':
            m = re.match(r'^---\s*\n(.*?)\n---\s*$', src.strip(), re.DOTALL)
            if m:
                fm = yaml.safe_load(m.group(1)) or {}
                title, desc = str(fm.get('title', title)), str(fm.get('description', '') or '')
                head = f'# {title}' + (f'\n\n> {desc}' if desc else '')
                cells.append({'cell_type': 'markdown', 'metadata': {}, 'source': head})
            continue  # other raw cells are not shown (quarto passes them to its own output format)
        if not src.strip() and not c.get('outputs'): continue  # cells nbdev emptied (export, hide)
        if c['cell_type'] == 'markdown':
            if src.strip().startswith('<!-- WARNING: THIS FILE WAS AUTOGENERATED'): continue
            c['source'] = _fix_md(src, doc_prefix, anchors)
        elif c['cell_type'] == 'code':
            tags = list(c.get('metadata', {}).get('tags', []))
            if re.search(r'^#\|\s*echo:\s*false', src, re.MULTILINE): tags.append('remove_input')
            c['source'] = _DIRECTIVE.sub('', src).strip('\n')
            if not c['source'] and not c.get('outputs'): continue
            c.setdefault('metadata', {})['tags'] = tags
            for o in c.get('outputs', []):
                if 'text/markdown' in o.get('data', {}):
                    o['data']['text/markdown'] = _fix_md(_md(o['data']['text/markdown']), doc_prefix, anchors)
        cells.append(c)
    nb['cells'] = cells
    return nb, title, desc


def local_refs(md: str) -> list[str]:
    "Targets of markdown links and images in `md` that are local files."
    refs = re.findall(r'\]\(([^)\s]+)\)', md) + re.findall(r'(?:src|href)="([^"]+)"', md)
    return [r.split('#')[0] for r in refs if not re.match(r'^[a-z]+:|^#|^/', r) and r.split('#')[0]]


def mkdocs_yml(cfg, nav: list, docs: Path, site: Path, cache: Path) -> str:
    import yaml
    conf = {
        # no repo_url: material would ask the GitHub API for the repository's stars on every page view
        'site_name': cfg.title, 'site_description': cfg.description,
        'docs_dir': str(docs), 'site_dir': str(site), 'use_directory_urls': False, 'strict': False,
        'theme': {'name': 'material', 'font': False, 'features': ['navigation.sections', 'navigation.top', 'toc.follow'],
                  'palette': {'primary': 'indigo'}},
        'markdown_extensions': ['tables', 'toc', 'admonition', 'pymdownx.superfences', 'attr_list'],
        'plugins': [
            {'search': {}},
            {'offline': {}},  # search index inlined: search works from file:// too
            {'mkdocs-jupyter': {'include': ['*.ipynb'], 'ignore_h1_titles': False, 'include_source': False, 'no_prompt': True,
                                'remove_tag_config': {'remove_input_tags': ['remove_input']},
                                'custom_mathjax_url': 'assets/no-mathjax.js', 'toc_depth': 3,
                                'cache': True, 'cache_dir': str(cache)}},
        ],
        'nav': nav,
        'extra': {'polyfills': ['assets/javascripts/iframe-worker-shim.js']},  # else the offline plugin takes unpkg's
    }
    return yaml.safe_dump(conf, sort_keys=False, allow_unicode=True)


def build(site: Path, proc: Path, examples: bool, workers: int, render_only: bool = False) -> int:
    t0 = time.time()
    sys.path.insert(0, str(ROOT))
    from nbdev.config import get_config
    cfg = get_config(path=ROOT)
    doc_prefix = f'{cfg.doc_host}{cfg.doc_baseurl}'.rstrip('/') + '/'
    nbs, data = notebooks(), have_data() if examples else False
    raw = proc/'nbs'
    if render_only: return render(site, proc, cfg, doc_prefix, nbs, t0, [])
    shutil.rmtree(raw, ignore_errors=True); raw.mkdir(parents=True)
    print(f'processing {len(nbs)} notebooks with nbdev (examples {"run" if examples else "not run"}, '
          f'data cells {"run" if data else "skipped"}, {workers} workers)', flush=True)
    jobs = [(str(p), str(raw/p.name), examples, data) for p in nbs]
    ctx = get_context('spawn')
    failed = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, max_tasks_per_child=1) as ex:
        for name, secs, err in ex.map(process_one, jobs):
            print(f'  {name:28s} {secs:6.1f}s' + (f'  {err}: this cell and the examples after it are shown without outputs' if err else ''),
                  flush=True)
            if err: failed.append(name)
    return render(site, proc, cfg, doc_prefix, nbs, t0, failed)


def render(site: Path, proc: Path, cfg, doc_prefix: str, nbs: list[Path], t0: float, failed: list[str]) -> int:
    "Step 2: the processed notebooks in <proc>/nbs -> MkDocs pages in <proc>/docs -> the site."
    raw = proc/'nbs'
    docs = proc/'docs'
    shutil.rmtree(docs, ignore_errors=True); (docs/'assets').mkdir(parents=True)
    (docs/'assets'/'no-mathjax.js').write_text('// MathJax is not loaded: the site must open offline\n')
    (docs/'assets'/'javascripts').mkdir()
    shutil.copy2(ROOT/'scripts'/'docs_assets'/'iframe-worker-shim.js', docs/'assets'/'javascripts')
    components, experiments, home, docs_pages = [], [], None, {}
    pages = page_names(nbs)
    page_of = lambda p: pages[p.name].replace('.html', '.ipynb')
    anchors = {pages[p.name]: headings(raw/p.name) for p in nbs}
    for p in nbs:
        nb, title, desc = to_page(raw/p.name, doc_prefix, anchors)
        page = Path(page_of(p))
        (docs/page).write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding='utf-8')
        if p.name == README_NB: home = str(page)
        elif p.name in (GUIDE_NB, NOTES_NB): docs_pages[p.name] = {title: str(page)}
        elif is_component(p): components.append((package_of(p), {title: str(page)}))
        else: experiments.append({title: str(page)})

    results = ROOT/'outputs'/'README.md'
    nav = [{'Home': home or 'index.ipynb'}] + ([docs_pages[GUIDE_NB]] if GUIDE_NB in docs_pages else [])
    if results.exists():
        md = results.read_text(encoding='utf-8')
        (docs/'outputs').mkdir()
        (docs/'outputs'/'index.md').write_text(md, encoding='utf-8')
        for ref in local_refs(md):
            f = (results.parent/ref).resolve()
            if f.is_file() and ROOT in f.parents:
                (docs/'outputs'/ref).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, docs/'outputs'/ref)
        nav.append({'Results': 'outputs/index.md'})
    nav += ([docs_pages[NOTES_NB]] if NOTES_NB in docs_pages else []) + [{'Components': by_package(components)},
                                                                        {'Experiments': experiments}]
    yml = proc/'mkdocs.yml'
    yml.write_text(mkdocs_yml(cfg, nav, docs, site.resolve(), proc/'mkdocs-jupyter-cache'), encoding='utf-8')
    shutil.rmtree(site, ignore_errors=True)
    env = {**os.environ, 'NO_MKDOCS_2_WARNING': '1'}
    r = subprocess.run([sys.executable, '-m', 'mkdocs', 'build', '-q', '-f', str(yml)], env=env)
    if r.returncode: return r.returncode
    (site/'build.json').write_text(json.dumps({'started': t0, 'notebooks': [p.name for p in nbs]}) + '\n')
    print(f'site written to {site}/index.html ({len(nbs)} notebooks, {time.time() - t0:.0f} s)'
          + (f'; examples failed in {", ".join(failed)}' if failed else ''))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--site', default=str(ROOT/'_docs'), help='output folder (default _docs)')
    ap.add_argument('--proc', default=str(ROOT/'_proc'), help='intermediate folder (default _proc)')
    ap.add_argument('--no-examples', action='store_true', help="don't run the component notebooks' examples")
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--render-only', action='store_true', help='reuse the processed notebooks in <proc>/nbs')
    ap.add_argument('--readme', action='store_true', help='write README.md from nbs/index.ipynb and stop')
    ap.add_argument('--check', action='store_true', help='with --readme: only check that README.md is current')
    a = ap.parse_args(argv)
    if a.readme: return write_readme(a.check)
    return build(Path(a.site), Path(a.proc), not a.no_examples, a.workers, a.render_only)


if __name__ == '__main__': sys.exit(main())
