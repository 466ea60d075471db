"""The documentation site (`make docs`, scripts/build_docs.py) and README.md's source (nbs/index.ipynb).

The site is `_docs/` when that build started after the last change to the notebooks, outputs/README.md, settings.ini and
the build script (a fresh `make docs`); otherwise the test builds one into a temporary folder with `--no-examples` (the
component notebooks' examples are not run: about 3 minutes on 2 cores instead of 4 to 5). Checked on every page of the
site, from the files: a page for each notebook in nbs/ and nbs/experiments/ and for the results page, no local href/src
that resolves to no file, no asset (script, stylesheet, image, font) loaded from the network. Then headless Chromium
(Debian's `chromium`, driven by the PyPI package `playwright`) opens the home page, one component page and the results
page from file://, and checks that no request fails, no <img> is missing (naturalWidth > 0), no local link resolves to
no file and the console shows no error; it saves a screenshot of each page (and of its first figure, if it has one) in
`_docs/screenshots/` (git-ignored). Without Chromium (or playwright) the browser test skips with one reason; under CI
(`CI=true`) that is a failure instead."""
import ast, json, re, shutil, subprocess, sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse
import pytest
from conftest import IN_CI

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/'scripts'))
import build_docs  # noqa: E402

SHOTS = ROOT/'_docs'/'screenshots'
BROWSER_SKIP = 'no headless Chromium: run scripts/install_browser.sh (Debian package chromium) and pip install playwright'


def test_readme_is_generated_from_index_notebook():
    "README.md is nbs/index.ipynb's markdown, byte for byte: edit the notebook, then `make readme`."
    assert (ROOT/'README.md').read_text(encoding='utf-8') == build_docs.readme_text(), \
        'README.md is not the export of nbs/index.ipynb: edit nbs/index.ipynb, then run `make readme`'


def test_index_notebook_is_markdown_only():
    "The home page needs no data and no LLM: index.ipynb holds markdown cells only."
    nb = json.loads((ROOT/'nbs'/'index.ipynb').read_text(encoding='utf-8'))
    assert {c['cell_type'] for c in nb['cells']} == {'markdown'}


def _inputs_mtime() -> float:
    files = [*build_docs.notebooks(), ROOT/'outputs'/'README.md', ROOT/'scripts'/'build_docs.py', ROOT/'settings.ini']
    return max(f.stat().st_mtime for f in files if f.exists())


@pytest.fixture(scope='module')
def site(tmp_path_factory) -> Path:
    docs, stamp = ROOT/'_docs', ROOT/'_docs'/'build.json'  # build.json: when that build started
    if stamp.exists() and json.loads(stamp.read_text())['started'] > _inputs_mtime(): return docs
    out = tmp_path_factory.mktemp('docs')
    r = subprocess.run([sys.executable, str(ROOT/'scripts'/'build_docs.py'), '--no-examples', '--site', str(out/'site'),
                        '--proc', str(out/'proc')], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, f'the site build failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}'
    return out/'site'


class _Refs(HTMLParser):
    "href/src of a page's elements, and the external ones that the page would load (scripts, styles, images, fonts)."
    def __init__(self):
        super().__init__(); self.refs, self.loads = [], []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ('href', 'src'):
            if a.get(k): self.refs.append(a[k])
        loaded = a.get('src') if tag in ('script', 'img', 'iframe', 'source') else (
            a.get('href') if tag == 'link' and a.get('rel', '') in ('stylesheet', 'preload', 'icon', 'preconnect') else None)
        if loaded and re.match(r'^(https?:)?//', loaded): self.loads.append(f'<{tag}> {loaded}')


def _broken(page: Path, refs) -> list[str]:
    bad = []
    for r in refs:
        u = urlparse(r)
        if u.scheme or r.startswith(('#', '//')) or not u.path: continue  # external, anchors, data: URIs
        target = (page.parent/unquote(u.path)).resolve()
        if not target.exists(): bad.append(r)
    return bad


def test_site_pages(site):
    "A page for every notebook in nbs/ and nbs/experiments/ (whatever they hold) and the results page with its figures."
    pages = build_docs.page_names(build_docs.notebooks())
    assert len(set(pages.values())) == len(pages)
    for nb, page in pages.items(): assert (site/page).exists(), f'no page for {nb}'
    results = site/'outputs'/'index.html'
    assert results.exists()
    pngs = re.findall(r'!\[[^\]]*\]\(([^)]+\.png)\)', (ROOT/'outputs'/'README.md').read_text(encoding='utf-8'))
    assert pngs and all((site/'outputs'/p).is_file() for p in pngs)


def test_experiment_notebooks_not_executed(site):
    "Experiment notebooks (papermill, `skip_exec`) are rendered as committed: no cell of theirs ran, so no outputs."
    for nb in build_docs.notebooks():
        if build_docs.is_component(nb) or nb.name == build_docs.README_NB: continue
        html = (site/build_docs.page_names(build_docs.notebooks())[nb.name]).read_text(encoding='utf-8')
        assert not re.search(r'class="[^"]*jp-OutputArea-output', html), f'{nb.name} was executed while building the site'


def test_component_pages_show_signatures(site):
    "add_show_docs/exec_show_docs ran: every component page with exports documents each exported public function."
    for nb in build_docs.notebooks():
        if not build_docs.is_component(nb): continue
        cells = json.loads(nb.read_text(encoding='utf-8'))['cells']
        names = set()
        for c in cells:
            src = ''.join(c['source'])
            if (c['cell_type'] != 'code' or not re.search(r'^#\|\s*exports?\b', src, re.MULTILINE)
                    or re.search(r'^#\|\s*hide\b', src, re.MULTILINE)): continue
            try: tree = ast.parse(src)
            except SyntaxError: continue
            names |= {o.name for o in tree.body if isinstance(o, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and not o.name.startswith('_') and not any('patch' in ast.unparse(d) for d in o.decorator_list)}
        html = (site/build_docs.page_names(build_docs.notebooks())[nb.name]).read_text(encoding='utf-8')
        missing = sorted(n for n in names if not re.search(rf'<h[34][^>]*id="{re.escape(n.lower())}"', html))
        assert not missing, f'{nb.name}: no show_doc section for {missing}'


def test_no_broken_links_no_network_assets(site):
    "Every local href/src on every page resolves to a file; nothing is loaded from the network."
    broken, loads = {}, {}
    for page in site.rglob('*.html'):
        if page.name == '404.html': continue  # a web server's error page: root-absolute links by design
        p = _Refs(); p.feed(page.read_text(encoding='utf-8'))
        if b := _broken(page, p.refs): broken[str(page.relative_to(site))] = b[:5]
        if p.loads: loads[str(page.relative_to(site))] = p.loads[:5]
    assert not broken, f'local links that resolve to no file: {broken}'
    assert not loads, f'assets loaded from the network: {loads}'


def _chromium() -> str | None:
    exe = shutil.which('chromium') or shutil.which('chromium-browser')
    if exe and Path('/usr/lib/chromium/chromium').exists(): exe = '/usr/lib/chromium/chromium'  # Debian's wrapper skipped
    try: import playwright  # noqa: F401
    except ImportError: return None
    return exe


@pytest.mark.parametrize('page', ['index.html', 'core.html', 'outputs/index.html'])
def test_in_browser(site, page):
    exe = _chromium()
    if exe is None:
        if IN_CI: pytest.fail(f'{BROWSER_SKIP} (CI=true needs it)')
        pytest.skip(BROWSER_SKIP)
    from playwright.sync_api import sync_playwright
    path = site/page
    assert path.exists(), page
    errors, failed = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=['--no-sandbox'])
        try:
            pg = browser.new_page(viewport={'width': 1280, 'height': 900})
            pg.on('console', lambda m: errors.append(m.text) if m.type == 'error' else None)
            pg.on('pageerror', lambda e: errors.append(str(e)))
            pg.on('requestfailed', lambda r: failed.append(f'{r.url} ({r.failure})'))
            pg.goto(path.as_uri(), wait_until='load')
            imgs = pg.evaluate("""() => [...document.images].map(i => {
                i.scrollIntoView(); return [i.currentSrc.slice(0, 120), i.complete, i.naturalWidth]})""")
            pg.wait_for_load_state('networkidle')
            imgs = pg.evaluate("() => [...document.images].map(i => [i.currentSrc.slice(0, 120), i.complete, i.naturalWidth])")
            refs = pg.evaluate("() => [...document.querySelectorAll('[href],[src]')].map(e => e.href || e.src)")
            pg.evaluate('window.scrollTo(0, 0)')
            pg.wait_for_timeout(500)  # the header's title settles after a scroll
            SHOTS.mkdir(parents=True, exist_ok=True)
            shot = SHOTS/(page.replace('/', '_').replace('.html', '.png'))
            pg.screenshot(path=str(shot))
            if imgs:  # and the first figure, scrolled into view
                pg.locator('article img').first.screenshot(path=str(shot.with_name(shot.stem + '_figure.png')))
        finally: browser.close()
    missing = [s for s, ok, w in imgs if not ok or w == 0]
    local = [unquote(urlparse(r).path) for r in refs if r.startswith('file:')]
    broken = [r for r in local if not Path(r).exists()]
    assert not failed, f'{page}: failed requests {failed[:5]}'
    assert not missing, f'{page}: images that did not load {missing[:5]}'
    assert not broken, f'{page}: local links to no file {broken[:5]}'
    assert not errors, f'{page}: console errors {errors[:5]}'
    if page == 'outputs/index.html': assert len(imgs) >= 5, f'the results page shows {len(imgs)} figures'


def public_callables_without_docstring() -> list[str]:
    "Every function and class in a module's `__all__`, and their public methods and properties, that has no docstring."
    import importlib, inspect, pkgutil, kgqa_nb
    missing = []
    for info in pkgutil.walk_packages(kgqa_nb.__path__, 'kgqa_nb.'):
        if info.name.endswith('_modidx'): continue
        mod = importlib.import_module(info.name)
        for name in getattr(mod, '__all__', []):
            obj = getattr(mod, name, None)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or obj.__module__ != mod.__name__: continue
            if not (obj.__doc__ or '').strip(): missing.append(f'{info.name}.{name}')
            if not inspect.isclass(obj): continue
            for attr, value in vars(obj).items():
                fn = value.fget if isinstance(value, property) else getattr(value, '__func__', value)
                if not attr.startswith('_') and inspect.isfunction(fn) and not (fn.__doc__ or '').strip():
                    missing.append(f'{info.name}.{name}.{attr}')
    return missing


def test_every_public_callable_is_documented():
    "The site documents every public function, class, method and property: each has a docstring its page shows."
    assert not public_callables_without_docstring(), public_callables_without_docstring()
